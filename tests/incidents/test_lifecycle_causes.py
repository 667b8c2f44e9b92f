"""A finding joins an open incident only for the same cause: same root, compatible class and keys, a cause
still going on; a cause nobody could tell is a WARN "unexplained deviation" that absorbs nothing; a
cumulative total that still carries a bad night continues that night's incident. On the real store over the
local Snowflake server, with diagnoses as the diagnosis job writes them."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from ops_warehouse import ops_schema, warehouse
from test_incident_store import finding
from test_lifecycle_settle import POLICY, diagnosis, opened

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.events import findings_of, record_diagnosis
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.incidents.triage import triage
from dw_dagster.records.incidents import BlastRadius, CauseClass

__all__ = ["warehouse"]

D16, D17, D18 = date(2025, 6, 16), date(2025, 6, 17), date(2025, 6, 18)
TOTAL = {
    "name": "mtd_units", "owner": "ops", "asset": "inv/fct", "hurts": "both",
    "sql": "SELECT SUM(\"UNITS\") AS \"VALUE\" FROM {{ ref('INV', 'FCT') }}",
}  # fmt: skip


@pytest.fixture
def store(warehouse, request):
    _, wh = warehouse
    return IncidentStore(wh, ops_schema(wh, f"OPS_{request.node.name[-20:].upper()}"))


def test_an_unexplained_incident_neither_continues_nor_is_continued(store):
    # A false alarm the diagnosis could not explain, still open from an earlier night ...
    first = opened(store, D16, CauseClass.UNKNOWN)
    # ... does not swallow tonight's fault on the same table, nor another unexplained deviation.
    assert opened(store, D17, CauseClass.VOLUME_LOSS).kind == "stands"
    assert opened(store, D17, CauseClass.UNKNOWN, check="volume").kind == "stands"
    assert store.get(first.incident.incident_id).status == "open"


def test_keys_must_match_a_keyless_night_does_not_continue_a_keyed_cause(store):
    keyed = opened(store, D16, CauseClass.VOLUME_LOSS, keys=("CHANNEL=mobile",))
    # Tonight's volume loss names no key: not shown to be the mobile partition's; its own incident.
    assert opened(store, D17, CauseClass.VOLUME_LOSS).kind == "stands"
    again = opened(store, D17, CauseClass.VOLUME_LOSS, keys=("CHANNEL=mobile",), check="volume")
    assert again.kind == "continues" and again.incident.incident_id == keyed.incident.incident_id


def test_an_incident_quiet_for_weeks_does_not_absorb_tonights_cause(store):
    # Open since a night of its seeded history and never marked stale (no nights were reported between).
    old = opened(store, D16, CauseClass.STALE_INPUT, check="input_freshness")
    late = opened(store, D16 + timedelta(days=20), CauseClass.STALE_INPUT, check="input_freshness")
    assert late.kind == "stands" and late.incident.incident_id != old.incident.incident_id
    # Within a few nights it is the same stall, continued.
    soon = opened(store, D16 + timedelta(days=21), CauseClass.STALE_INPUT, check="input_freshness")
    assert soon.kind == "continues" and soon.incident.incident_id == late.incident.incident_id


def _ctx(store: IncidentStore, conn) -> DiagnosisContext:
    metrics = MetricsFile.model_validate({"totals": [TOTAL]})
    return DiagnosisContext(LineageGraph([]), metrics, lambda loc, name: f"{loc}.{name}",
                            HistorySession(conn, store.ops), conn.cursor())  # fmt: skip


def test_thin_evidence_is_a_warn_unexplained_deviation_saying_what_was_checked(store):
    f = finding("total_mtd_units", "inv/fct", day=D16, baseline={"expected": 1000.0})
    incident = store.record_finding(f).incident
    with store.ops.connect(store.warehouse, "test") as conn:
        found = triage(store, incident, [f], "inv/fct", _ctx(store, conn), POLICY)
    assert found.diagnosis.classification is CauseClass.UNKNOWN
    after = store.get(incident.incident_id)
    assert after.severity == "WARN" and after.title.startswith(
        "unexplained deviation: total_mtd_units failed"
    )
    assert [x.severity for x in findings_of(store, incident.incident_id)] == ["WARN"]
    (event,) = store.events(incident.incident_id, kind="severity")
    assert event.detail["from"] == "ERROR" and event.detail["to"] == "WARN"


def test_a_cumulative_total_still_carrying_a_bad_night_continues_its_incident(store):
    first = opened(store, D16, CauseClass.DUPLICATION, keys=("PAYMENT_ID=7",), check="total_mtd_units")
    record_diagnosis(store, first.incident.incident_id, 1, diagnosis(CauseClass.DUPLICATION), BlastRadius())
    for night in (D17, D18):
        carried = finding("total_mtd_units", "inv/fct", day=night, carried_from=[D16.isoformat()])
        provisional = store.record_finding(carried).incident
        found = triage(store, provisional, [carried], "inv/fct", None, POLICY)  # type: ignore[arg-type]
        assert found.continues is not None and found.continues.incident_id == first.incident.incident_id
        assert found.diagnosis.classification is CauseClass.DUPLICATION, "its diagnosis stands"
        assert store.get(provisional.incident_id).status == "merged"
    nights = sorted(f.business_date for f in findings_of(store, first.incident.incident_id))
    assert nights == [D16, D17, D18]
    (_, second) = store.events(first.incident.incident_id, kind="continued")
    assert second.detail["carried"] is True
    # A night whose own increment is wrong too is news: diagnosed as its own.
    news = finding("total_mtd_units", "inv/fct", day=D18, carried_from=[D16.isoformat()])
    other = finding("volume", "inv/fct", day=D18)
    provisional = store.record_finding(other).incident
    with store.ops.connect(store.warehouse, "test") as conn:
        found = triage(store, provisional, [news, other], "inv/fct", _ctx(store, conn), POLICY)
    assert found.settlement is not None and found.settlement.kind == "stands"
