"""Where the code location finds its files and services: environment variables, with local defaults.

Secrets (tokens, passwords) are never read here: resources take them through ``dg.EnvVar`` so that Dagster
resolves them at run time and never shows them in the UI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dw_dagster.config import DwConfigError

DEFAULT_COALESCE_BASE_URL = "https://app.coalescesoftware.io"


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    context_file: Path | None
    metrics_file: Path | None
    database: str | None
    coalesce_base_url: str
    coalesce_environment_ids: tuple[str, ...]
    state_max_age_hours: float

    @property
    def coalesce_state_file(self) -> Path:
        return self.state_dir / "coalesce_workspace.json"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        ids = tuple(i.strip() for i in env.get("COALESCE_ENVIRONMENT_IDS", "").split(",") if i.strip())
        try:
            max_age = float(env.get("DW_STATE_MAX_AGE_HOURS", "24"))
        except ValueError as e:
            raise DwConfigError(
                f"DW_STATE_MAX_AGE_HOURS: expected a number of hours, got {env['DW_STATE_MAX_AGE_HOURS']!r}"
            ) from e
        context = env.get("DW_CONTEXT_FILE")
        metrics = env.get("DW_METRICS_FILE")
        return cls(
            state_dir=Path(env.get("DW_STATE_DIR", ".dw/state")).resolve(),
            context_file=Path(context).resolve() if context else None,
            metrics_file=Path(metrics).resolve() if metrics else None,
            database=env.get("SNOWFLAKE_DATABASE"),
            coalesce_base_url=env.get("COALESCE_BASE_URL", DEFAULT_COALESCE_BASE_URL).rstrip("/"),
            coalesce_environment_ids=ids,
            state_max_age_hours=max_age,
        )
