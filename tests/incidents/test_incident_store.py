"""Incidents in the warehouse: one per cause, no duplicates on re-ticks or restarts, durable."""

from __future__ import annotations

from datetime import date

import pytest

from dw_dagster.incidents.models import Finding
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.migrations import migrate
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource
from dw_local.world import LocalWorld


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("sf"), services=("snowflake",)) as lw:
        sf = lw.snowflake
        wh = WarehouseResource(
            account=sf.account, user=sf.user, password=sf.password, database="DW_OPS_TEST", network_timeout=20,
            additional_snowflake_connection_args={"host": sf.host, "port": sf.port, "protocol": sf.protocol},
        )  # fmt: skip
        for schema in ("OPS_A", "OPS_B", "OPS_C"):
            migrate(wh, OpsSchema("DW_OPS_TEST", schema))
        yield lw, wh


def _finding(check: str, asset: str, day: date = date(2025, 6, 16), scope: str = "job:inventory_nightly"):
    return Finding(
        check_name=check, asset_key=asset, business_date=day, summary=f"{check} failed", cause_scope=scope,
        evidence={"gap_units": 41800},
    )  # fmt: skip


def test_findings_of_one_cause_share_one_incident(warehouse):
    lw, wh = warehouse
    store = IncidentStore(wh, OpsSchema("DW_OPS_TEST", "OPS_A"))
    first = store.record_finding(
        _finding("recorded_total_network_onhand_units", "inventory/fct_inventory_position")
    )
    second = store.record_finding(_finding("volume", "inventory/mart_reorder_candidates"))
    assert first.new_incident and first.new_finding
    assert not second.new_incident and second.new_finding
    assert first.incident.incident_id == second.incident.incident_id
    assert len(store.list(status="open")) == 1
    assert len(store.events(first.incident.incident_id, kind="finding")) == 2


def test_re_ticks_and_restarts_do_not_duplicate(warehouse):
    lw, wh = warehouse
    ops = OpsSchema("DW_OPS_TEST", "OPS_B")
    f = _finding("recorded_total_network_onhand_units", "inventory/fct_inventory_position")
    IncidentStore(wh, ops).record_finding(f)
    lw.restart("snowflake")
    again = IncidentStore(wh, ops).record_finding(f)
    assert not again.new_incident and not again.new_finding
    store = IncidentStore(wh, ops)
    assert len(store.list()) == 1
    assert len(store.events(again.incident.incident_id)) == 1


def test_a_repeat_next_night_stays_on_the_open_incident_and_other_causes_open_their_own(warehouse):
    lw, wh = warehouse
    store = IncidentStore(wh, OpsSchema("DW_OPS_TEST", "OPS_C"))
    night1 = store.record_finding(_finding("recorded_total_x", "a/b", day=date(2025, 6, 16)))
    night2 = store.record_finding(_finding("recorded_total_x", "a/b", day=date(2025, 6, 17)))
    other = store.record_finding(
        _finding("volume", "c/d", day=date(2025, 6, 17), scope="job:finance_nightly")
    )
    assert night2.incident.incident_id == night1.incident.incident_id and night2.new_finding
    assert other.new_incident and other.incident.incident_id != night1.incident.incident_id
    store.set_status(night1.incident.incident_id, "resolved")
    assert [i.incident_id for i in store.list(status="open")] == [other.incident.incident_id]
