"""No ERROR incident stands with a cause nobody could tell: the WARN "unexplained deviation" does not wait on the
blast radius (a reader's schedule that cannot be read, here), and a bad night a cumulative total still carries
whose own diagnosis never landed is diagnosed when the next night continues it. Two shapes, on the real store
over the local Snowflake server."""

from __future__ import annotations

from datetime import date

import dagster as dg
import pytest
from ops_warehouse import ops_schema, warehouse
from test_incident_store import finding
from test_lifecycle_settle import POLICY

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.events import findings_of, latest_diagnosis
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.incidents.triage import triage
from dw_dagster.records.incidents import CauseClass

__all__ = ["warehouse"]

D16, D17 = date(2025, 6, 16), date(2025, 6, 17)

# Each shape: the table a total is on, and a report downstream of it whose readers' schedule is unreadable.
SHAPES = {
    "inventory": ("inv/fct_onhand", {"raw/onhand": [], "inv/fct_onhand": ["raw/onhand"],
                                     "mart/reorder": ["inv/fct_onhand"]}),
    "payments": ("core/fct_payments", {"raw/journal": [], "ref/payees": [],
                                       "core/fct_payments": ["raw/journal", "ref/payees"],
                                       "mart/overdue": ["core/fct_payments"], "mart/aging": ["mart/overdue"]}),
}  # fmt: skip
BAD_READ = [{"what": "09:00 review", "cron": "at nine, weekdays", "timezone": "UTC"}]


def _ctx(store: IncidentStore, conn, shape: str) -> DiagnosisContext:
    fact, graph = SHAPES[shape]
    total = {"name": "units", "owner": "ops", "asset": fact, "hurts": "both",
             "sql": "SELECT SUM(\"UNITS\") AS \"VALUE\" FROM {{ ref('X', 'Y') }}"}  # fmt: skip
    specs = [
        dg.AssetSpec(key, deps=deps, kinds={"coalesce"},
                     metadata={"coalesce/node_type": "Fact" if deps else "Source",
                               **({"dw/reads": BAD_READ} if key.startswith("mart/") else {})})
        for key, deps in graph.items()
    ]  # fmt: skip
    return DiagnosisContext(LineageGraph(specs), MetricsFile.model_validate({"totals": [total]}),
                            lambda loc, name: f"{loc}.{name}", HistorySession(conn, store.ops), conn.cursor())  # fmt: skip


@pytest.fixture
def store(warehouse, request):
    _, wh = warehouse
    return IncidentStore(wh, ops_schema(wh, f"OPS_{request.node.name[-20:].upper()}"))


@pytest.mark.parametrize("shape", SHAPES)
def test_an_unexplained_deviation_is_a_warn_even_when_the_blast_radius_cannot_be_sized(store, shape):
    fact, _ = SHAPES[shape]
    f = finding("total_units", fact, day=D16, baseline={"expected": 1000.0})
    incident = store.record_finding(f).incident
    with store.ops.connect(store.warehouse, "test") as conn:
        found = triage(store, incident, [f], fact, _ctx(store, conn, shape), POLICY)
    assert found.diagnosis.classification is CauseClass.UNKNOWN
    after = store.get(incident.incident_id)
    assert after.severity == "WARN" and after.title.startswith("unexplained deviation"), after
    # The diagnosis is recorded, saying the radius could not be sized.
    recorded, radius = latest_diagnosis(store, incident.incident_id)
    assert any("blast radius could not be sized" in n for n in recorded.notes), recorded.notes
    assert radius.assets == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_carried_night_whose_diagnosis_never_landed_is_diagnosed_and_not_left_an_error(store, shape):
    fact, _ = SHAPES[shape]
    # The bad night's incident: its finding recorded, its diagnosis job never finished.
    bad = finding("total_units", fact, day=D16, baseline={"expected": 1000.0})
    target = store.record_finding(bad).incident
    assert target.severity == "ERROR" and latest_diagnosis(store, target.incident_id) is None
    # The next night the cumulative total still carries it.
    carried = finding("total_units", fact, day=D17, carried_from=[D16.isoformat()])
    provisional = store.record_finding(carried).incident
    with store.ops.connect(store.warehouse, "test") as conn:
        found = triage(store, provisional, [carried], fact, _ctx(store, conn, shape), POLICY)
    assert found.continues is not None and found.continues.incident_id == target.incident_id
    recorded = latest_diagnosis(store, target.incident_id)
    assert recorded is not None and recorded[0].classification is CauseClass.UNKNOWN
    assert store.get(target.incident_id).severity == "WARN"
    assert {x.business_date for x in findings_of(store, target.incident_id)} == {D16, D17}
