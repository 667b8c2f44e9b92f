"""`dw-dagster scenario run` and `scenario score` on a world the public suite does not contain, written only
as files in the documented format (tests/scenarios/billing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from world_cache import WORLD_CACHE

pytestmark = pytest.mark.world
HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "billing_scenarios"


def _cli(*args: str, cwd, cache: Path = WORLD_CACHE) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("COALESCE_", "SNOWFLAKE_", "SLACK_", "DW_"))
    }
    return subprocess.run(
        [sys.executable, "-c", "from dw_dagster.app.cli import run; run()", *args, "--cache", str(cache)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_run_prints_each_night_and_what_was_detected(tmp_path):
    out = _cli("scenario", "run", str(SCENARIOS / "new_plan_unpriced.yaml"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["world"] == "billing" and report["history_nights"] == 6
    clean, night = report["nights"]
    assert clean["incidents"] == [] and clean["run_status"] == "completed"
    (incident,) = night["incidents"]
    assert incident["classification"] == "value_loss"
    assert incident["cause_keys"] == ["PLAN_CODE=SCALE"]
    assert incident["gap"]["gap_units"] == incident["gap"]["dropped_units"] > 0
    assert incident["time_to_detect_s"] > 0


def test_score_prints_the_table_beside_the_baseline(tmp_path):
    out = _cli("scenario", "score", str(SCENARIOS), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "1 scenarios over 1 worlds (billing)" in out.stdout
    assert "| recall | 1/1 (100%) |" in out.stdout
    assert "| root-cause accuracy | 1/1 (100%) | n/a (no diagnosis) |" in out.stdout
    assert "| billing-new-plan-unpriced | billing | 2 | 1 | 1 |" in out.stdout


def test_a_scenario_that_cannot_be_played_is_tried_again_then_named_as_errored_and_the_rest_are_played(
    tmp_path,
):
    # Two scenarios whose world cannot be made (the cache is a file): each is played twice, reported as errored
    # with what failed, the score still printed for the rest, and the exit says the score is incomplete.
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    text = (SCENARIOS / "new_plan_unpriced.yaml").read_text()
    text = text.replace("world: ../billing/world.yaml", f"world: {HERE / 'billing' / 'world.yaml'}")
    (scenarios / "a.yaml").write_text(text)
    (scenarios / "b.yaml").write_text(text.replace("name: billing-new-plan-unpriced", "name: the-second"))
    cache = tmp_path / "not-a-folder"
    cache.write_text("")
    out = _cli("scenario", "score", str(scenarios), cwd=tmp_path, cache=cache)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "2 more scenarios errored and are not in these figures (the score is incomplete):" in out.stdout
    for name, path in (("billing-new-plan-unpriced", "a.yaml"), ("the-second", "b.yaml")):
        assert f"- {name} ({scenarios / path}): NotADirectoryError" in out.stdout
        for attempt in (1, 2):
            assert f"{scenarios / path}: play {attempt} of 2 failed: NotADirectoryError" in out.stderr
    assert out.stderr.index(f"playing {scenarios / 'b.yaml'}") > out.stderr.index(
        "a.yaml: play 2 of 2 failed"
    )


def test_a_bad_scenario_exits_with_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"name: bad\nworld: {HERE / 'billing' / 'world.yaml'}\nnights: [{{events: [{{kind: partial_load}}]}}]\n"
    )
    out = _cli("scenario", "run", str(bad), cwd=tmp_path)
    assert out.returncode == 2
    assert f"{bad}: nights.0.events.0 (partial_load): table: Field required" in out.stderr


def test_a_night_a_world_cannot_play_exits_with_the_file_and_field(tmp_path):
    # No subscription ever has plan NOPE: the world's own values say so when the file loads, before any night.
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"name: bad\nworld: {HERE / 'billing' / 'world.yaml'}\nnights: [{{events: [{{kind: partial_load, "
        "table: SUBSCRIPTIONS, where: {PLAN_CODE: NOPE}}], expect: {class: [volume_loss]}}]\n"
    )
    out = _cli("scenario", "run", str(bad), cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert (
        f"{bad}: nights.0.events.0 (partial_load): where: SUBSCRIPTIONS.PLAN_CODE never holds 'NOPE' "
        "(its values: ENTERPRISE, STARTER, TEAM)" in out.stderr
    )
    assert "Traceback" not in out.stderr
