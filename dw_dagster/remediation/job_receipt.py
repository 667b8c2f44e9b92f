"""The remediation job's receipt: made from what the run did, appended to the incident's events, shown in
the UI and posted to the incident's threads, at the end of the run or when a step fails after changes may
have been made (the receipt then says what was done and how to undo it)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

import dagster as dg

from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_asset import receipt_materialization
from dw_dagster.notifications.receipt_text import receipt_markdown
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.wording import wording_for
from dw_dagster.records.remediation import Change, Receipt, VerificationResult
from dw_dagster.remediation.changes import undo_steps
from dw_dagster.remediation.control import escalate, gated_notifier
from dw_dagster.remediation.job_models import Approved, Rerun


@dataclass(frozen=True)
class JobReceipts:
    """Publishes the job's receipts, worded with the metrics file and sent as the context file routes them."""

    metrics: MetricsFile
    context_file: ContextFile

    def publish(
        self,
        context: dg.OpExecutionContext,
        store: IncidentStore,
        slack: SlackNotifier,
        approved: Approved,
        receipt: Receipt,
        problem: str,
    ) -> None:
        """Appends the receipt, shows it in the UI and posts it to the incident's threads. Verified, the
        incident is resolved; otherwise a person is told ``problem`` (the caller then fails the run)."""
        plan = approved.plan
        store.append_event(
            plan.incident_id,
            "receipt",
            f"receipt|{plan.plan_id}|{context.run_id}",
            receipt.model_dump(mode="json"),
        )
        if receipt.verified:
            store.set_status(plan.incident_id, "resolved")
        context.log_event(receipt_materialization(receipt, "resolved" if receipt.verified else "open"))
        notifier = gated_notifier(slack, store, self.context_file)
        # The receipt whole, then (verified) the resolution: each thread reads them in that order.
        approvers = ", ".join(a.approver for a in approved.approvals)
        resolution = f"Fixed and verified on approval of {approvers}." if receipt.verified else None
        found = latest_diagnosis(store, plan.incident_id)
        wording = wording_for(self.context_file, self.metrics, *found) if found else None
        notifier.post_receipt(approved.incident, receipt, resolution=resolution, wording=wording)
        if not receipt.verified:
            escalate(notifier, approved.incident, self.context_file, plan, problem, run_id=context.run_id)

    def fail(
        self,
        context: dg.OpExecutionContext,
        store: IncidentStore,
        slack: SlackNotifier,
        approved: Approved,
        changes: Sequence[Change],
        what: str,
        rerun: Rerun | None = None,
    ) -> NoReturn:
        """A step failed after changes may have been made: the receipt says what was done and how to undo it."""
        receipt = run_receipt(context, store, approved, changes, rerun, [], failure=what)
        self.publish(context, store, slack, approved, receipt, what)
        raise dg.Failure(what, metadata={"receipt": dg.MetadataValue.md(receipt_markdown(receipt))})


def run_receipt(
    context: dg.OpExecutionContext,
    store: IncidentStore,
    approved: Approved,
    changes: Sequence[Change],
    rerun: Rerun | None,
    verification: list[VerificationResult],
    failure: str | None = None,
) -> Receipt:
    """The run's receipt: its approvals, changes, rerun and verification, the cause from the incident's latest
    diagnosis, and how to undo each change; verified only when nothing failed and everything verified."""
    plan = approved.plan
    found = latest_diagnosis(store, plan.incident_id)
    return Receipt(
        incident_id=plan.incident_id,
        plan_id=plan.plan_id,
        cause=found[0].cause if found else approved.incident.title,
        evidence=dict(found[0].evidence) if found else {},
        proposals=plan.proposals,
        approvals=approved.approvals,
        changes=list(changes),
        dagster_run_id=context.run_id,
        coalesce_run_id=rerun.coalesce_run_id if rerun else None,
        coalesce_run_as=rerun.run_as if rerun else None,
        verification=verification,
        # Nothing verified is not verified.
        verified=failure is None and bool(verification) and all(v.passed for v in verification),
        failure=failure,
        undo=undo_steps(plan, changes),
        written_at=datetime.now(UTC),
    )
