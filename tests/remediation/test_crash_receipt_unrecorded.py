"""A remediation worker killed between a change and its record: the run recorded its intent just before the
change, so the receipt written for it finds the change in the warehouse, lists it, and records it as the
run's change (``undo`` reverts it); killed before the change, the receipt says it was not made. For a
reference row (the key in its table) and for a load's copies removed (none left in the scope; a retry
finishes a removal that never committed). On the local Snowflake server, through the real remediation
step's pieces (``apply_row`` and ``remove_duplicates`` with the intent the job records, the crash receipt the
proposals sensor writes)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import pytest
from ops_warehouse import ops_schema, warehouse
from reference_night import reference_plan

from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import Finding
from dw_dagster.records.remediation import Approval, Dedupe, Proposal, ProposalKind
from dw_dagster.remediation.approvals import REMEDIATION_JOB, ApprovalBook
from dw_dagster.remediation.change_log import intent_recorder
from dw_dagster.remediation.changes import apply_row, pending_undo, undo
from dw_dagster.remediation.crash_receipt import crash_receipt
from dw_dagster.remediation.source_steps import copies_left, remove_duplicates

__all__ = ["warehouse"]
CONTEXT = (
    Path(__file__).resolve().parents[2] / "local" / "dw_local" / "worlds" / "distributor" / "context.yaml"
)
TABLE = '"DW_PROD"."REF_PLANNING"."REGION_MAP"'
LINES = '"DW_PROD"."RAW_SHOP"."ORDER_LINES"'


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
        cur.execute('CREATE SCHEMA IF NOT EXISTS "DW_PROD"."RAW_SHOP"')
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {LINES} (LINE_ID NUMBER(38,0), STORE_ID NUMBER(38,0), AMOUNT FLOAT)"
        )
    store = IncidentStore(wh, ops_schema(wh, "OPS_CRASH"))
    return wh, store, ApprovalBook(store, load_context_file(CONTEXT))


@pytest.fixture
def instance():
    with (
        dg.DagsterInstance.ephemeral() as instance
    ):  # disposed: an undisposed one is closed by the GC, noisily
        yield instance


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


def _select(wh, sql: str) -> list[tuple]:
    with wh.tagged_connection("test") as conn:
        cur = conn.cursor()
        cur.execute(sql)
        return cur.fetchall()


def _rows(wh) -> list[tuple]:
    return _select(wh, f'SELECT "ORGANIZATION_ID", "WAREHOUSE_NAME" FROM {TABLE}')


def test_a_row_added_but_not_recorded_is_found_listed_and_can_be_undone(setup, instance):
    wh, store, book = setup
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


def test_a_worker_killed_before_the_insert_added_nothing_and_the_receipt_says_so(setup, instance):
    wh, store, book = setup
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


def _loaded_twice(wh, day: date) -> Dedupe:
    """Store 3's lines loaded twice (store 4's once), and the removal a diagnosis would propose."""
    with wh.tagged_connection("test") as conn:
        cur = conn.cursor()
        cur.execute(f"DELETE FROM {LINES}")
        lines = [(1, 3, 10.5), (2, 3, 4.0), (3, 4, 7.25)]
        for row in [*lines, *lines[:2]]:
            cur.execute(f"INSERT INTO {LINES} VALUES (?, ?, ?)", row)
    return Dedupe(asset_key="raw_shop/order_lines", table_parts=("DW_PROD", "RAW_SHOP", "ORDER_LINES"),
                  columns=["LINE_ID", "STORE_ID", "AMOUNT"], key_column="STORE_ID", key_values=["3"],
                  extra_rows=2, backup_parts=("DW_PROD", "OPS_CRASH", f"DEDUPE_{day:%Y%m%d}"))  # fmt: skip


def _dedupe_night(setup, instance: dg.DagsterInstance, day: date):
    wh, store, _ = setup
    plan, run, _, approval = _night(setup, instance, day)
    dedupe = _loaded_twice(wh, day)
    proposal = Proposal(proposal_id="p9", kind=ProposalKind.DEDUPE, title="Remove the second load",
                        owners=["planning-ops"], dedupe=dedupe)  # fmt: skip
    plan = plan.model_copy(update={"proposals": [proposal]})
    return plan, run, dedupe, approval


def _lines(wh) -> list[tuple]:
    return _select(wh, f"SELECT LINE_ID, STORE_ID FROM {LINES} ORDER BY LINE_ID")


def test_copies_removed_but_not_recorded_are_found_listed_and_can_be_put_back(setup, instance):
    wh, store, book = setup
    plan, run, dedupe, approval = _dedupe_night(setup, instance, date(2025, 6, 18))
    intent = intent_recorder(store, plan, "p9", run.run_id)
    with wh.tagged_connection("test") as conn:
        remove_duplicates(conn.cursor(), "p9", dedupe, approval, before_delete=intent)
    # The worker dies here: the copies are gone, the `change` event never written.
    assert _lines(wh) == [(1, 3), (2, 3), (3, 4)]
    assert store.events(plan.incident_id, kind="change") == []

    receipt = crash_receipt(book, instance, plan, run)
    assert [(c.kind, c.rows, c.added) for c in receipt.changes] == [("dedupe", 2, True)]
    assert (
        "Removed 2 duplicate rows of STORE_ID 3" in receipt.failure
        and "recorded by this receipt" in receipt.failure
    )
    assert any("puts the 2 removed copies back" in step for step in receipt.undo)
    pending = pending_undo(store, plan.incident_id)
    with wh.tagged_connection("test") as conn:
        undo(conn.cursor(), store, plan.incident_id, pending, "Dana Ortiz")
    assert _lines(wh) == [(1, 3), (1, 3), (2, 3), (2, 3), (3, 4)]


def test_a_removal_killed_before_its_commit_is_reported_not_made_and_a_retry_finishes_it(setup, instance):
    wh, store, book = setup
    plan, run, dedupe, approval = _dedupe_night(setup, instance, date(2025, 6, 19))
    record = intent_recorder(store, plan, "p9", run.run_id)

    def dies_after_the_intent(change):
        record(change)
        raise Killed

    with wh.tagged_connection("test") as conn, pytest.raises(Killed):
        remove_duplicates(conn.cursor(), "p9", dedupe, approval, before_delete=dies_after_the_intent)
    receipt = crash_receipt(book, instance, plan, run)
    assert receipt.changes == []
    assert f"the copies were not removed from {LINES}" in receipt.failure
    with wh.tagged_connection("test") as conn:
        assert copies_left(conn.cursor(), dedupe) == 2
        # The retried run finds the copies it kept and the table still holding them: it finishes the removal.
        change = remove_duplicates(conn.cursor(), "p9", dedupe, approval)
        again = remove_duplicates(conn.cursor(), "p9", dedupe, approval)
    assert (change.added, change.rows) == (True, 2) and _lines(wh) == [(1, 3), (2, 3), (3, 4)]
    assert (again.added, "already removed" in again.what) == (False, True)
