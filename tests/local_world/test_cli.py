"""The commands a person runs: `dw-dagster world up --no-ui`, `world status`, `slack log`, the world's
environment file with `stop` / `resume`, `world night`, `world down`."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from cli_runner import run_cli
from world_cache import WORLD_CACHE

pytestmark = pytest.mark.world


def test_world_up_runs_tonight_and_leaves_the_servers_up(seeded_template, tmp_path):
    cache = WORLD_CACHE.resolve()  # where the fixture built the template
    root = tmp_path / "local"
    up = run_cli(
        "world", "up", "--no-ui", "--free-ports", "--root", str(root), "--cache", str(cache), cwd=tmp_path
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "night 60" in up.stdout and "completed" in up.stdout and "0 failed" in up.stdout
        assert "local-coalesce-token" not in up.stdout + up.stderr, "tokens are never printed"
        status = run_cli("world", "status", "--root", str(root), cwd=tmp_path)
        assert json.loads(status.stdout)["ports"]["coalesce"] > 0
        log = run_cli("slack", "log", "--root", str(root), cwd=tmp_path)
        assert log.returncode == 0 and re.search(r"^\d+ messages?$", log.stdout, re.M)
        env_file = root / "world.env"
        assert f". {env_file}" in up.stdout and env_file.stat().st_mode & 0o077 == 0, (
            "readable by its owner only"
        )
        env = {
            k: shlex.split(v)[0]
            for k, v in (line.split("=", 1) for line in env_file.read_text().splitlines())
        }
        assert env["DW_COST_LATENCY_HOURS"] == "0", "the local usage views have no lag to wait out"
        stop = run_cli("stop", "--as", "Omar Haddad", "--reason", "test", cwd=tmp_path, env=env)
        assert stop.returncode == 0 and "STOPPED by Omar Haddad" in stop.stdout, stop.stderr
        resume = run_cli("resume", "--as", "Omar Haddad", cwd=tmp_path, env=env)
        assert "running (resumed by Omar Haddad" in resume.stdout
        night = run_cli("world", "night", "--root", str(root), cwd=tmp_path)
        assert (
            night.returncode == 0 and "night 61 (2025-06-16)" in night.stdout and "completed" in night.stdout
        )
    finally:
        down = run_cli("world", "down", "--root", str(root), cwd=tmp_path)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert "no world running" in run_cli("world", "status", "--root", str(root), cwd=tmp_path).stdout


def test_refresh_without_a_token_names_the_variable(tmp_path):
    home = {"DAGSTER_HOME": str(tmp_path)}
    out = run_cli("coalesce", "refresh", cwd=tmp_path, env={**home, "COALESCE_ENVIRONMENT_IDS": "2"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error: COALESCE_API_TOKEN: not set" in out.stderr
    out = run_cli("coalesce", "refresh", cwd=tmp_path, env=home)
    assert out.returncode == 2 and "workspace.environment_ids: empty" in out.stderr
    out = run_cli("coalesce", "refresh", cwd=tmp_path)
    assert out.returncode == 2 and "DAGSTER_HOME: not set" in out.stderr
