"""A world's quiet first night is played once and shared by every scenario that starts with it
(local/dw_local/scenarios/first_night.py): each scenario then reports the same first night it would have played
itself, and goes on from the world that night left."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from world_cache import WORLD_CACHE

from dw_local.played import OBSERVED
from dw_local.scenarios import first_night
from dw_local.scenarios.model import load_scenario
from dw_local.scenarios.observe import Observer
from dw_local.scenarios.runner import run_scenario

pytestmark = pytest.mark.world

HERE = Path(__file__).resolve().parent
UNPRICED = HERE / "billing_scenarios" / "new_plan_unpriced.yaml"


def _scenario(tmp_path: Path, name: str, nights: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nworld: {HERE / 'billing' / 'world.yaml'}\nnights:\n{nights}")
    return path


def _observed(night) -> tuple:
    return (
        night.run_id, night.run_status, night.monitored, [(a.asset, a.check, a.severity) for a in night.alarms],
        [(i.classification, i.cause_keys) for i in night.incidents], night.resolved,
    )  # fmt: skip


def _played(world: str) -> dict[Path, int]:
    """The kept quiet nights of ``world`` and when each was written."""
    folder = WORLD_CACHE / "first-night" / world
    return {p: (p / OBSERVED).stat().st_mtime_ns for p in folder.iterdir() if p.is_dir()}


def test_the_shared_first_night_is_the_night_a_scenario_plays_itself(tmp_path: Path) -> None:
    scenario = load_scenario(UNPRICED)
    world = scenario.world
    assert first_night.shareable(scenario)
    # Played by hand on a copy of the template, as the runner played every first night before.
    root = world.clone(WORLD_CACHE.resolve(), tmp_path / "own")
    with world.local_world(root) as lw:
        own = Observer(world, lw).play(scenario.night_index(0), [])
    shared_root, shared = first_night.clone_after(world, scenario.night_index(0), WORLD_CACHE, tmp_path / "a")
    assert _observed(shared) == _observed(own)
    assert (shared_root / "seeded.json").exists() and (shared_root / "dagster_home").is_dir()
    # Asked again, the night is not played again: the same kept observation, a new private copy.
    built = _played(world.name)
    again_root, again = first_night.clone_after(world, scenario.night_index(0), WORLD_CACHE, tmp_path / "b")
    assert _played(world.name) == built and len(built) == 1
    assert _observed(again) == _observed(shared) and again_root != shared_root
    shutil.rmtree(shared_root)
    shutil.rmtree(again_root)


def test_a_scenario_goes_on_from_the_shared_night_and_finds_its_fault(tmp_path: Path) -> None:
    report = run_scenario(UNPRICED, WORLD_CACHE)
    first, fault = report.nights
    assert first.events == [] and not first.fault and not first.incidents
    assert first.run_status == "completed" and fault.run_status == "completed"
    # The Coalesce run of the fault night is the one after the shared night's.
    assert fault.run_id == first.run_id + 1
    (incident,) = fault.incidents
    assert (incident.classification, incident.cause_keys[:1]) == ("value_loss", ["PLAN_CODE=SCALE"])


def test_a_first_night_with_events_or_a_repair_is_played_by_its_scenario(tmp_path: Path) -> None:
    event = "      - {kind: new_key_unmapped, table: SUBSCRIPTIONS, column: PLAN_CODE, value: SCALE, fraction: 0.1}\n"
    expect = '    expect: {class: [value_loss], cause_keys: ["PLAN_CODE=SCALE"]}\n'
    busy = _scenario(tmp_path, "busy-first", f"  - events:\n{event}{expect}")
    repaired = _scenario(tmp_path, "repaired-first", "  - {repair: true}\n")
    quiet = _scenario(tmp_path, "quiet-first", "  - {}\n")
    assert not first_night.shareable(load_scenario(busy))
    assert not first_night.shareable(load_scenario(repaired))
    assert first_night.shareable(load_scenario(quiet))
