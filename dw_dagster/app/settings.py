"""What the commands read of the code location's configuration: the operations component's attributes
(``dw_dagster/app/defs/operations/defs.yaml``, templated from the environment) and the warehouse's database.

The commands read the same declaration the code location loads, its ``{{ env.X }}`` templates rendered as
the component loader renders them (Jinja's native templates with Dagster's ``env`` scope), so the two never
disagree (``tests/test_settings.py`` holds them side by side). They read the file itself rather than load
the component: loading it imports the whole code location (every job, sensor and storage the component
builds), which cost each command over a second before it had done anything; and they render the templates
without Dagster's resolver, whose import is Dagster's (~1.5 s of CPU) for the commands that read the ops
schema during an incident (``benchmarks/bench_cli_commands.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPERATIONS_DEFS = Path(__file__).resolve().parent / "defs" / "operations" / "defs.yaml"
OPERATIONS_TYPE = "dw_dagster.app.components.OperationsComponent"
READ = ("context_file", "metrics_file")
"""The attributes the commands read: plain strings, their templates in the ``env`` scope only."""


@dataclass(frozen=True)
class Settings:
    context_file: Path | None
    metrics_file: Path | None
    database: str | None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings under ``environ`` (default: this process's environment)."""
        with _environment(environ):
            attributes = operations_attributes()
            database = os.environ.get("SNOWFLAKE_DATABASE") or None
        context_file, metrics_file = attributes.get("context_file"), attributes.get("metrics_file")
        return cls(
            context_file=Path(context_file).resolve() if context_file else None,
            metrics_file=Path(metrics_file).resolve() if metrics_file else None,
            database=database,
        )


def operations_attributes(path: Path = OPERATIONS_DEFS) -> dict[str, Any]:
    """The attributes the commands read (``READ``) of the operations component in ``path``, their templates
    resolved against this process's environment as the component loader resolves them."""
    import yaml

    from dw_dagster.config import DwConfigError

    try:
        declared = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise DwConfigError(f"{path}: cannot read the operations component ({e})") from e
    if not isinstance(declared, dict) or declared.get("type") != OPERATIONS_TYPE:
        found = declared.get("type") if isinstance(declared, dict) else type(declared).__name__
        raise DwConfigError(f"{path}: type: expected {OPERATIONS_TYPE}, got {found!r}")
    attributes = declared.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise DwConfigError(f"{path}: attributes: expected a mapping, got {type(attributes).__name__}")
    return {name: _rendered(path, name, attributes[name]) for name in READ if name in attributes}


class _EnvScope:
    """``env`` in a template, as Dagster's ``EnvScope`` (dagster/components/resolved/scopes.py): ``env.X``
    is the variable or None, ``env('X', default)`` the variable or the default."""

    def __call__(self, key: str, default: Any = ...) -> Any:
        from dw_dagster.config import DwConfigError

        value = os.environ.get(key, default)
        if value is ...:
            raise DwConfigError(f"{key}: not set, and the template gives no default")
        return value

    def __getattr__(self, key: str) -> str | None:
        if key.startswith("jinja"):  # Jinja probes its globals for these
            raise AttributeError(key)
        return os.environ.get(key)


def _rendered(path: Path, name: str, value: Any) -> Any:
    """``value`` with its template rendered as the component loader renders it: an empty or non-string
    value as it is, a string by Jinja's native template, in the ``env`` scope."""
    from jinja2 import StrictUndefined, UndefinedError
    from jinja2.nativetypes import NativeEnvironment

    from dw_dagster.config import DwConfigError

    if not isinstance(value, str) or not value:
        return value
    try:
        return NativeEnvironment(undefined=StrictUndefined).from_string(value).render(env=_EnvScope())
    except UndefinedError as e:
        raise DwConfigError(f"{path}: attributes.{name}: {e.message} (the commands read only env.*)") from e


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
