"""Lint, format and types are part of the test command: ruff and mypy, with the project's settings in
pyproject.toml (mypy strict on the Coalesce integration, the shared records and the SQL leaf)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff(args):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


# What mypy checks strictly ([tool.mypy] in pyproject.toml); the modules they import are read, not reported.
TYPED = ["dw_dagster/coalesce", "dw_dagster/records", "dw_dagster/sql.py"]


def test_types():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", *TYPED], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
