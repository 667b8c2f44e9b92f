"""`dw-dagster ...` run as a person runs it: its own process, without the caller's world environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COALESCE_", "SNOWFLAKE_", "SLACK_", "DW_", "DAGSTER_"))
    }
    return subprocess.run(
        [sys.executable, "-c", "from dw_dagster.app.cli import run; run()", *args],
        cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
