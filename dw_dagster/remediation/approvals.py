"""The approval record and the gate: who may approve a plan, what they approved, and when it may run.

The record is the incident's append-only event log in the warehouse (``INCIDENT_EVENTS``): ``proposal``
events hold plans, ``approval`` events one approval per owning team, ``decision`` events a rejection or an
expiry. The Dagster run tag ``dw/approval`` only holds the run in the queue: :func:`approve_run` flips it
once every owning team has approved, and the remediation job's first op re-validates the run against this
record (:meth:`ApprovalBook.validate`), so a tag typed in the Launchpad or a re-executed run approves
nothing.

Approvers are the members of the owning teams in the context file; dw-dagster itself never is.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg
from dagster._core.events import EngineEventData
from dagster._core.storage.tags import PARENT_RUN_ID_TAG, RUN_KEY_TAG

from dw_dagster.context.models import ContextFile, Person
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.remediation.models import SYSTEM_ACTOR, Approval, Decision, ProposalKind, RemediationPlan
from dw_dagster.tags import (
    APPROVAL,
    APPROVAL_APPROVED,
    APPROVAL_PENDING,
    APPROVALS_NEEDED,
    INCIDENT_ID,
    PLAN_ID,
)

REMEDIATION_JOB = "remediate_incident"


class ApprovalError(Exception):
    """An approval, rejection or launch the record does not allow; the message says why and what to do."""


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def incident_of(plan_id: str) -> str:
    return plan_id.rsplit("-", 1)[0]


class ApprovalBook:
    def __init__(self, store: IncidentStore, context: ContextFile):
        self.store = store
        self.context = context

    # -- reading ---------------------------------------------------------------------------------

    def record_plan(self, plan: RemediationPlan) -> bool:
        return self.store.append_event(
            plan.incident_id, "proposal", plan.plan_id, plan.model_dump(mode="json")
        )

    def plans(self, incident_id: str) -> list[RemediationPlan]:
        return [
            RemediationPlan.model_validate(e.detail) for e in self.store.events(incident_id, kind="proposal")
        ]

    def plan(self, plan_id: str) -> RemediationPlan | None:
        return next((p for p in self.plans(incident_of(plan_id)) if p.plan_id == plan_id), None)

    def approvals(self, plan: RemediationPlan, run_id: str | None = None) -> list[Approval]:
        """The plan's approvals, for one run when given (approvals are bound to the run they release)."""
        events = self.store.events(plan.incident_id, kind="approval")
        out = [
            Approval.model_validate(e.detail)
            for e in events
            if e.event_key.startswith(f"approval|{plan.plan_id}|")
        ]
        return [a for a in out if run_id is None or a.run_id == run_id]

    def decision(self, plan: RemediationPlan) -> Decision | None:
        key = f"decision|{plan.plan_id}"
        events = [e for e in self.store.events(plan.incident_id, kind="decision") if e.event_key == key]
        return Decision.model_validate(events[0].detail) if events else None

    @staticmethod
    def missing(plan: RemediationPlan, approvals: Sequence[Approval]) -> list[str]:
        done = {a.team for a in approvals}
        return [t for t in plan.required_teams if t not in done]

    def owners_of_change(self, incident_id: str, proposal_id: str) -> list[str]:
        """The teams that own the proposal a recorded change carried out."""
        return [
            t
            for plan in self.plans(incident_id)
            for p in plan.proposals
            if p.proposal_id == proposal_id
            for t in p.owners
        ]

    def approvers(self, plan: RemediationPlan) -> dict[str, list[str]]:
        return {
            t: [m.name for m in self.context.teams[t].members]
            for t in plan.required_teams
            if t in self.context.teams
        }

    # -- writing ---------------------------------------------------------------------------------

    def _person(self, plan: RemediationPlan, who: str) -> tuple[Person, list[str]]:
        if who.strip().lower() in (SYSTEM_ACTOR, plan.proposed_by.lower()):
            raise ApprovalError(f"{who}: proposed this plan and cannot approve or reject it")
        person = self.context.person(who)
        if person is None:
            raise ApprovalError(
                f"{who!r} is not a member of any team in the context file; approvers of {plan.plan_id}: "
                + "; ".join(
                    f"{t}: {', '.join(names) or 'nobody'}" for t, names in self.approvers(plan).items()
                )
            )
        teams = [t for t in self.context.teams_of(person) if t in plan.required_teams]
        if not teams:
            raise ApprovalError(
                f"{person.name} is not an owner of plan {plan.plan_id}; it needs one member of each of "
                + "; ".join(f"{t} ({', '.join(names)})" for t, names in self.approvers(plan).items())
            )
        return person, teams

    def approve(
        self, plan: RemediationPlan, run_id: str, who: str, values: Mapping[str, str] | None = None
    ) -> list[Approval]:
        """Records ``who``'s approval for each owning team they belong to that has not approved yet."""
        values = dict(values or {})
        person, teams = self._person(plan, who)
        decision = self.decision(plan)
        if decision is not None:
            raise ApprovalError(
                f"plan {plan.plan_id} was {decision.kind} by {decision.by}: {decision.reason}"
            )
        now = datetime.now(UTC)
        if now >= plan.expires_at:
            raise ApprovalError(
                f"plan {plan.plan_id} expired at {plan.expires_at:%Y-%m-%d %H:%M} UTC; it is never granted late"
            )
        done = {a.team for a in self.approvals(plan, run_id)}
        new = [t for t in teams if t not in done]
        if not new:
            raise ApprovalError(f"plan {plan.plan_id}: {', '.join(teams)} already approved")
        self._check_values(plan, new, values)
        for proposal in plan.proposals:
            if (
                proposal.kind is ProposalKind.SCOPED_RERUN
                and set(proposal.owners) & set(new)
                and person.run_as is None
            ):
                raise ApprovalError(
                    f"{person.name} has no run_as in the context file: an approved rerun runs under the "
                    "approver's own Coalesce credentials, so another owner must approve it"
                )
        out = []
        for team in new:
            approval = Approval(
                plan_id=plan.plan_id, team=team, approver=person.name, email=person.email, at=now, run_id=run_id,
                values=values if any(self._owns_row(plan, team)) else {}, os_user=_os_user(),
            )  # fmt: skip
            key = f"approval|{plan.plan_id}|{run_id}|{team}"
            self.store.append_event(plan.incident_id, "approval", key, approval.model_dump(mode="json"))
            out.append(approval)
        return out

    @staticmethod
    def _owns_row(plan: RemediationPlan, team: str):
        return (p for p in plan.of_kind(ProposalKind.REFERENCE_ROW) if team in p.owners)

    def _check_values(self, plan: RemediationPlan, teams: Sequence[str], values: Mapping[str, str]) -> None:
        rows = [p.reference_row for t in teams for p in self._owns_row(plan, t) if p.reference_row]
        if values and not rows:
            raise ApprovalError(f"--set: {', '.join(teams)} own no reference row in plan {plan.plan_id}")
        for row in rows:
            unknown = sorted(set(values) - set(row.values) - {row.key_column})
            if unknown or row.key_column in values:
                bad = unknown or [row.key_column]
                raise ApprovalError(
                    f"--set {', '.join(bad)}: not a column you may set on {row.table}; "
                    f"columns: {', '.join(c for c in row.values if c != row.key_column)}"
                )
            missing = row.missing(dict(values))
            if missing:
                raise ApprovalError(
                    f"{row.table}: {', '.join(missing)} may not be empty and could not be drafted; approve with "
                    + " ".join(f"--set {c}=..." for c in missing)
                )

    def decide(
        self, plan: RemediationPlan, kind: str, who: str, reason: str, run_id: str | None = None
    ) -> Decision:
        if kind == "rejected":
            person, _ = self._person(plan, who)
            who = person.name
            if not reason.strip():
                raise ApprovalError("a rejection needs a reason (--reason)")
        decision = Decision(
            plan_id=plan.plan_id,
            kind=kind,
            by=who,
            at=datetime.now(UTC),
            reason=reason,
            run_id=run_id,
        )  # type: ignore[arg-type]
        # Event keys are unique per incident across kinds: the plan's own key is its proposal's.
        if not self.store.append_event(
            plan.incident_id, "decision", f"decision|{plan.plan_id}", decision.model_dump(mode="json")
        ):
            existing = self.decision(plan)
            raise ApprovalError(f"plan {plan.plan_id} was already {existing.kind if existing else 'decided'}")
        return decision

    # -- the first op's check --------------------------------------------------------------------

    def validate(
        self, run_id: str, tags: Mapping[str, str], parent_run_id: str | None = None
    ) -> tuple[RemediationPlan, list[Approval]]:
        """The plan and its approvals if this run may change anything; else :class:`ApprovalError`."""
        plan_id = tags.get(PLAN_ID)
        if not plan_id:
            raise ApprovalError(
                f"run tag {PLAN_ID}: missing; a remediation run carries the plan it carries out"
            )
        plan = self.plan(plan_id)
        if plan is None or plan.incident_id != tags.get(INCIDENT_ID):
            raise ApprovalError(
                f"plan {plan_id}: not in the approval record of incident {tags.get(INCIDENT_ID)}"
            )
        decision = self.decision(plan)
        if decision is not None:
            raise ApprovalError(f"plan {plan_id} was {decision.kind} by {decision.by}: {decision.reason}")
        parent = parent_run_id or tags.get(PARENT_RUN_ID_TAG)
        if parent:
            raise ApprovalError(f"run {run_id} re-executes run {parent}; a re-execution is not an approval")
        incident = self.store.get(plan.incident_id)
        if incident is None or incident.status != "open":
            raise ApprovalError(
                f"incident {plan.incident_id} is {incident.status if incident else 'missing'}, not open"
            )
        approvals = self.approvals(plan, run_id)
        for a in approvals:
            person = self.context.person(a.email)
            if person is None or a.team not in self.context.teams_of(person) or a.approver == SYSTEM_ACTOR:
                raise ApprovalError(
                    f"approval by {a.approver} for {a.team}: not a member of that team (any more)"
                )
            if a.at >= plan.expires_at:
                raise ApprovalError(f"approval by {a.approver} came after the plan expired")
        missing = self.missing(plan, approvals)
        if missing:
            raise ApprovalError(
                f"run {run_id}: no recorded approval for this run from {', '.join(missing)}; the {APPROVAL} tag is "
                "not an approval (approvals are given with `dw-dagster approve`, for the queued run they name)"
            )
        return plan, approvals


