"""Plays part of the public suite once per test module (each scenario on a fresh copy of its world)."""

from __future__ import annotations

from world_cache import WORLD_CACHE

from dw_local.scenarios.runner import ScenarioReport, run_scenario
from dw_local.scenarios.score import score_reports
from dw_local.scenarios.suite import SUITE_DIR, scenario_files

# The fixtures play several scenarios in their setup: minutes, over pytest's default. The e-commerce faults
# (13 scenarios) took 459 s on 2 cores at load 3 and over 600 s at load 4-5; 15 minutes still fails a run
# that hangs rather than letting it pass unnoticed.
TIMEOUT = 900


def play(world: str, benign: bool | None = None) -> tuple[dict[str, ScenarioReport], dict]:
    """The world's suite scenarios (only the benign ones, or only those with faults, when asked)."""
    paths = [
        p
        for p in scenario_files(SUITE_DIR / world)
        if benign is None or p.stem.startswith("benign_") == benign
    ]
    reports = {r.name: r for r in (run_scenario(p, WORLD_CACHE) for p in paths)}
    return reports, score_reports(list(reports.values()))
