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
adds its polling wait (``benchmarks/README.md``: 27.7 s end to end through the real daemon).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.checks.volume import monitored_specs
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.lifecycle_view import latest_diagnosis
from dw_dagster.incidents.models import Finding, Incident
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.scenarios.baseline import elementary_alarms
from dw_local.scenarios.model import Scenario, load_scenario

if TYPE_CHECKING:
    from dw_local.scenarios.worlds import ScenarioWorld
    from dw_local.world import LocalWorld

DEFAULT_CACHE = Path(os.environ.get("DW_WORLD_CACHE", ".dw/cache"))


@dataclass
class IncidentReport:
    incident_id: str
    title: str
    classification: str | None
    cause: str | None
    cause_keys: list[str]
    gap: dict[str, float]
    """The measured gap: units, rows and items the diagnosis names (``gap_units``, ``dropped_units``, ...)."""
    blast_radius: list[str]
    newly_flagged: int
    owners: list[str]
    time_to_detect_s: float
    assets: list[str]
    """The tables the incident's findings are on (root cause is scored right only on a related one)."""
    continued: bool = False
    """An incident opened on an earlier night that tonight's findings continue (a reply in its thread)."""
    related_to: list[str] = field(default_factory=list)
    """Open incidents of other causes on the same tables that this one was linked to."""
    path: list[str] = field(default_factory=list)
    """The diagnosis's lineage path from the table that alarmed to the cause."""
    test_query: str | None = None
    """The query that proves the cause, as the owners are shown it."""


@dataclass
class Alarm:
    asset: str
    check: str
    summary: str
    at: datetime
    severity: str = "ERROR"
    explained_by: str | None = None
    """What in the record explains it (a verified fix's row-count step): recorded at WARN, not an incident."""


@dataclass
class Observed:
    """What a played night showed: its Coalesce run, the checks' tables, what the product and the baseline
    raised. A function of the world and the night's events, not of the scenario that plays them."""

    run_id: int | None
    run_status: str
    run_ended_at: datetime
    monitored: list[str]
    incidents: list[IncidentReport] = field(default_factory=list)
    """Incidents opened tonight, and the earlier ones tonight's findings continued (``continued``)."""
    alarms: list[Alarm] = field(default_factory=list)
    baseline_alarms: list[dict[str, Any]] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    """Incidents resolved by tonight's tick (every check of theirs passed again)."""


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


def _gap(evidence: dict[str, Any]) -> dict[str, float]:
    wanted = ("gap_units", "dropped_units", "dropped_rows", "duplicate_rows", "factor", "value", "last_good_value",
              "row_count", "expected_rows", "input_age_hours")  # fmt: skip
    return {k: float(evidence[k]) for k in wanted if isinstance(evidence.get(k), int | float)}


def _related(scenario: Scenario, in_force: list[Any], graph: LineageGraph) -> list[str]:
    targets = {t for e in in_force for t in scenario.world.targets(e)}
    if "*" in targets:
        return ["*"]
    related = set(targets)
    for t in targets:
        if t in graph:
            related |= graph.downstream(t)
    return sorted(related)


class Observer:
    """What a night is played and watched through on one running world: the local daemon's tick, then what
    the product recorded (incidents, findings, freshness alarms) and the Elementary-default baseline."""

    def __init__(self, world: ScenarioWorld, lw: LocalWorld):
        from dw_local.daemon import LocalDaemon

        self.world, self.lw = world, lw
        self.daemon = LocalDaemon(lw, env=world.env())
        self.metrics = load_metrics_file(self.daemon.settings.metrics_file)
        self.ops = OpsSchema(world.database, self.metrics.ops_schema)
        self.store = IncidentStore(self.daemon.defs.resources["snowflake"], self.ops)
        specs = self.daemon.defs.resolve_all_asset_specs()
        self.graph = LineageGraph(specs)
        self.volume_assets = [s.key.to_user_string() for s in monitored_specs(self.metrics, specs)]
        self.seen = {i.incident_id: i.status for i in self.store.list()}

    def play(self, night: int, events: list[Any]) -> Observed:
        """Plays the world's ``night`` with ``events`` and returns what was seen of it."""
        result = self.world.play_night(self.lw, night, events)
        ended = datetime.now(UTC)
        outcome = self.daemon.tick(at=result.watched_at)
        business_date = self.world.business_date(night)
        observed = Observed(
            run_id=result.run_id,
            run_status=result.status,
            run_ended_at=ended,
            monitored=sorted({c.asset for c in outcome.checks} | set(self.volume_assets)),
        )
        _collect(observed, business_date, self.store, self.seen, ended)
        # Dagster's freshness daemon alarms on a table its schedule's window passed without a build.
        observed.alarms += [
            Alarm(a, "freshness_policy", "not built in its schedule's window", datetime.now(UTC))
            for a in outcome.stale()
        ]
        with self.lw.snowflake.connect(database=self.world.database) as conn:
            observed.baseline_alarms = [
                asdict(a)
                for a in elementary_alarms(
                    conn.cursor(), self.ops, self.metrics, self.volume_assets, business_date
                )
            ]
        return observed


