"""What the commands read of the code location's configuration: the operations component's attributes
(``dw_dagster/app/defs/operations/defs.yaml``, templated from the environment) and the warehouse's database.

The commands read the same declaration the code location loads, so the two never disagree.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    context_file: Path | None
    metrics_file: Path | None
    database: str | None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings under ``environ`` (default: this process's environment)."""
        from dw_dagster.app.project import operations_component

        with _environment(environ):
            component = operations_component()
            database = os.environ.get("SNOWFLAKE_DATABASE") or None
        return cls(
            context_file=Path(component.context_file).resolve() if component.context_file else None,
            metrics_file=Path(component.metrics_file).resolve() if component.metrics_file else None,
            database=database,
        )


@contextmanager
def _environment(environ: Mapping[str, str] | None) -> Iterator[None]:
    # The component's templates read os.environ: present ``environ`` as the whole environment meanwhile.
    if environ is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
