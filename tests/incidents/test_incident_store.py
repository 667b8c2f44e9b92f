"""Incidents in the warehouse: a night's findings share a provisional incident, nothing joins an older night's
incident at finding time, every change of status is an event; durable across restarts, never duplicated."""

from __future__ import annotations

from datetime import date

import dagster as dg
import pytest
from ops_warehouse import ops_schema, warehouse

from dw_dagster.app.reporting import record_finding
from dw_dagster.incidents.store import IncidentStore, TransitionError
from dw_dagster.records.incidents import Finding

__all__ = ["warehouse"]


def finding(
    check: str, asset: str, day: date = date(2025, 6, 16), scope: str = "job:inventory_nightly", **evidence
):
    return Finding(
        check_name=check, asset_key=asset, business_date=day, summary=f"{check} failed", cause_scope=scope,
        evidence=evidence or {"gap_units": 41800},
    )  # fmt: skip


def test_findings_of_one_night_and_job_share_one_incident(warehouse):
    lw, wh = warehouse
    store = IncidentStore(wh, ops_schema(wh, "OPS_A"))
    first = store.record_finding(finding("total_network_onhand_units", "inventory/fct_inventory_position"))
    second = store.record_finding(finding("volume", "inventory/mart_reorder_candidates"))
    assert first.new_incident and first.new_finding
    assert not second.new_incident and second.new_finding
    assert first.incident.incident_id == second.incident.incident_id
    assert first.incident.detail == {"cause_scope": "job:inventory_nightly", "lane": "new"}
    assert len(store.list(status="open")) == 1
    assert len(store.events(first.incident.incident_id, kind="finding")) == 2


def test_re_ticks_and_restarts_do_not_duplicate(warehouse):
    lw, wh = warehouse
    ops = ops_schema(wh, "OPS_B")
    f = finding("total_network_onhand_units", "inventory/fct_inventory_position")
    IncidentStore(wh, ops).record_finding(f)
    lw.restart("snowflake")
    again = IncidentStore(wh, ops).record_finding(f)
    assert not again.new_incident and not again.new_finding
    store = IncidentStore(wh, ops)
    assert len(store.list()) == 1
    assert len(store.events(again.incident.incident_id)) == 1


def test_a_repeat_next_night_waits_in_its_own_provisional_incident(warehouse):
    lw, wh = warehouse
    store = IncidentStore(wh, ops_schema(wh, "OPS_C"))
    night1 = store.record_finding(finding("total_x", "a/b", day=date(2025, 6, 16)))
    night2 = store.record_finding(finding("total_x", "a/b", day=date(2025, 6, 17)))
    new_check = store.record_finding(finding("volume", "a/c", day=date(2025, 6, 17)))
    other_job = store.record_finding(
        finding("volume", "c/d", day=date(2025, 6, 17), scope="job:finance_nightly")
    )
    # Not joined to the older night's incident: the diagnosis decides whether it continues it.
    assert night2.new_incident and night2.incident.incident_id != night1.incident.incident_id
    assert night2.incident.detail["lane"] == "repeat"
    # A check that was not failing is news in its own lane, whatever else is open on the job.
    assert new_check.new_incident and new_check.incident.detail["lane"] == "new"
    assert len({o.incident.incident_id for o in (night1, night2, new_check, other_job)}) == 4
    assert [e.detail["business_date"] for e in store.events(night1.incident.incident_id, "finding")] == [
        "2025-06-16"
    ]


