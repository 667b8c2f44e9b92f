"""The work of the sensors around the remediation job (wired in ``app/remediation_sensors.py``).

- ``Proposer``: submits one held run per plan (``dw/approval=pending``: dagster.yaml's tag concurrency limit
  of 0 keeps it QUEUED, using no compute) with the run config the deployment sets, binds the plan to that
  very run on its next tick (only if it is exactly the run requested: a run someone else launched, re-executed
  or relaunched with its tags is refused, canceled and reported, and the plan submitted again), tells the
  owners how to approve it, submits the plan again when its run was canceled, writes the receipt of a run that
  stopped part-way after changing something (failed, or canceled; ``crash_receipt.py``), escalates it and
  submits the plan again for a new approval, and cancels (and reports) any other run someone launched with the
  plan's tags.
- ``expire_pending``: cancels a run whose plan expired unanswered and escalates on Slack; it never grants.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from dw_dagster.context.models import ContextFile
from dw_dagster.notifications.incident_notifier import IncidentNotifier
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.records.incidents import Incident
from dw_dagster.records.remediation import SYSTEM_ACTOR, RemediationPlan
from dw_dagster.remediation.approvals import (
    REMEDIATION_JOB,
    ApprovalBook,
    ApprovalError,
    cancel_run,
)
from dw_dagster.remediation.change_log import APPLYING
from dw_dagster.remediation.control import escalate, gated_notifier, owner_channels
from dw_dagster.remediation.crash_receipt import crash_receipt, mark_retryable
from dw_dagster.remediation.gate import explain_held_run, held_tags, how_to_approve
from dw_dagster.remediation.submission import RunRecordError, submitted_run
from dw_dagster.tags import APPROVAL, APPROVAL_PENDING, PLAN_ID, SUBMISSION

SUBMIT_GRACE = timedelta(minutes=10)
"""How long a submission may wait for the daemon to create its run before the plan is submitted again."""
_CHANGE_KINDS = (APPLYING, "change", "rerun", "awaiting_deploy", "receipt")
"""What a run records as it changes something: a change about to be made (its intent) counts, since a run
killed between the change and its record leaves only that."""


class Proposer:
    """One tick of the ``remediation_proposals`` sensor: what it submits, binds, refuses and retries."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        book: ApprovalBook,
        resources: Mapping[str, Any],
        notifier: IncidentNotifier,
        context_file: ContextFile,
        job: dg.JobDefinition,
        run_config: Mapping[str, Any],
    ):
        self.instance = instance
        self.book = book
        self.resources = resources
        self.notifier = notifier
        self.context_file = context_file
        self.job = job
        self.run_config = dict(run_config)
        """The run config of every remediation run (the deployment's): the binding compares it, op config included."""
        self.requests: list[dg.RunRequest] = []
        self.due: datetime | None = None
        """When a submission the daemon has not created a run for yet is to be looked at again."""

    def submit(self, plan: RemediationPlan, seq: int) -> None:
        how = how_to_approve(plan, None, owner_channels(self.notifier, plan.incident_id))
        tags = held_tags(plan, plan.required_teams, how)
        sub, nonce = self.book.runs.submit(plan.plan_id, seq, self.job, self.resources, self.run_config, tags)
        self._look_again(sub.at + SUBMIT_GRACE)
        self.requests.append(
            dg.RunRequest(
                run_key=f"{plan.plan_id}:{sub.seq}",
                run_config=self.run_config,
                tags={**tags, SUBMISSION: nonce},
            )
        )

    def _look_again(self, at: datetime) -> None:
        self.due = at if self.due is None else min(self.due, at)

    def _changed_anything(self, incident_id: str, run_id: str) -> bool:
        events = self.book.store.events(incident_id)
        return any(e.kind in _CHANGE_KINDS and run_id in e.event_key for e in events)

    def retry_failed(self, incident: Incident, plan: RemediationPlan, run: dg.DagsterRun, seq: int) -> None:
        """The bound run failed after it changed something: its receipt (written here when the run died
        before writing one), a person told, and the plan submitted again for a new approval."""
        receipt = crash_receipt(self.book, self.instance, plan, run)
        if receipt is not None:
            self.notifier.post_receipt(incident, receipt)
            undo = f" To undo instead: {' '.join(receipt.undo)}" if receipt.undo else ""
            escalate(
                self.notifier,
                incident,
                self.context_file,
                plan,
                f"{receipt.failure}. The plan is submitted again: approve the new run to finish it.{undo}",
                run_id=run.run_id,
            )
        if mark_retryable(self.book, plan, run, "its run failed after changing something"):
            self.submit(plan, seq + 1)

    def bind(self, incident: Incident, plan: RemediationPlan, run: dg.DagsterRun, seq: int) -> bool:
        """Binds the plan to the run the daemon created for its submission; the run explains itself in the
        UI, and the owners get the proposal with Approve / Reject buttons that name this very run. A run that
        is not exactly the one requested is refused, canceled and reported (False): the plan is submitted
        again."""
        subs = self.book.runs.submissions(plan.plan_id)
        try:
            self.book.runs.bind(subs[-1], run)
        except RunRecordError as e:
            reason = f"{e}: not the run dw-dagster submitted; canceled, and the plan is submitted again"
            self.book.refuse(incident.incident_id, "run", reason, run_id=run.run_id, plan_id=plan.plan_id)
            self.instance.report_engine_event(f"Refused by dw-dagster: {reason}", run)
            self.instance.run_coordinator.cancel_run(run.run_id)
            return False
        explain_held_run(
            self.instance, run, plan, self.context_file, owner_channels(self.notifier, incident.incident_id)
        )
        if seq > 1:
            self.notifier.post_update(
                incident,
                f"The earlier run of {plan.plan_id} was canceled, refused or failed; dw-dagster "
                f"submitted it again as {run.run_id}. Approvals are given for one run: please approve this one.",
                kind="resubmitted",
                version=run.run_id,
                run_id=run.run_id,
            )
        self.notifier.post_proposal(incident, plan, run_id=run.run_id)
        return True

    def propose(self, incident: Incident) -> None:
        plans = self.book.plans(incident.incident_id)
        if not plans or self.book.decision(plans[-1]) is not None:
            return
        plan = plans[-1]
        try:
            self.book.verified_plan(plan.plan_id)
        except ApprovalError as e:
            self.book.store.append_event(
                incident.incident_id,
                "refused",
                f"refused|plan|{plan.plan_id}",
                {"what": "plan", "plan_id": plan.plan_id, "reason": str(e)},
            )
            return
        runs = self.instance.get_runs(dg.RunsFilter(tags={PLAN_ID: plan.plan_id}))
        subs = self.book.runs.submissions(plan.plan_id)
        binding = self.book.runs.binding(plan.plan_id)
        legit: set[str] = set()
        if not subs:
            self.submit(plan, 1)
        elif binding is None:
            run = submitted_run(subs[-1], runs)
            if run is not None and run.status == dg.DagsterRunStatus.QUEUED:
                legit.add(run.run_id)  # bound, or refused and canceled here
                if not self.bind(incident, plan, run, subs[-1].seq):
                    self.submit(plan, subs[-1].seq + 1)
            elif run is not None or datetime.now(UTC) - subs[-1].at > SUBMIT_GRACE:
                # Canceled before it was bound, or never created: the system submits the plan again.
                self.submit(plan, subs[-1].seq + 1)
            else:
                self._look_again(subs[-1].at + SUBMIT_GRACE)
        else:
            bound = self.instance.get_run_by_id(binding.run_id)
            legit.add(binding.run_id)
            ended = bound is None or bound.status in (
                dg.DagsterRunStatus.CANCELED,
                dg.DagsterRunStatus.FAILURE,
            )
            if ended and bound is not None and self._changed_anything(incident.incident_id, binding.run_id):
                # Stopped part-way (failed, killed, or canceled mid-run) after changing something.
                self.retry_failed(incident, plan, bound, binding.seq)
            elif ended:
                # Canceled by someone, or refused before it changed anything: the system proposes it again.
                self.submit(plan, binding.seq + 1)
        for key in dict.fromkeys(self.book.runs.forged):
            self.book.store.append_event(
                incident.incident_id,
                "refused",
                f"refused|record|{key}",
                {
                    "what": "record",
                    "event_key": key,
                    "reason": "not sealed by this deployment: forged or altered; ignored",
                },
            )
        self.book.runs.forged.clear()
        for run in runs:
            if run.status != dg.DagsterRunStatus.QUEUED or run.run_id in legit:
                continue
            reason = "carries the plan's tags but is not the run dw-dagster submitted for it: canceled"
            self.book.refuse(incident.incident_id, "run", reason, run_id=run.run_id, plan_id=plan.plan_id)
            self.instance.report_engine_event(f"Refused by dw-dagster: this run {reason}", run)
            self.instance.run_coordinator.cancel_run(run.run_id)


