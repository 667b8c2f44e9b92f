"""The approval record: plans, approvals and decisions, each verified before anything trusts it.

The record is the incident's append-only event log in the warehouse (``INCIDENT_EVENTS``): ``proposal``
events hold plans (sealed by the deployment, :mod:`~dw_dagster.remediation.signing`), ``submission`` and
``binding`` events the run the system submitted for each (:mod:`~dw_dagster.remediation.submission`),
``approval`` events one approval per owning team with its proof (:mod:`~dw_dagster.remediation.identity`),
``decision`` events a rejection, an expiry or a newer plan, ``refused`` events every attempt that was turned
down; each also goes on the audit trail (:mod:`~dw_dagster.remediation.audit`). The run tag ``dw/approval``
only holds the run in the queue; :meth:`ApprovalBook.validate` is what every changing step of the remediation
job asks, so a tag, a typed name, a written row or a run launched by hand approves nothing.

An approval is the approver's proof over exactly what it approves: the plan's id and digest, the run's id,
the digest of the run's whole configuration as bound (op config, resources, the tags that matter), the
values they set and the plan's expiry. A row is only its transport: the gate verifies every proof when the
run starts and compares each field with the plan and the run in hand, so an approval copied from another
run, or signed for another run and stored under this one's key, is refused.

Approvers are the members of the owning teams in the context file; dw-dagster itself never is.

Reading the record imports no Dagster (``proposals`` and the lookups of ``approve`` read it during an
incident); what acts on runs imports it when called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from pydantic import TypeAdapter, ValidationError

from dw_dagster.config import DwConfigError
from dw_dagster.context.models import ContextFile, Person
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import IncidentEvent
from dw_dagster.records.remediation import SYSTEM_ACTOR, Approval, Decision, ProposalKind, RemediationPlan
from dw_dagster.remediation.audit import TrailSigner, audited
from dw_dagster.remediation.identity import IdentityError, Proof, SlackProof, verify_proof
from dw_dagster.remediation.signing import Seal, digest, unsealed
from dw_dagster.remediation.slack_request import APPROVE_ACTION
from dw_dagster.remediation.submission import (
    Binding,
    RunRecordError,
    RunRecords,
    check_run,
    config_digest,
    incident_of,
)
from dw_dagster.tags import INCIDENT_ID, PLAN_ID

if TYPE_CHECKING:
    import dagster as dg

REMEDIATION_JOB = "remediate_incident"
_PLAN = "proposal"
_PROOF = TypeAdapter(Proof)
_TIME = TypeAdapter(datetime)

Prove = Callable[[Mapping[str, Any]], Any]
"""Makes the proof of a record (a signature with the person's key, the Slack request of their click)."""


class ApprovalError(Exception):
    """An approval, rejection or launch the record does not allow; the message says why and what to do."""


class ReleaseCheck:
    """What the gate will find when the run starts, as far as this process can tell."""

    def __init__(self) -> None:
        self.approvals: list[Approval] = []
        self.refused: list[str] = []
        """Approval records that do not verify (their teams count as missing)."""
        self.blocked: str | None = None
        """Why the gate will refuse the run whoever approves."""
        self.unchecked: list[str] = []
        """What only the code location can verify (its seal, Slack's signing secret)."""


class ApprovalBook:
    def __init__(
        self,
        store: IncidentStore,
        context: ContextFile,
        seal: Seal | None = None,
        trail_signer: TrailSigner | None = None,
    ):
        # Everything the book records goes on the audit trail, signed by the code location's key when this
        # process holds it, else by ``trail_signer`` (the person running a command).
        self.store = audited(store, trail_signer)
        self.context = context
        # The code location holds the deployment's key; a person's shell does not, and reads unverified.
        self.seal = seal if seal is not None else Seal.optional()
        self.runs = RunRecords(self.store, self.seal)

    def _required_seal(self) -> Seal:
        if self.seal is None:
            return Seal.from_env()  # raises, naming DW_SIGNING_KEY
        return self.seal

    # -- plans -----------------------------------------------------------------------------------

    def record_plan(self, plan: RemediationPlan) -> bool:
        detail = self._required_seal().seal(_PLAN, plan.model_dump(mode="json"))
        return self.store.append_event(plan.incident_id, _PLAN, plan.plan_id, detail)

    def plans(self, incident_id: str) -> list[RemediationPlan]:
        return [RemediationPlan.model_validate(e.detail) for e in self.store.events(incident_id, kind=_PLAN)]

    def plan(self, plan_id: str) -> RemediationPlan | None:
        return next((p for p in self.plans(incident_of(plan_id)) if p.plan_id == plan_id), None)

    def verified_plan(self, plan_id: str) -> tuple[RemediationPlan, str]:
        """The plan as the deployment recorded it, and its digest (what approvals are given for)."""
        seal = self._required_seal()
        events = [e for e in self.store.events(incident_of(plan_id), kind=_PLAN) if e.event_key == plan_id]
        if not events:
            raise ApprovalError(
                f"plan {plan_id}: not in the approval record of incident {incident_of(plan_id)}"
            )
        if not seal.is_sealed(_PLAN, events[0].detail):
            raise ApprovalError(
                f"plan {plan_id}: its record is not sealed by this deployment: forged or altered"
            )
        return RemediationPlan.model_validate(events[0].detail), digest(unsealed(events[0].detail))

    def plan_digest(self, plan_id: str) -> str:
        events = [e for e in self.store.events(incident_of(plan_id), kind=_PLAN) if e.event_key == plan_id]
        if not events:
            raise ApprovalError(
                f"plan {plan_id}: not in the approval record of incident {incident_of(plan_id)}"
            )
        return digest(unsealed(events[0].detail))

    def binding(self, plan: RemediationPlan) -> Binding | None:
        return self.runs.binding(plan.plan_id)

    # -- approvals and decisions -----------------------------------------------------------------

    def _approval_events(self, plan: RemediationPlan, run_id: str | None) -> list[IncidentEvent]:
        prefix = f"approval|{plan.plan_id}|" + (f"{run_id}|" if run_id else "")
        return [
            e for e in self.store.events(plan.incident_id, kind="approval") if e.event_key.startswith(prefix)
        ]

    def approvals(self, plan: RemediationPlan, run_id: str | None = None) -> list[Approval]:
        """The plan's approvals as recorded (for one run when given), not verified: for showing."""
        return [Approval.model_validate(e.detail) for e in self._approval_events(plan, run_id)]

    def _verified(
        self, event: IncidentEvent, plan: RemediationPlan, run_id: str, plan_digest: str, bound_config: str
    ) -> Approval:
        """The approval an event transports, once its proof verifies and every field it approves is this
        plan's and this run's; else :class:`ApprovalError` naming what does not fit."""
        detail = event.detail
        try:
            approval = Approval.model_validate(detail)
            proof = _PROOF.validate_python(detail.get("proof"))
        except ValidationError:
            raise ApprovalError(
                f"approval record {detail.get('approver')!r} for run {run_id}: no valid proof"
            ) from None
        who = f"approval by {approval.approver} for {approval.team}"
        record = {k: v for k, v in detail.items() if k != "proof"}
        try:
            person = verify_proof(record, proof, self.context, APPROVE_ACTION)
        except IdentityError as e:
            raise ApprovalError(f"{who}: {e}") from None
        if (record.get("plan_id"), record.get("run_id")) != (plan.plan_id, run_id):
            raise ApprovalError(
                f"{who}: given for plan {record.get('plan_id')}, run {record.get('run_id')}, not run {run_id}: an "
                "approval copied or addressed to another run approves nothing here"
            )
        if record.get("plan_digest") != plan_digest:
            raise ApprovalError(f"{who}: given for another version of plan {plan.plan_id}")
        if record.get("config_digest") != bound_config:
            raise ApprovalError(
                f"{who}: given for another configuration of run {run_id} (op config, resources, tags) than the one "
                "dw-dagster bound"
            )
        if record.get("expires_at") != _expiry(plan):
            raise ApprovalError(f"{who}: given with another expiry than plan {plan.plan_id}'s")
        if event.event_key != f"approval|{plan.plan_id}|{run_id}|{approval.team}":
            raise ApprovalError(f"{who}: recorded under another team's key ({event.event_key})")
        if approval.team not in self.context.teams_of(person) or approval.team not in plan.required_teams:
            raise ApprovalError(f"{who}: not a member of that team (any more)")
        if approval.at >= plan.expires_at:
            raise ApprovalError(f"approval by {approval.approver} came after the plan expired")
        return approval

    def verified_approvals(
        self, plan: RemediationPlan, run_id: str, plan_digest: str, binding: Binding
    ) -> list[Approval]:
        """The run's approvals, each proven by its approver for exactly this plan, run and configuration; any
        record that is not fails the whole check (a forged or copied row is reported, never skipped quietly)."""
        return [
            self._verified(e, plan, run_id, plan_digest, binding.config_digest)
            for e in self._approval_events(plan, run_id)
        ]

    def release_check(self, plan: RemediationPlan, run: dg.DagsterRun, binding: Binding) -> ReleaseCheck:
        """What the gate will find when ``run`` starts, checked here as far as this process can (a person's
        shell holds neither the code location's key nor Slack's signing secret): so that ``approve`` never
        calls a run released that the gate will refuse."""
        from dw_dagster.internals import PARENT_RUN_ID_TAG

        out = ReleaseCheck()
        decision = self.decision(plan)
        parent = run.parent_run_id or run.tags.get(PARENT_RUN_ID_TAG)
        incident = self.store.get(plan.incident_id)
        if decision is not None:
            out.blocked = f"plan {plan.plan_id} was {decision.kind} by {decision.by}"
        elif parent:
            out.blocked = f"run {run.run_id} re-executes run {parent}"
        elif incident is None or incident.status != "open":
            out.blocked = (
                f"incident {plan.incident_id} is {incident.status if incident else 'missing'}, not open"
            )
        if self.seal is None:
            out.unchecked.append("the plan's and the run's seals (DW_SIGNING_KEY)")
            plan_digest = self.plan_digest(plan.plan_id)
        else:
            try:
                _, plan_digest = self.verified_plan(plan.plan_id)
            except ApprovalError as e:
                out.blocked = out.blocked or str(e)
                return out
            if not binding.config_digest or config_digest(run, binding, self.seal) != binding.config_digest:
                out.blocked = out.blocked or (
                    f"run {run.run_id}: its configuration is not the one bound for plan {plan.plan_id}"
                )
        approvals, refused, unchecked = self._checked_approvals(plan, binding, plan_digest)
        out.approvals, out.refused, out.unchecked = (
            approvals,
            list(refused.values()),
            out.unchecked + unchecked,
        )
        return out

    def _checked_approvals(
        self, plan: RemediationPlan, binding: Binding, plan_digest: str
    ) -> tuple[list[Approval], dict[str, str], list[str]]:
        """The bound run's approvals checked as far as this process can: those that verify (or that only the
        code location can verify, Slack's), why each other team's record does not, and what was left unchecked."""
        approvals: list[Approval] = []
        refused: dict[str, str] = {}
        unchecked: list[str] = []
        for event in self._approval_events(plan, binding.run_id):
            try:
                approvals.append(
                    self._verified(event, plan, binding.run_id, plan_digest, binding.config_digest)
                )
            except ApprovalError as e:
                refused[event.event_key.rsplit("|", 1)[-1]] = str(e)
            except DwConfigError:  # Slack's signing secret is the code location's, not a person's
                if not isinstance(_PROOF.validate_python(event.detail.get("proof")), SlackProof):
                    raise
                approvals.append(Approval.model_validate(event.detail))
                unchecked.append(f"the Slack approval by {event.detail.get('approver')}")
        return approvals, refused, unchecked

    def decision(self, plan: RemediationPlan) -> Decision | None:
        # Any decision row stops the plan, proven or not: a forged rejection can delay a fix, never run one.
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

    def _teams(self, plan: RemediationPlan, person: Person) -> list[str]:
        if person.name.strip().lower() in (SYSTEM_ACTOR, plan.proposed_by.lower()):
            raise ApprovalError(f"{person.name}: proposed this plan and cannot approve or reject it")
        teams = [t for t in self.context.teams_of(person) if t in plan.required_teams]
        if not teams:
            raise ApprovalError(
                f"{person.name} is not an owner of plan {plan.plan_id}; it needs one member of each of "
                + "; ".join(f"{t} ({', '.join(names)})" for t, names in self.approvers(plan).items())
            )
        return teams

    def approve(
        self,
        plan: RemediationPlan,
        binding: Binding,
        person: Person,
        prove: Prove,
        via: str,
        values: Mapping[str, str] | None = None,
        at: datetime | None = None,
    ) -> list[Approval]:
        """Records ``person``'s approval of the bound run for each owning team of theirs that has not approved
        it yet, each with the proof ``prove`` makes of exactly what it approves (:func:`approval_record`)."""
        run_id = binding.run_id
        values = dict(values or {})
        teams = self._teams(plan, person)
        decision = self.decision(plan)
        if decision is not None:
            raise ApprovalError(
                f"plan {plan.plan_id} was {decision.kind} by {decision.by}: {decision.reason}"
            )
        now = at or datetime.now(UTC).replace(microsecond=0)
        if now >= plan.expires_at:
            raise ApprovalError(
                f"plan {plan.plan_id} expired at {plan.expires_at:%Y-%m-%d %H:%M} UTC; it is never granted late"
            )
        plan_digest = self.plan_digest(plan.plan_id)
        approvals, refused, _ = self._checked_approvals(plan, binding, plan_digest)
        spoiled = [t for t in teams if t in refused]
        if spoiled:
            # Its key is taken by a record that does not verify: the gate will refuse this run whatever is added.
            raise ApprovalError(
                f"run {run_id}: the approval recorded for {spoiled[0]} does not verify ({refused[spoiled[0]]}); the "
                "gate will refuse this run: cancel it (dw-dagster submits the plan again) and approve the new run"
            )
        done = {a.team for a in approvals}
        new = [t for t in teams if t not in done]
        if not new:
            missing = [t for t in plan.required_teams if t not in done]
            raise ApprovalError(
                f"plan {plan.plan_id}: {', '.join(teams)} already approved run {run_id}"
                + (f"; it still needs {', '.join(missing)}" if missing else "")
            )
        self._check_values(plan, new, values)
        for proposal in plan.of_kind(ProposalKind.SCOPED_RERUN):
            if set(proposal.owners) & set(new) and person.run_as is None:
                raise ApprovalError(
                    f"{person.name} has no run_as in the context file: an approved rerun runs under the "
                    "approver's own Coalesce credentials, so another owner must approve it"
                )
        out = []
        for team in new:
            approval = Approval(
                plan_id=plan.plan_id,
                team=team,
                approver=person.name,
                email=person.email,
                at=now,
                run_id=run_id,
                values=values if any(self._owns_row(plan, team)) else {},
                via=via,
            )
            record = approval_record(approval, plan, plan_digest, binding)
            proof = prove(record)
            if getattr(proof, "kind", None) == "local":
                approval = approval.model_copy(update={"os_user": proof.os_user})
                record = approval_record(approval, plan, plan_digest, binding)
            key = f"approval|{plan.plan_id}|{run_id}|{team}"
            self.store.append_event(
                plan.incident_id, "approval", key, {**record, "proof": proof.model_dump()}
            )
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
        self,
        plan: RemediationPlan,
        kind: str,
        by: Person | str,
        reason: str,
        run_id: str | None = None,
        prove: Prove | None = None,
    ) -> Decision:
        """Records that the plan will not run: a person's rejection (with its proof), or the system's expiry
        or supersession."""
        if kind == "rejected":
            if not isinstance(by, Person) or prove is None:
                raise ApprovalError("a rejection is a person's, with proof of who they are")
            self._teams(plan, by)
            if not reason.strip():
                raise ApprovalError("a rejection needs a reason (--reason)")
        who = by.name if isinstance(by, Person) else by
        decision = Decision(
            plan_id=plan.plan_id,
            kind=kind,
            by=who,
            at=datetime.now(UTC).replace(microsecond=0),
            reason=reason,
            run_id=run_id,
        )  # type: ignore[arg-type]
        detail: dict[str, Any] = decision.model_dump(mode="json")
        if isinstance(by, Person) and prove is not None:
            detail = {**detail, "email": by.email, "plan_id": plan.plan_id, "run_id": run_id}
            detail["proof"] = prove(detail).model_dump()
        # Event keys are unique per incident across kinds: the plan's own key is its proposal's.
        if not self.store.append_event(plan.incident_id, "decision", f"decision|{plan.plan_id}", detail):
            existing = self.decision(plan)
            raise ApprovalError(f"plan {plan.plan_id} was already {existing.kind if existing else 'decided'}")
        return decision

    def refuse(self, incident_id: str, what: str, reason: str, **detail: Any) -> None:
        """Records a refused attempt (who tried what, how, and why it was refused): refusals are reported."""
        self.store.append_event(
            incident_id,
            "refused",
            f"refused|{what}|{uuid4().hex}",
            {"what": what, "reason": reason, "at": datetime.now(UTC).isoformat(), **detail},
        )

    # -- what every changing step asks ------------------------------------------------------------

    def validate(
        self, run: dg.DagsterRun, resources: Mapping[str, Any]
    ) -> tuple[RemediationPlan, list[Approval], Binding]:
        """The plan, its approvals and the run binding if this very run may change anything now; else
        :class:`ApprovalError`."""
        from dw_dagster.internals import PARENT_RUN_ID_TAG

        tags = run.tags
        plan_id = tags.get(PLAN_ID)
        if not plan_id:
            raise ApprovalError(
                f"run tag {PLAN_ID}: missing; a remediation run carries the plan it carries out"
            )
        if tags.get(INCIDENT_ID) != incident_of(plan_id):
            raise ApprovalError(f"plan {plan_id}: not a plan of incident {tags.get(INCIDENT_ID)}")
        plan, plan_digest = self.verified_plan(plan_id)
        decision = self.decision(plan)
        if decision is not None:
            raise ApprovalError(f"plan {plan_id} was {decision.kind} by {decision.by}: {decision.reason}")
        parent = run.parent_run_id or tags.get(PARENT_RUN_ID_TAG)
        if parent:
            raise ApprovalError(
                f"run {run.run_id} re-executes run {parent}; a re-execution is not an approval"
            )
        binding = self.binding(plan)
        if binding is None:
            raise ApprovalError(f"plan {plan_id}: no run of it was submitted and bound by dw-dagster")
        try:
            check_run(binding, run, resources, self._required_seal())
        except RunRecordError as e:
            raise ApprovalError(str(e)) from None
        incident = self.store.get(plan.incident_id)
        if incident is None or incident.status != "open":
            raise ApprovalError(
                f"incident {plan.incident_id} is {incident.status if incident else 'missing'}, not open"
            )
        approvals = self.verified_approvals(plan, run.run_id, plan_digest, binding)
        missing = self.missing(plan, approvals)
        if missing:
            raise ApprovalError(
                f"run {run.run_id}: no recorded approval for this run from {', '.join(missing)}; a tag is not an "
                "approval (approvals are given in Slack or with `dw-dagster approve`, for the run dw-dagster submitted)"
            )
        return plan, approvals, binding


