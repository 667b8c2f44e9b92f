"""A remediation run that stopped part-way: its receipt, the escalation, and its plan open to retry.

The remediation job records each change as it makes it (``change``, ``rerun`` events keyed by its run) and
writes the receipt at its end, or when a step fails in a way it foresaw. A run that dies in between (its
worker killed, an error no step caught) leaves changes and no receipt. The proposals sensor finds the plan's
bound run FAILED after it changed something (Dagster's storage first, then the incident's events) and:

1. writes the failure receipt from that run's own events: what was applied, the rerun it started, what
   stopped it (the failed step's error, from the run's event log), and how to undo each change;
2. posts it and escalates in the incident's threads;
3. records the plan ``retryable`` and submits it again: a new run held by the same gate, which the owners
   approve again (a change already made is found as approved and not made twice) or leave to expire. A new
   diagnosis may propose another plan instead, and ``dw-dagster undo`` works as before.

A reference row is added, and a load's copies removed, after an ``applying`` event that carries the change
about to be made: a worker killed between the change and its ``change`` event leaves that intent. The
receipt looks in the warehouse (the key in its table; no copies left in the removal's scope); made, the
change is recorded for the run (so ``undo`` reverts it) and listed, and not made, the receipt says so.
"""

from datetime import UTC, datetime

import dagster as dg

from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import Change, Receipt, RemediationPlan
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.remediation.change_log import APPLYING, record_change
from dw_dagster.remediation.changes import row_present, undo_steps
from dw_dagster.remediation.source_steps import copies_left
from dw_dagster.runs import failure_reason

RETRYABLE = "retryable"


def _unrecorded(
    store: IncidentStore, plan: RemediationPlan, run_id: str, intents: list[Change]
) -> tuple[list[Change], list[str]]:
    """Of the changes the run was about to make when it stopped (a row to add, copies to remove), those in
    the warehouse now (recorded here as its changes) and a line for each that is not."""
    found: list[Change] = []
    absent: list[str] = []
    if not intents:
        return found, absent
    dedupes = {p.proposal_id: p.dedupe for p in plan.proposals if p.dedupe is not None}
    with store.warehouse.tagged_connection("remediation.crash_receipt", dagster_run_id=run_id) as conn:
        cur = conn.cursor()
        for intent in intents:
            dedupe = dedupes.get(intent.proposal_id) if intent.kind == "dedupe" else None
            if dedupe is not None:
                made = copies_left(cur, dedupe) == 0
                missed = (
                    f"the copies were not removed from {dedupe.table} (still in it; "
                    f"kept in {dedupe.backup} too)"
                )
            else:
                made = row_present(cur, intent)
                missed = f"{intent.key_column} {intent.key_value} was not added (not in the table)"
            if made:
                change = intent.model_copy(
                    update={
                        "what": f"{intent.what} (recorded by this receipt: the run "
                        "stopped before it recorded its change)"
                    }
                )
                record_change(store, plan, change, run_id)
                found.append(change)
            else:
                absent.append(missed)
    return found, absent


def crash_receipt(
    book: ApprovalBook, instance: dg.DagsterInstance, plan: RemediationPlan, run: dg.DagsterRun
) -> Receipt | None:
    """Writes the failure receipt of a run that stopped without one; None when the run wrote its own."""
    store = book.store
    key = f"receipt|{plan.plan_id}|{run.run_id}"
    events = store.events(plan.incident_id)
    if any(e.kind == "receipt" and e.event_key == key for e in events):
        return None
    mine = [e for e in events if run.run_id in e.event_key]
    changes = [Change.model_validate(e.detail) for e in mine if e.kind == "change"]
    recorded = {c.proposal_id for c in changes}
    intents = [Change.model_validate(e.detail) for e in mine if e.kind == APPLYING]
    found, absent = _unrecorded(
        store, plan, run.run_id, [c for c in intents if c.proposal_id not in recorded]
    )
    changes += found
    rerun = next((e.detail for e in mine if e.kind == "rerun"), None)
    applied = "; ".join([c.what for c in changes] + absent) or "no reference or source change"
    started = f"; it had started Coalesce run {rerun['coalesce_run_id']}" if rerun else ""
    found = latest_diagnosis(store, plan.incident_id)
    incident = store.get(plan.incident_id)
    receipt = Receipt(
        incident_id=plan.incident_id,
        plan_id=plan.plan_id,
        cause=found[0].cause if found else (incident.title if incident else plan.plan_id),
        evidence=dict(found[0].evidence) if found else {},
        proposals=plan.proposals,
        approvals=book.approvals(plan, run.run_id),
        changes=changes,
        dagster_run_id=run.run_id,
        coalesce_run_id=int(rerun["coalesce_run_id"]) if rerun else None,
        coalesce_run_as=rerun.get("run_as") if rerun else None,
        verification=[],
        verified=False,
        failure=f"run {run.run_id} stopped part-way ({failure_reason(instance, run)}) after: {applied}{started}",
        undo=undo_steps(plan, changes),
        written_at=datetime.now(UTC),
    )
    if not store.append_event(plan.incident_id, "receipt", key, receipt.model_dump(mode="json")):
        return None  # another tick wrote it
    return receipt


def mark_retryable(book: ApprovalBook, plan: RemediationPlan, run: dg.DagsterRun, why: str) -> bool:
    """Records that the plan may run again after ``run`` failed; False when it already was (one retry
    submission per failed run)."""
    return book.store.append_event(
        plan.incident_id,
        RETRYABLE,
        f"{RETRYABLE}|{plan.plan_id}|{run.run_id}",
        {"run_id": run.run_id, "why": why},
    )
