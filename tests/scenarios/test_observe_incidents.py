"""What a played night reports of the incidents (``observe._collect``): on the real incident store over the
local Snowflake server, with findings settled by cause as the diagnosis job settles them."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from ops_warehouse import ops_schema, warehouse

from dw_dagster.incidents.lifecycle import settle
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding
from dw_dagster.records.policy import IncidentPolicy
from dw_local.scenarios.observe import Observed, _collect

__all__ = ["warehouse"]

D1, D2 = date(2026, 7, 2), date(2026, 7, 3)


def _night(store: IncidentStore, day: date, asset: str, scope: str = "job:billpay_nightly"):
    """A night's finding of a duplication, diagnosed and settled as the diagnosis job does."""
    finding = Finding(
        check_name=f"total_{asset.split('/')[1]}", asset_key=asset, business_date=day, summary="moved",
        cause_scope=scope, evidence={"gap_units": 100},
    )  # fmt: skip
    incident = store.record_finding(finding).incident
    # The cause placed where the classifiers place it (the table holding the copies): the dedup key's root.
    diagnosis = Diagnosis(
        incident_id="-", classification=CauseClass.DUPLICATION, cause="c", path=["raw/payments", asset],
        cause_asset="raw/payments",
    )  # fmt: skip
    return settle(store, incident, diagnosis, [finding], IncidentPolicy())


def _observe(store: IncidentStore, day: date, seen: dict[str, str]) -> Observed:
    ended = datetime.now(UTC)
    observed = Observed(run_id=1, run_status="completed", run_ended_at=ended, monitored=[])
    _collect(observed, day, store, seen, ended)
    return observed


@pytest.fixture
def store(warehouse, request):
    _, wh = warehouse
    return IncidentStore(wh, ops_schema(wh, f"OPS_{request.node.name[-20:].upper()}"))


def test_a_continued_incident_counts_only_the_tables_of_tonights_findings(store):
    seen: dict[str, str] = {}
    first = _night(store, D1, "mart/mart_remittance_mtd")
    (opened,) = _observe(store, D1, seen).incidents
    assert not opened.continued and opened.assets == ["mart/mart_remittance_mtd"]
    # The next night a finding on another table continues it: scored on that table, not on last night's.
    assert _night(store, D2, "core/fct_bill_payments").kind == "continues"
    (continued,) = _observe(store, D2, seen).incidents
    assert continued.incident_id == first.incident.incident_id and continued.continued
    assert continued.assets == ["core/fct_bill_payments"]


def test_an_incident_opened_tonight_that_absorbs_another_is_reported_once_as_opened(store):
    seen: dict[str, str] = {}
    first = _night(store, D1, "core/fct_bill_payments")
    # Another job's finding of the same cause the same night: its provisional incident merges into the first.
    assert _night(store, D1, "mart/mart_remittance_mtd", scope="job:other").kind == "continues"
    (report,) = _observe(store, D1, seen).incidents
    assert report.incident_id == first.incident.incident_id and not report.continued
    assert report.assets == ["core/fct_bill_payments", "mart/mart_remittance_mtd"]