# -- the gate on the Dagster instance --------------------------------------------------------------


@dataclass
class GateOutcome:
    run_id: str
    plan: RemediationPlan
    given: list[Approval]
    """The approvals this command recorded."""
    missing: list[str]

    @property
    def released(self) -> bool:
        return not self.missing


def remediation_run(instance: dg.DagsterInstance, ref: str) -> dg.DagsterRun:
    """The queued remediation run a person names: a run id, or an incident id with one run waiting."""
    if ref.startswith("INC-"):
        runs = instance.get_runs(
            dg.RunsFilter(
                tags={INCIDENT_ID: ref, APPROVAL: APPROVAL_PENDING},
                job_name=REMEDIATION_JOB,
                statuses=[dg.DagsterRunStatus.QUEUED],
            )  # fmt: skip
        )
        if not runs:
            raise ApprovalError(f"incident {ref}: no remediation run is waiting for approval")
        if len(runs) > 1:
            raise ApprovalError(
                f"incident {ref}: {len(runs)} runs wait for approval ({', '.join(r.run_id for r in runs)}); name one"
            )
        run = runs[0]
    else:
        found = instance.get_run_by_id(ref)
        if found is None or found.job_name != REMEDIATION_JOB:
            raise ApprovalError(
                f"{ref}: not a remediation run (give a run id or an incident id like INC-...)"
            )
        if found.status != dg.DagsterRunStatus.QUEUED or found.tags.get(APPROVAL) != APPROVAL_PENDING:
            raise ApprovalError(f"run {ref} is {found.status.value}, not waiting for approval")
        run = found
    # Only the run the proposals sensor submitted for the plan: one launched by hand with the same tags is not.
    if run.tags.get(RUN_KEY_TAG) != run.tags.get(PLAN_ID):
        raise ApprovalError(
            f"run {run.run_id} was not submitted by the remediation_proposals sensor for its plan"
        )
    return run


