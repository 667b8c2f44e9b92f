"""The gate on the Dagster instance: the held run a person approves or rejects, and what it says about itself.

Only the run dw-dagster submitted and bound for the plan (:mod:`~dw_dagster.remediation.submission`) can
be approved or rejected: a run someone launched with the same tags is never adopted. Once every owning
team has approved it, the run's ``dw/approval`` tag flips and the queue launches it on its next iteration;
the job's steps then check the record again themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import dagster as dg

from dw_dagster.context.models import ContextFile, Person
from dw_dagster.internals import EngineEventData
from dw_dagster.records.remediation import Approval, Decision, RemediationPlan
from dw_dagster.remediation.approvals import (
    REMEDIATION_JOB,
    ApprovalBook,
    ApprovalError,
    Prove,
    cancel_run,
)
from dw_dagster.remediation.control import OrgControl
from dw_dagster.remediation.submission import Binding
from dw_dagster.tags import (
    APPROVAL,
    APPROVAL_APPROVED,
    APPROVAL_PENDING,
    APPROVALS_NEEDED,
    APPROVE_BY,
    APPROVE_HOW,
    INCIDENT_ID,
    PLAN_ID,
)


@dataclass
class GateOutcome:
    run_id: str
    plan: RemediationPlan
    given: list[Approval]
    """The approvals this call recorded."""
    missing: list[str]
    """The owning teams without an approval of this run that verifies."""
    blocked: str | None = None
    """Why the gate will refuse the run whoever approves (then it is not released)."""
    refused: list[str] = field(default_factory=list)
    """Approval records of this run that do not verify (their teams are missing)."""
    unchecked: list[str] = field(default_factory=list)
    """What only the run itself can verify (the code location's seal, Slack's signing secret)."""

    @property
    def released(self) -> bool:
        return not self.missing and self.blocked is None

    @property
    def status(self) -> str:
        """What the person who approved is told: released only when the gate will let the run through."""
        if self.blocked:
            return f"not released: the gate will refuse the run ({self.blocked})"
        if self.missing:
            bad = f" (refused: {'; '.join(self.refused)})" if self.refused else ""
            return f"waiting for {', '.join(self.missing)}{bad}"
        checks = f"; its first step also verifies {', '.join(self.unchecked)}" if self.unchecked else ""
        return f"every owner has approved: the run is released{checks}"


def _latest_open_plan(book: ApprovalBook, incident_id: str) -> RemediationPlan:
    plans = book.plans(incident_id)
    if not plans:
        raise ApprovalError(f"incident {incident_id}: no remediation was proposed")
    plan = plans[-1]
    decision = book.decision(plan)
    if decision is not None:
        raise ApprovalError(
            f"incident {incident_id}: no remediation run is waiting for approval (plan {plan.plan_id} was "
            f"{decision.kind} by {decision.by}{_no_resubmission(decision.kind)})"
        )
    return plan


def _no_resubmission(kind: str) -> str:
    """A decided plan is never submitted again: a new diagnosis proposes a new one."""
    return (
        "; it is not submitted again: a new diagnosis of the incident proposes a new plan"
        if kind != "superseded"
        else ""
    )


def _why_no_run(book: ApprovalBook, plan: RemediationPlan, state: str) -> str:
    """What happens next to an undecided plan whose run is ``state`` (gone, canceled, failed, not bound yet):
    the sensor submits it again, unless the org-wide stop holds every submission."""
    if state in ("CANCELED", "FAILURE", "gone", "unbound"):
        control = OrgControl(book.store.warehouse, book.store.ops, book.context).state()
        if control.stopped:
            return f"; nothing is submitted while {control.describe()}"
        return "; the remediation_proposals sensor submits the plan again on its next tick, within a minute"
    return ""


def _waiting(run: dg.DagsterRun | None, plan: RemediationPlan) -> bool:
    return (
        run is not None
        and run.status == dg.DagsterRunStatus.QUEUED
        and run.tags.get(APPROVAL) == APPROVAL_PENDING
        and run.tags.get(PLAN_ID) == plan.plan_id
    )


def _current_binding(
    instance: dg.DagsterInstance, book: ApprovalBook, plan: RemediationPlan
) -> Binding | None:
    """The plan's bound run. Where this process cannot check the seals (a person's shell holds no
    ``DW_SIGNING_KEY``) it reads records anyone could have written, so of the bindings it takes the latest
    whose run still waits for approval: the sensor cancels every other queued run carrying the plan's tags.
    Either way the run's first step checks the sealed binding itself."""
    if book.seal is None:
        for b in sorted(book.runs.bindings(plan.plan_id), key=lambda b: -b.seq):
            if _waiting(instance.get_run_by_id(b.run_id), plan):
                return b
    return book.binding(plan)


