"""A remediation worker killed between adding a reference row and recording it: the run recorded its intent
just before the insert, so the receipt written for it finds the row in its table, lists it, and records it as
the run's change (``undo`` deletes it); killed before the insert, the receipt says the row was not added.
On the local Snowflake server, through the real remediation step's pieces (``apply_row`` with the intent the
job records, the crash receipt the proposals sensor writes)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import pytest
from ops_warehouse import ops_schema, warehouse
from reference_night import reference_plan

from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.models import Finding
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.remediation.approvals import REMEDIATION_JOB, ApprovalBook
from dw_dagster.remediation.change_log import intent_recorder
from dw_dagster.remediation.changes import apply_row, pending_undo, undo
from dw_dagster.remediation.crash_receipt import crash_receipt
from dw_dagster.remediation.models import Approval

__all__ = ["warehouse"]
CONTEXT = Path(__file__).resolve().parents[2] / "dw_local" / "worlds" / "distributor" / "context.yaml"
TABLE = '"DW_PROD"."REF_PLANNING"."REGION_MAP"'


class Killed(Exception):
    """Where the worker dies."""


@pytest.fixture(scope="module")
def setup(warehouse):
    lw, wh = warehouse
    with wh.tagged_connection("test") as conn:
        cur = conn.cursor()
        cur.execute("CREATE DATABASE IF NOT EXISTS DW_PROD")
        cur.execute('CREATE SCHEMA IF NOT EXISTS "DW_PROD"."REF_PLANNING"')
        cur.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (ORGANIZATION_ID NUMBER(38,0), WAREHOUSE_CODE VARCHAR,"
                    " WAREHOUSE_NAME VARCHAR, REGION VARCHAR)")  # fmt: skip
    store = IncidentStore(wh, ops_schema(wh, "OPS_CRASH"))
    return wh, store, ApprovalBook(store, load_context_file(CONTEXT))


def _night(setup, instance: dg.DagsterInstance, day: date):
    wh, store, book = setup
    finding = Finding(check_name="total", asset_key="inventory/fct_inventory_position", business_date=day,
                      summary="total failed", cause_scope="job:inventory_nightly", evidence={"gap_units": 1})  # fmt: skip
    incident = store.record_finding(finding).incident
    plan = reference_plan(incident.incident_id)
    run = instance.create_run_for_job(dg.GraphDefinition(name="g", node_defs=[]).to_job(REMEDIATION_JOB),
                                      run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.FAILURE)  # fmt: skip
    (proposal,) = [p for p in plan.proposals if p.reference_row is not None]
    approval = Approval(plan_id=plan.plan_id, team="planning-ops", approver="Dana Ortiz",
                        email="dana@example.com", at=datetime.now(UTC), run_id=run.run_id,
                        values={"WAREHOUSE_NAME": "Dallas"})  # fmt: skip
    return plan, run, proposal, approval


def _rows(wh) -> list[tuple]:
    with wh.tagged_connection("test") as conn:
        cur = conn.cursor()
        cur.execute(f'SELECT "ORGANIZATION_ID", "WAREHOUSE_NAME" FROM {TABLE}')
        return cur.fetchall()


def test_a_row_added_but_not_recorded_is_found_listed_and_can_be_undone(setup):
    wh, store, book = setup
    instance = dg.DagsterInstance.ephemeral()
    plan, run, proposal, approval = _night(setup, instance, date(2025, 6, 16))
    intent = intent_recorder(store, plan, proposal.proposal_id, run.run_id)
    with wh.tagged_connection("test") as conn:
        apply_row(conn.cursor(), proposal.proposal_id, proposal.reference_row, approval, intent)
    # The worker dies here: the row is in, its `change` event never written.
    assert store.events(plan.incident_id, kind="change") == []

    receipt = crash_receipt(book, instance, plan, run)
    assert [(c.key_value, c.added) for c in receipt.changes] == [(7120, True)]
    assert "recorded by this receipt" in receipt.failure and "Added ORGANIZATION_ID 7120" in receipt.failure
    assert any("dw-dagster undo" in step and "7120" in step for step in receipt.undo)
    assert len(store.events(plan.incident_id, kind="change")) == 1, "undo reads the recorded change"
    # What `dw-dagster undo` does: the rows pending undo, deleted.
    pending = pending_undo(store, plan.incident_id)
    assert [c.key_value for c in pending] == [7120]
    with wh.tagged_connection("test") as conn:
        undo(conn.cursor(), store, plan.incident_id, pending, "Dana Ortiz")
    assert _rows(wh) == []


def test_a_worker_killed_before_the_insert_added_nothing_and_the_receipt_says_so(setup):
    wh, store, book = setup
    instance = dg.DagsterInstance.ephemeral()
    plan, run, proposal, approval = _night(setup, instance, date(2025, 6, 17))
    record = intent_recorder(store, plan, proposal.proposal_id, run.run_id)

    def dies_after_the_intent(change):
        record(change)
        raise Killed

    with wh.tagged_connection("test") as conn, pytest.raises(Killed):
        apply_row(
            conn.cursor(), proposal.proposal_id, proposal.reference_row, approval, dies_after_the_intent
        )
    receipt = crash_receipt(book, instance, plan, run)
    assert receipt.changes == [] and receipt.undo == [u for u in receipt.undo if "dw-dagster undo" not in u]
    assert "ORGANIZATION_ID 7120 was not added (not in the table)" in receipt.failure
    assert store.events(plan.incident_id, kind="change") == []
    assert _rows(wh) == []