def _plan_of(book: ApprovalBook, run: dg.DagsterRun) -> RemediationPlan:
    plan = book.plan(run.tags.get(PLAN_ID, ""))
    if plan is None:
        raise ApprovalError(
            f"run {run.run_id}: its plan {run.tags.get(PLAN_ID)} is not in the approval record"
        )
    return plan


def approve_run(
    instance: dg.DagsterInstance,
    book: ApprovalBook,
    ref: str,
    who: str,
    values: Mapping[str, str] | None = None,
) -> GateOutcome:
    """Records an approval for the queued run ``ref`` names, and releases the run once every owning team
    has approved (the queue launches it on its next iteration)."""
    run = remediation_run(instance, ref)
    plan = _plan_of(book, run)
    given = book.approve(plan, run.run_id, who, values)
    missing = book.missing(plan, book.approvals(plan, run.run_id))
    for a in given:
        instance.report_engine_event(
            f"Approved by {a.approver} for {a.team} at {a.at:%Y-%m-%d %H:%M:%S} UTC"
            + (f"; waiting for {', '.join(missing)}" if missing else "; every owner has approved"),
            run,
            EngineEventData(
                metadata={"approver": a.approver, "team": a.team, "plan_id": plan.plan_id, **a.values}
            ),
        )
    instance.add_run_tags(run.run_id, {APPROVALS_NEEDED: ",".join(missing) or "none"})
    if not missing:
        instance.add_run_tags(run.run_id, {APPROVAL: APPROVAL_APPROVED})
    return GateOutcome(run.run_id, plan, given, missing)


