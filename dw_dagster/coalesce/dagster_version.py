"""The dagster release dw-dagster's uses of Dagster's internals were verified on, and the check each use
makes: the Coalesce integration's (``dagster_internals``) and the product's (``dw_dagster/internals.py``), so
that one constant moves when Dagster is upgraded (docs/production.md, "Upgrading Dagster").

Each internals module calls :func:`require_verified_dagster` before its private imports: on another release
loading fails, naming the concern and both releases, rather than falling back quietly. The optional fast
paths live behind those modules, so they never run on a release they were not verified on.
"""

from __future__ import annotations

import dagster as dg

VERIFIED_DAGSTER_VERSION = "1.13.27"
"""The dagster release every private name dw-dagster imports, and each fast path, was verified on."""


class UnverifiedDagsterError(ImportError):
    """dw-dagster was loaded with a dagster release its use of Dagster's internals was not verified on."""


def require_verified_dagster(concern: str, version: str | None = None) -> None:
    """Raises :class:`UnverifiedDagsterError`, naming ``concern``, unless ``version`` (the installed
    dagster's by default) is the verified one. Each internals module calls it before its private imports."""
    version = dg.__version__ if version is None else version
    if version != VERIFIED_DAGSTER_VERSION:
        raise UnverifiedDagsterError(
            f"{concern}: dw-dagster uses Dagster's internals for this, verified on dagster "
            f"{VERIFIED_DAGSTER_VERSION} only, and this is dagster {version}. Install "
            f"dagster=={VERIFIED_DAGSTER_VERSION} (pyproject.toml pins it), or verify this release first "
            "(docs/production.md, 'Upgrading Dagster')."
        )
