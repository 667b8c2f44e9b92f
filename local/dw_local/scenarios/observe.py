"""A night played and watched on one running world, and what it showed: the Coalesce run, the checks'
tables, the incidents the product opened, continued and resolved, its alarms and the Elementary baseline's
(``baseline.py``). What a night shows depends on the world and the night's events, not on the scenario
playing it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.checks.volume import monitored_specs
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.scenarios.baseline import ElementaryBaseline

if TYPE_CHECKING:
    from dw_local.scenarios.worlds import ScenarioWorld
    from dw_local.world import LocalWorld


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
    """The tables the incident's findings are on (root cause is scored right only on a related one); for an
    incident tonight continued, those of tonight's findings."""
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


def _gap(evidence: dict[str, Any]) -> dict[str, float]:
    wanted = ("gap_units", "dropped_units", "dropped_rows", "duplicate_rows", "factor", "value", "last_good_value",
              "row_count", "expected_rows", "input_age_hours")  # fmt: skip
    return {k: float(evidence[k]) for k in wanted if isinstance(evidence.get(k), int | float)}


class Observer:
    """What a night is played and watched through on one running world: the local daemon's tick, then what
    the product recorded (incidents, findings, freshness alarms) and the Elementary baseline, whose tests
    remember the schemas of the previous night's run (as they stand when the observer starts)."""

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
        self.baseline = ElementaryBaseline(self.metrics, self.ops, self.graph, self.volume_assets)
        with self.lw.snowflake.connect(database=self.world.database) as conn:
            self.baseline.snapshot(conn.cursor())

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
        if result.run_id is None:
            return observed  # Elementary runs with the job: no run, no tests
        # The tests run right after the job: what they read themselves is stamped from the run's end.
        with self.lw.snowflake.connect(database=self.world.database) as conn:
            alarms = self.baseline.alarms(
                conn.cursor(), business_date, result.watched_at, ended, untested=set(outcome.stale())
            )
        observed.baseline_alarms = [asdict(a) for a in alarms]
        return observed


def _collect(
    observed: Observed, business_date: date, store: IncidentStore, seen: dict[str, str], ended: datetime
) -> None:
    """Tonight's findings (on any incident, new or already open, explained ones at WARN), the incidents tonight
    opened, the earlier ones it continued, and those it resolved."""
    continued: dict[str, list[tuple[datetime, Finding]]] = {}
    earlier = set(seen)  # the incidents opened before tonight
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
        # An incident opened tonight is reported as opened, with the findings merged into it: it continues
        # nothing.
        if target is None or incident_id not in earlier:
            continue
        first = min((at for at, _ in findings), default=target.updated_at)
        # Its tables are tonight's findings' (what continued it), not those of the nights before: a night
        # continues a fault's incident only with a finding on a table that fault can make wrong.
        observed.incidents.append(_incident_report(store, target, findings, first, ended, continued=True))


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