def cancel_run(instance: dg.DagsterInstance, run: dg.DagsterRun, decision: Decision) -> None:
    instance.report_engine_event(
        f"{decision.kind.capitalize()} by {decision.by}: {decision.reason}",
        run,
        EngineEventData(metadata={"decision": decision.kind, "by": decision.by, "plan_id": decision.plan_id}),
    )
    instance.run_coordinator.cancel_run(run.run_id)


def reject_run(instance: dg.DagsterInstance, book: ApprovalBook, ref: str, who: str, reason: str) -> Decision:
    run = remediation_run(instance, ref)
    plan = _plan_of(book, run)
    decision = book.decide(plan, "rejected", who, reason, run_id=run.run_id)
    cancel_run(instance, run, decision)
    return decision


def supersede_older(instance: dg.DagsterInstance, book: ApprovalBook, plan: RemediationPlan) -> list[str]:
    """A newer plan for the incident replaces the older ones: they are decided "superseded" and their
    queued runs canceled, so an approval can only ever release the latest plan. Returns the canceled runs."""
    canceled = []
    for old in book.plans(plan.incident_id):
        if old.plan_id == plan.plan_id or book.decision(old) is not None:
            continue
        decision = book.decide(
            old, "superseded", SYSTEM_ACTOR, f"replaced by {plan.plan_id} after a new diagnosis"
        )
        for run in instance.get_runs(
            dg.RunsFilter(tags={PLAN_ID: old.plan_id}, statuses=[dg.DagsterRunStatus.QUEUED])
        ):
            cancel_run(instance, run, decision)
            canceled.append(run.run_id)
    return canceled
