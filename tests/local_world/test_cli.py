"""The commands a person runs: `dw-dagster world up --no-ui`, `world status`, `slack log`, `world down`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.world


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COALESCE_", "SNOWFLAKE_", "SLACK_", "DW_"))}
    return subprocess.run(
        [sys.executable, "-c", "from dw_dagster.cli import run; run()", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def test_world_up_runs_tonight_and_leaves_the_servers_up(seeded_template, tmp_path):
    cache = seeded_template.parent
    root = tmp_path / "local"
    up = _cli("world", "up", "--no-ui", "--free-ports", "--root", str(root), "--cache", str(cache), cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "night 60" in up.stdout and "completed" in up.stdout and "0 failed" in up.stdout
        assert "local-coalesce-token" not in up.stdout + up.stderr, "tokens are never printed"
        status = _cli("world", "status", "--root", str(root), cwd=tmp_path)
        assert json.loads(status.stdout)["ports"]["coalesce"] > 0
        log = _cli("slack", "log", "--root", str(root), cwd=tmp_path)
        assert log.returncode == 0 and "message(s)" in log.stdout
    finally:
        down = _cli("world", "down", "--root", str(root), cwd=tmp_path)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert "no world running" in _cli("world", "status", "--root", str(root), cwd=tmp_path).stdout


def test_refresh_without_a_token_names_the_variable(tmp_path):
    out = _cli("coalesce", "refresh", cwd=tmp_path)
    assert out.returncode == 2
    assert "COALESCE_API_TOKEN: not set" in out.stderr