def test_a_check_that_failed_weeks_ago_on_an_incident_still_open_is_news_tonight(warehouse):
    """An incident a month-to-date total keeps open (its bad night carried every night since) does not make
    every later failure of its other checks a repeat of it: only a failure within the nights a cause stays
    recent (the stale window and its slack) is."""
    lw, wh = warehouse
    store = IncidentStore(wh, ops_schema(wh, "OPS_C2"))
    weeks_ago = store.record_finding(finding("total_x", "a/b", day=date(2025, 6, 2)))
    store.record_finding(finding("total_mtd", "a/m", day=date(2025, 6, 2)))
    for day in range(3, 24):
        store.record_finding(finding("total_mtd", "a/m", day=date(2025, 6, day)))  # the carry, nightly
    tonight = store.record_finding(finding("total_x", "a/b", day=date(2025, 6, 23)))
    assert weeks_ago.incident.status == "open"
    assert tonight.new_incident and tonight.incident.detail["lane"] == "new"
    # Within the window it is a repeat: the same check failing the night before, and five nights before.
    assert (
        store.record_finding(finding("total_mtd", "a/m", day=date(2025, 6, 24))).incident.detail["lane"]
        == "repeat"
    )
    store.record_finding(finding("volume", "a/v", day=date(2025, 6, 19)))
    assert (
        store.record_finding(finding("volume", "a/v", day=date(2025, 6, 24))).incident.detail["lane"]
        == "repeat"
    )


def test_every_change_of_status_is_an_event_and_only_the_lifecycle_s_changes_are_allowed(warehouse):
    lw, wh = warehouse
    store = IncidentStore(wh, ops_schema(wh, "OPS_D"))
    older = store.record_finding(finding("total_x", "a/b", day=date(2025, 6, 16))).incident
    store.record_finding(finding("volume", "a/b", day=date(2025, 6, 16)))
    tonight = store.record_finding(finding("total_x", "a/b", day=date(2025, 6, 17))).incident
    merged = store.transition(
        tonight.incident_id, "merged", by="dw-dagster", reason="same cause", key="settle",
        detail={"merged_into": older.incident_id},
    )  # fmt: skip
    assert merged.status == "merged" and merged.merged_into == older.incident_id
    assert store.transition(tonight.incident_id, "merged", by="x", reason="again", key="settle") is None
    with pytest.raises(TransitionError, match="is merged: it cannot become open"):
        store.transition(tonight.incident_id, "open", by="x", reason="no")
    # Tonight's later finding in the same lane follows the merged incident to the one it continues.
    later = store.record_finding(finding("volume", "a/b", day=date(2025, 6, 17)))
    assert later.incident.incident_id == older.incident_id and later.new_finding
    store.set_status(older.incident_id, "resolved", by="Dana Ortiz", reason="fixed")
    (status,) = store.events(older.incident_id, kind="status")
    assert status.detail == {"from": "open", "to": "resolved", "by": "Dana Ortiz", "reason": "fixed"}
    with pytest.raises(KeyError, match="INC-nope: not found"):
        store.transition("INC-nope", "resolved", by="x", reason="y")


def test_a_new_finding_on_a_resolved_incident_of_the_same_night_reopens_it(warehouse):
    lw, wh = warehouse
    store = IncidentStore(wh, ops_schema(wh, "OPS_E"))
    incident = store.record_finding(finding("total_x", "a/b")).incident
    store.set_status(incident.incident_id, "resolved", reason="verified fix")
    # The rerun's checks for the same night: the same finding again is not news ...
    assert not store.record_finding(finding("total_x", "a/b")).reopened
    # ... a check that fails for the first time is: the fix did not hold.
    again = store.record_finding(finding("volume", "a/c"))
    assert again.reopened and again.incident.status == "open" and again.incident.detail["reopened"] == 1
    assert [e.detail["to"] for e in store.events(incident.incident_id, kind="status")] == ["resolved", "open"]


def test_the_runs_log_line_reads_the_finding_in_words(warehouse, capfd):
    lw, wh = warehouse
    store = IncidentStore(wh, ops_schema(wh, "OPS_LOG"))
    f = finding("total_network_onhand_units", "inventory/fct_inventory_position").model_copy(
        update={"summary": "network_onhand_units fell 1.8% while ebs_onhand_units rose 0.2%"}
    )

    @dg.op
    def checks(context):
        return record_finding(context, store, f)

    outcome = checks(dg.build_op_context())
    console = capfd.readouterr().err
    assert (
        f"incident {outcome.incident.incident_id} opened: network onhand units fell 1.8% while ebs onhand "
        "units rose 0.2%" in console
    ), console[-2000:]
