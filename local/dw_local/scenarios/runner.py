"""Plays a scenario on a fresh local world through the real machinery, and reports what each night raised.

What is played for real and what is seeded:

- **Seeded**: the world's history (``history_nights``, 60 for the distributor). It was played once night by
  night through the same machinery (Coalesce job on the simulator, sensor tick, checks) and is cached as a
  stopped world keyed by a hash of every file that shapes it; each scenario starts from a private copy.
- **Played**: every night of the scenario. The night's source data and events are applied to the local
  Snowflake, the Coalesce job runs on the simulator, then one ``LocalDaemon`` tick runs the Coalesce run
  sensor, the checks run it requests, the incident sensor and the diagnosis job, in this process. A quiet
  first night (no events) is the same night for every scenario of a world: it is played once and each
  such scenario starts from a copy of it (``first_night.py``).

Time to detect is measured in wall-clock seconds from the moment the Coalesce run was seen ended to the
moment the first finding on a related table was written. The local daemon ticks at once; a deployed sensor
adds its polling wait (``benchmarks/HISTORY.md``: 27.7 s end to end through the real daemon).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, fields
from datetime import date
from pathlib import Path
from typing import Any

from dw_dagster.context.lineage import LineageGraph
from dw_local.scenarios import first_night
from dw_local.scenarios.model import Scenario, load_scenario
from dw_local.scenarios.observe import Observed, Observer

DEFAULT_CACHE = Path(os.environ.get("DW_WORLD_CACHE", ".dw/cache"))


@dataclass(kw_only=True)
class NightReport(Observed):
    """A scenario's night: what it played and expected, and what was observed (``Observed``'s fields)."""

    night: int
    business_date: date
    events: list[str]
    fault: bool
    expects_incident: bool
    expected_classes: list[str]
    expected_keys: list[str]
    related: list[str]
    """Tables the night's faults (and persistent faults still in force) can make wrong; ``*``: all."""
    expected_joins: bool | None = None
    max_severity: str | None = None


@dataclass
class ScenarioReport:
    name: str
    path: str
    world: str
    history_nights: int
    nights: list[NightReport]
    before: list[NightReport] = field(default_factory=list)
    """The earlier nights (``before``), played first and not scored."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _describe(event: dict[str, Any]) -> str:
    """An event as the scenario file wrote it (its nights counted from the scenario's first)."""
    shown = ", ".join(f"{k}={v}" for k, v in event.items() if k != "kind")
    return f"{event['kind']}({shown})"


def _related(scenario: Scenario, in_force: list[Any], tonight: list[Any], graph: LineageGraph) -> list[str]:
    """What the night's faults and those still in force from earlier nights can make wrong, and everything
    downstream of it."""
    world = scenario.world
    targets = {t for e in in_force for t in world.lasting_targets(e)}
    targets |= {t for e in tonight for t in world.targets(e)}
    if "*" in targets:
        return ["*"]
    related = set(targets)
    for t in targets:
        if t in graph:
            related |= graph.downstream(t)
    return sorted(related)


def run_scenario(scenario: Scenario | Path, cache: Path = DEFAULT_CACHE) -> ScenarioReport:
    """Plays a scenario (or the file at a path) on a fresh copy of its world's seeded template; the copy is
    deleted afterwards. A scenario whose first night is quiet starts from the world's quiet first night,
    played once for every such scenario (``first_night.py``)."""
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    world = scenario.world
    tmp = Path(tempfile.mkdtemp(prefix=f"dw-scenario-{scenario.name}-"))
    # The local daemon points this process's environment at the world, as a deployment would; a scenario
    # (or a test) that runs next must not inherit it.
    environ = dict(os.environ)
    try:
        played = [
            (k - len(scenario.before), n, scenario.before[k]) for k, n in enumerate(scenario.file.before)
        ]
        played += [(k, n, scenario.events[k]) for k, n in enumerate(scenario.file.nights)]
        observations: dict[int, Observed] = {}
        if first_night.shareable(scenario):
            k, _, _ = played[0]
            root, observations[k] = first_night.clone_after(
                world, scenario.night_index(k), cache, tmp / "world"
            )
        else:
            root = world.clone(cache.resolve(), tmp / "world")
        with world.local_world(root) as lw:
            observer = Observer(world, lw)
            nights, before, in_force = [], [], []
            for k, spec, events in played:
                if spec.repair:
                    # The owners repair the world; the incidents are left to the lifecycle (they resolve once
                    # their checks pass again).
                    for event in in_force:
                        world.repair(lw, event)
                    in_force = []
                observed = observations.get(k) or observer.play(scenario.night_index(k), events)
                tonight = [e for e in events if not world.is_benign(e)]
                expect = getattr(spec, "expect", None)
                report = NightReport(
                    night=k,
                    business_date=world.business_date(scenario.night_index(k)),
                    events=[_describe(e) for e in spec.events],
                    fault=bool(tonight),
                    expects_incident=scenario.expects_incident(k) if k >= 0 else bool(tonight),
                    expected_classes=[c.value for c in expect.classes] if expect else [],
                    expected_keys=list(expect.cause_keys) if expect else [],
                    related=_related(scenario, in_force, tonight, observer.graph),
                    expected_joins=expect.joins if expect else None,
                    max_severity=expect.max_severity if expect else None,
                    **{f.name: getattr(observed, f.name) for f in fields(Observed)},
                )
                (nights if k >= 0 else before).append(report)
                # Faults that stay until repaired; a benign event (a mapped new key) is not one.
                in_force = [e for e in [*in_force, *tonight] if world.persists(e)]
        return ScenarioReport(
            scenario.name, str(scenario.path), world.name, world.history_nights, nights, before
        )
    finally:
        os.environ.clear()
        os.environ.update(environ)
        shutil.rmtree(tmp, ignore_errors=True)
