"""Restart is neutral: the run sensor's cursor and every piece of state survive a restart of all processes.

One world, three processes watching it in turn, as a person's week goes: `dw-dagster world up --no-ui` (its
own daemon tick reports tonight's run), then the real `dagster-daemon` that `dagster dev` runs (it reports the
night played meanwhile), then everything stopped and `world up` again on the same root (servers restarted,
a new Dagster process). Counted in the instance and the incident store at the end: every Coalesce run
reported once, one checks run per Coalesce run, each incident once.

On the first world up, the commands a person runs beside it: `world status`, `slack log`, the world's
environment file with `stop` / `resume`, `world night`, `world down` (one world up for both: each costs the
suite a seeded world's copy, its servers and tonight's night).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.tags import RUN_KEY_TAG
from world_cache import WORLD_CACHE

from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet

pytestmark = pytest.mark.world

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
NIGHT = re.compile(r"night (\d+) \(\S+\): Coalesce job \S+ run (\d+) (\w+)")
CEILING = 600


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COALESCE_", "SNOWFLAKE_", "SLACK_", "DW_", "DAGSTER_"))
    }
    return subprocess.run(
        [str(VENV_BIN / "dw-dagster"), *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=CEILING,
    )


def _world_up(root: Path, cache: Path, cwd: Path) -> tuple[int, int, str]:
    up = _cli("world", "up", "--no-ui", "--free-ports", "--root", str(root), "--cache", str(cache), cwd=cwd)
    assert up.returncode == 0, up.stdout + up.stderr
    match = NIGHT.search(up.stdout)
    assert match and match[3] == "completed", up.stdout
    assert "local-coalesce-token" not in up.stdout + up.stderr, "tokens are never printed"
    return int(match[1]), int(match[2]), up.stdout


def _a_persons_commands(root: Path, up: str, cwd: Path) -> None:
    """`world status`, `slack log`, the environment file (its owner's only) with `stop` / `resume`."""
    assert "0 failed" in up, up
    status = _cli("world", "status", "--root", str(root), cwd=cwd)
    assert json.loads(status.stdout)["ports"]["coalesce"] > 0
    log = _cli("slack", "log", "--root", str(root), cwd=cwd)
    assert log.returncode == 0 and re.search(r"\d+ messages?\b", log.stdout), log.stdout[-500:]
    env_file = root / "world.env"
    assert f". {env_file}" in up and env_file.stat().st_mode & 0o077 == 0, "readable by its owner only"
    env = _env(root)
    assert env["DW_COST_LATENCY_HOURS"] == "0", "the local usage views have no lag to wait out"
    stop = _cli("stop", "--as", "Omar Haddad", "--reason", "test", cwd=cwd, env=env)
    assert stop.returncode == 0 and "STOPPED by Omar Haddad" in stop.stdout, stop.stderr
    resume = _cli("resume", "--as", "Omar Haddad", cwd=cwd, env=env)
    assert "running (resumed by Omar Haddad" in resume.stdout, resume.stdout + resume.stderr


def _env(root: Path) -> dict[str, str]:
    lines = (root / "world.env").read_text().splitlines()
    return {k: v.strip("'") for k, v in (line.split("=", 1) for line in lines)}


def _wait(what: str, condition, ceiling: float = CEILING):
    deadline = time.monotonic() + ceiling
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"{what}: not within {ceiling:.0f} s")


def test_a_second_world_up_after_the_daemon_reports_nothing_twice(
    seeded_template: Path, tmp_path: Path
) -> None:
    root = tmp_path / "local"
    cache = WORLD_CACHE.resolve()  # where the fixture built the template
    # 1. world up: the seeded world, tonight's run reported by world up's own daemon tick.
    first_night, first_run, up = _world_up(root, cache, tmp_path)
    _a_persons_commands(root, up, tmp_path)
    env = _env(root)
    instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
    daemon = None
    try:
        # 2. A night played while `dagster dev`'s daemon watches, as `world night` does.
        night = _cli("world", "night", "--root", str(root), cwd=tmp_path)
        assert night.returncode == 0, night.stdout + night.stderr
        assert f"night {first_night + 1} (" in night.stdout and "completed" in night.stdout, night.stdout
        second_run = int(re.search(r"Coalesce run (\d+)", night.stdout)[1])
        log = open(root / "logs" / "dagster-daemon.log", "ab")  # noqa: SIM115 - closed with the daemon
        daemon = subprocess.Popen(
            [str(VENV_BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
            cwd=REPO, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

        def checks_run_finished():
            runs = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: f"2:{second_run}"}))
            return runs and runs[0].is_finished and runs

        _wait(f"the daemon's checks run for Coalesce run {second_run}", checks_run_finished)
    finally:
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(60)
            log.close()
        down = _cli("world", "down", "--root", str(root), cwd=tmp_path)
        assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    assert "no world running" in _cli("world", "status", "--root", str(root), cwd=tmp_path).stdout
    # 3. Everything stopped; world up again on the same root: servers and Dagster start afresh.
    third_night, third_run, _ = _world_up(root, cache, tmp_path)
    _cli("world", "down", "--root", str(root), cwd=tmp_path)
    assert third_night == first_night + 2 and first_run < second_run < third_run

    reported: Counter[tuple[str, int]] = Counter()
    fct = dg.AssetKey(["inventory", "fct_inventory_position"])
    for key in instance.get_asset_keys():
        for record in instance.fetch_materializations(key, limit=1000).records:
            run_id = CoalesceRunMetadataSet.extract(record.asset_event.metadata).run_id
            if run_id is not None:
                reported[(key.to_user_string(), run_id)] += 1
    assert [n for n in reported.values() if n > 1] == [], "a Coalesce run reported twice"
    for run_id in (first_run, second_run, third_run):
        assert reported[(fct.to_user_string(), run_id)] == 1, run_id
        checks = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: f"2:{run_id}"}))
        assert len(checks) == 1, f"checks of Coalesce run {run_id} ran {len(checks)} times"
    keys = [r.tags[RUN_KEY_TAG] for r in instance.get_runs() if RUN_KEY_TAG in r.tags]
    assert [k for k, n in Counter(keys).items() if n > 1] == [], "a run key launched twice"
    # The cursor every process shared ends at the last run reported.
    cursor = json.loads(instance.get_instigator_state(*_sensor_ids(instance)).instigator_data.cursor)
    assert cursor["environments"]["2"]["high_water"] == third_run
    shutil.rmtree(root, ignore_errors=True)


def _sensor_ids(instance: dg.DagsterInstance) -> tuple[str, str]:
    (state,) = [s for s in instance.all_instigator_state() if s.name == "coalesce_run_sensor"]
    return state.instigator_origin_id, state.selector_id