def _expiry(plan: RemediationPlan) -> str:
    return str(_TIME.dump_python(plan.expires_at, mode="json"))


def approval_record(
    approval: Approval, plan: RemediationPlan, plan_digest: str, binding: Binding
) -> dict[str, Any]:
    """What an approver's proof covers: the approval (team, person, time, run, values) with the plan's digest,
    the digest of the run's whole configuration as bound, and the plan's expiry."""
    return {
        **approval.model_dump(mode="json"),
        "plan_digest": plan_digest,
        "config_digest": binding.config_digest,
        "expires_at": _expiry(plan),
    }


def cancel_run(instance: dg.DagsterInstance, run: dg.DagsterRun, decision: Decision) -> None:
    from dw_dagster.internals import EngineEventData

    instance.report_engine_event(
        f"{decision.kind.capitalize()} by {decision.by}: {decision.reason}",
        run,
        EngineEventData(metadata={"decision": decision.kind, "by": decision.by, "plan_id": decision.plan_id}),
    )
    instance.run_coordinator.cancel_run(run.run_id)


def supersede_older(instance: dg.DagsterInstance, book: ApprovalBook, plan: RemediationPlan) -> list[str]:
    """A newer plan for the incident replaces the older ones: they are decided "superseded" and their
    queued runs canceled, so an approval can only ever release the latest plan. Returns the canceled runs."""
    import dagster as dg

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