def remediation_run(
    instance: dg.DagsterInstance, book: ApprovalBook, ref: str
) -> tuple[dg.DagsterRun, RemediationPlan, Binding]:
    """The held run a person names (a run id, or an incident id): only ever the run dw-dagster submitted
    and bound for the incident's current plan."""
    if ref.startswith("INC-"):
        plan = _latest_open_plan(book, ref)
    else:
        found = instance.get_run_by_id(ref)
        if found is None or found.job_name != REMEDIATION_JOB:
            raise ApprovalError(
                f"{ref}: not a remediation run (give a run id or an incident id like INC-...)"
            )
        plan = book.plan(found.tags.get(PLAN_ID, ""))
        if plan is None:
            raise ApprovalError(
                f"run {ref}: its plan {found.tags.get(PLAN_ID)} is not in the approval record"
            )
    decision = book.decision(plan)
    if decision is not None:
        raise ApprovalError(
            f"plan {plan.plan_id} was {decision.kind} by {decision.by}: its run is not waiting for approval"
            + _no_resubmission(decision.kind)
        )
    binding = _current_binding(instance, book, plan)
    if binding is None:
        raise ApprovalError(
            f"plan {plan.plan_id}: its run is being submitted (or submitted again after a cancel) and is not bound "
            f"yet{_why_no_run(book, plan, 'unbound')}: try again then"
        )
    if not ref.startswith("INC-") and ref != binding.run_id:
        raise ApprovalError(
            f"run {ref} was not submitted by dw-dagster for plan {plan.plan_id}: a run launched by hand is never "
            f"approved (the plan's run is {binding.run_id})"
        )
    run = instance.get_run_by_id(binding.run_id)
    if run is None or not _waiting(run, plan):
        state = "gone" if run is None else run.status.value
        raise ApprovalError(
            f"run {binding.run_id} of plan {plan.plan_id} is {state}, not waiting for approval"
            + _why_no_run(book, plan, state)
        )
    return run, plan, binding


def approve_run(
    instance: dg.DagsterInstance,
    book: ApprovalBook,
    ref: str,
    person: Person,
    prove: Prove,
    via: str,
    values: Mapping[str, str] | None = None,
    at: datetime | None = None,
) -> GateOutcome:
    """Records ``person``'s approval of the held run ``ref`` names, and releases the run once every owning
    team has approved it and nothing the gate checks will refuse it (the queue launches it on its next
    iteration); an approval record that does not verify counts for nothing and is reported."""
    run, plan, binding = remediation_run(instance, book, ref)
    given = book.approve(plan, binding, person, prove, via, values, at=at)
    check = book.release_check(plan, run, binding)
    missing = book.missing(plan, check.approvals)
    for reason in check.refused:
        book.refuse(plan.incident_id, "approval", reason, run_id=run.run_id, plan_id=plan.plan_id)
    if check.blocked:
        book.refuse(plan.incident_id, "release", check.blocked, run_id=run.run_id, plan_id=plan.plan_id)
    for a in given:
        instance.report_engine_event(
            f"Approved by {a.approver} for {a.team} (verified: {a.via}) at {a.at:%Y-%m-%d %H:%M:%S} UTC"
            + (f"; waiting for {', '.join(missing)}" if missing else "; every owner has approved"),
            run,
            EngineEventData(
                metadata={
                    "approver": a.approver,
                    "team": a.team,
                    "via": a.via or "",
                    "plan_id": plan.plan_id,
                    **a.values,
                }
            ),
        )
    instance.add_run_tags(run.run_id, {APPROVALS_NEEDED: ",".join(missing) or "none"})
    outcome = GateOutcome(run.run_id, plan, given, missing, check.blocked, check.refused, check.unchecked)
    if outcome.released:
        instance.add_run_tags(run.run_id, {APPROVAL: APPROVAL_APPROVED})
    return outcome


def reject_run(
    instance: dg.DagsterInstance, book: ApprovalBook, ref: str, person: Person, prove: Prove, reason: str
) -> Decision:
    run, plan, _ = remediation_run(instance, book, ref)
    decision = book.decide(plan, "rejected", person, reason, run_id=run.run_id, prove=prove)
    cancel_run(instance, run, decision)
    return decision


def how_to_approve(plan: RemediationPlan, run_id: str | None, channels: list[str]) -> str:
    where = (
        f"the Approve button in the incident's Slack threads ({', '.join(channels)})" if channels else "Slack"
    )
    return f"{where}, or `dw-dagster approve {run_id or plan.incident_id}` with your approver key"


def held_tags(plan: RemediationPlan, missing: list[str], how: str) -> dict[str, str]:
    """What the held run shows in the UI: who must still approve, by when, and how."""
    return {
        APPROVAL: APPROVAL_PENDING,
        INCIDENT_ID: plan.incident_id,
        PLAN_ID: plan.plan_id,
        APPROVALS_NEEDED: ",".join(missing) or "none",
        APPROVE_BY: plan.expires_at.strftime("%Y-%m-%dT%H:%MZ"),
        APPROVE_HOW: how,
    }


def explain_held_run(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    plan: RemediationPlan,
    context: ContextFile,
    channels: list[str],
) -> str:
    """Tags the bound run and writes, as its first event, what it waits for; returns that text."""
    how = how_to_approve(plan, run.run_id, channels)
    instance.add_run_tags(run.run_id, {APPROVALS_NEEDED: ",".join(plan.required_teams), APPROVE_HOW: how})
    who = "; ".join(
        f"{t} ({', '.join(m.name for m in context.teams[t].members) or 'nobody'})"
        for t in plan.required_teams
        if t in context.teams
    )
    text = (
        f"Held for approval: plan {plan.plan_id} for incident {plan.incident_id} needs one member of each of {who}, "
        f"by {plan.expires_at:%Y-%m-%d %H:%M} UTC (then it expires and escalates; it is never granted by itself). "
        f"Approve with {how}. Nothing runs until then; a run launched by hand with these tags is refused."
    )
    instance.report_engine_event(
        text, run, EngineEventData(metadata={"plan_id": plan.plan_id, "needs": ",".join(plan.required_teams)})
    )
    return text