def expire_pending(
    instance: dg.DagsterInstance,
    book: ApprovalBook,
    slack: SlackNotifier,
    context_file: ContextFile,
    now: datetime | None = None,
) -> list[str]:
    """Cancels every queued remediation run whose plan has expired; returns their run ids."""
    now = now or datetime.now(UTC)
    out = []
    for run, plan in _held_plans(instance, book):
        if plan.expires_at > now:
            continue
        # Re-read just before deciding: an approval that released the run a moment ago wins.
        current = instance.get_run_by_id(run.run_id)
        if (
            current is None
            or current.status != dg.DagsterRunStatus.QUEUED
            or current.tags.get(APPROVAL) != APPROVAL_PENDING
        ):
            continue
        missing = book.missing(plan, book.approvals(plan, run.run_id))
        reason = f"no answer from {', '.join(missing)} by {plan.expires_at:%Y-%m-%d %H:%M} UTC"
        try:
            decision = book.decide(plan, "expired", SYSTEM_ACTOR, reason, run_id=run.run_id)
        except ApprovalError:
            decision = book.decision(plan)  # another tick recorded it: its runs still go
            if decision is None:
                continue
        cancel_run(instance, run, decision)
        incident = book.store.get(plan.incident_id)
        if incident is not None and decision.run_id == run.run_id:
            escalate(
                gated_notifier(slack, book.store, context_file),
                incident,
                context_file,
                plan,
                f"the proposed fix {plan.plan_id} expired unapproved ({reason}); nothing was changed",
                run_id=run.run_id,
            )
        out.append(run.run_id)
    return out


def next_expiry(instance: dg.DagsterInstance, book: ApprovalBook) -> datetime | None:
    """The earliest expiry among the plans whose runs still wait for approval (their plans' own times)."""
    return min((plan.expires_at for _, plan in _held_plans(instance, book)), default=None)


def _held_plans(
    instance: dg.DagsterInstance, book: ApprovalBook
) -> Iterator[tuple[dg.DagsterRun, RemediationPlan]]:
    """Each queued remediation run still held for approval, with its recorded plan."""
    runs = instance.get_runs(dg.RunsFilter(job_name=REMEDIATION_JOB, statuses=[dg.DagsterRunStatus.QUEUED]))
    for run in runs:
        if run.tags.get(APPROVAL) != APPROVAL_PENDING:
            continue
        plan = book.plan(run.tags.get(PLAN_ID, ""))
        if plan is not None:
            yield run, plan