def run_scenario(scenario: Scenario | Path, cache: Path = DEFAULT_CACHE) -> ScenarioReport:
    """Plays a scenario (or the file at a path) on a fresh copy of its world's seeded template; the copy is
    deleted afterwards. A scenario whose first night is quiet starts from the world's quiet first night,
    played once for every such scenario (``first_night.py``)."""
    from dw_local.scenarios import first_night

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
                    related=_related(scenario, [*in_force, *tonight], observer.graph),
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


def _collect(
    observed: Observed, business_date: date, store: IncidentStore, seen: dict[str, str], ended: datetime
) -> None:
    """Tonight's findings (on any incident, new or already open, explained ones at WARN), the incidents tonight
    opened, the earlier ones it continued, and those it resolved."""
    continued: dict[str, list[tuple[datetime, Finding]]] = {}
    incidents = store.list()
    for incident in incidents:
        events = store.events(incident.incident_id)
        findings = [(e.at, Finding.model_validate(e.detail)) for e in events if e.kind == "finding"]
        for e in events:
            if e.kind in ("finding", "explained") and e.detail.get("business_date") == str(business_date):
                f = Finding.model_validate(e.detail)
                observed.alarms.append(
                    Alarm(
                        f.asset_key, f.check_name, f.summary, e.at, f.severity, e.detail.get("explained_by")
                    )
                )
        previous = seen.get(incident.incident_id)
        seen[incident.incident_id] = incident.status
        if incident.status == "resolved" and previous not in (None, "resolved"):
            observed.resolved.append(incident.incident_id)
        if previous is not None:
            continue
        if incident.status == "merged" and incident.merged_into:
            # Tonight's provisional incident named an older one's cause: it continues that one.
            continued.setdefault(incident.merged_into, []).extend(findings)
            continue
        first = min(at for at, _ in findings) if findings else incident.opened_at
        observed.incidents.append(_incident_report(store, incident, findings, first, ended))
    by_id = {i.incident_id: i for i in incidents}
    for incident_id, findings in continued.items():
        target = by_id.get(incident_id)
        if target is None:
            continue
        first = min((at for at, _ in findings), default=target.updated_at)
        own = [(e.at, Finding.model_validate(e.detail)) for e in store.events(incident_id, kind="finding")]
        observed.incidents.append(_incident_report(store, target, own, first, ended, continued=True))


def _incident_report(
    store: IncidentStore, incident: Incident, findings: list[tuple[datetime, Finding]], first: datetime,
    ended: datetime, continued: bool = False,
) -> IncidentReport:  # fmt: skip
    diagnosed = latest_diagnosis(store, incident.incident_id)
    diagnosis, radius = diagnosed if diagnosed else (None, None)
    return IncidentReport(
        incident_id=incident.incident_id,
        title=incident.title,
        classification=diagnosis.classification.value if diagnosis else None,
        cause=diagnosis.cause if diagnosis else None,
        cause_keys=[k.label for k in diagnosis.keys] if diagnosis else [],
        gap=_gap(diagnosis.evidence) if diagnosis else {},
        blast_radius=[a.asset_key for a in radius.assets] if radius else [],
        newly_flagged=len(radius.newly_flagged) if radius else 0,
        owners=diagnosis.owners if diagnosis else [],
        path=list(diagnosis.path) if diagnosis else [],
        test_query=diagnosis.test_query if diagnosis else None,
        time_to_detect_s=round((first - ended).total_seconds(), 2),
        assets=sorted({f.asset_key for _, f in findings}),
        continued=continued,
        related_to=list(incident.detail.get("related", [])),
    )
