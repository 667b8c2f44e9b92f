"""The remediation job: ``remediate_incident``.

Check the approval record (first op), apply the reference rows (with their undo), wait for the node change
to be deployed in Coalesce, start the scoped rerun under the approving owner's credentials, verify, and
write the receipt. Every step that changes something asks the record again (:meth:`ApprovalBook.validate`):
this very run, as the system submitted it, approved by a verified member of each owning team. The sensors
that submit and expire these runs are in :mod:`~dw_dagster.remediation.sensors`.
"""

import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

import dagster as dg
from pydantic import BaseModel

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.models import CoalesceUserCredentials
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.models import Incident
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.wording import wording_for
from dw_dagster.remediation.approvals import REMEDIATION_JOB, ApprovalBook, ApprovalError
from dw_dagster.remediation.change_log import intent_recorder, record_change
from dw_dagster.remediation.changes import ChangeConflict, apply_row, undo_steps
from dw_dagster.remediation.control import OrgControl, escalate, gated_notifier
from dw_dagster.remediation.models import (
    Approval,
    Change,
    ProposalKind,
    Receipt,
    RemediationPlan,
    VerificationResult,
)
from dw_dagster.remediation.node_change import definition, is_deployed
from dw_dagster.remediation.receipt import receipt_markdown, receipt_materialization
from dw_dagster.remediation.sensors import build_remediation_sensors
from dw_dagster.remediation.signing import SealError
from dw_dagster.remediation.source_steps import SourceStepFailed, apply_source_changes, await_sources
from dw_dagster.remediation.submission import Binding, RunRecordError, check_credential_host
from dw_dagster.remediation.verification import verify
from dw_dagster.tags import (
    APPROVAL,
    APPROVAL_APPROVED,
    COALESCE_PARAM_BUSINESS_DATE,
    COALESCE_PARAM_INCIDENT_ID,
    INCIDENT_ID,
)
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


class Approved(BaseModel):
    plan: RemediationPlan
    approvals: list[Approval]
    incident: Incident
    binding: Binding

    def approver_for(self, owners: Sequence[str]) -> Approval:
        found = next((a for a in self.approvals if a.team in owners), None)
        if found is None:
            raise dg.Failure(f"plan {self.plan.plan_id}: no approval from any of {', '.join(owners)}")
        return found


class Rerun(BaseModel):
    coalesce_run_id: int
    run_as: str


class RemediationConfig(dg.Config):
    deploy_timeout_seconds: float = 6 * 3600.0
    """How long after the last approval to wait for the node owner's deploy before escalating."""
    poll_seconds: float = 15.0
    rerun_timeout_seconds: float = 4 * 3600.0
    stop_wait_seconds: float = 24 * 3600.0
    """How long a step waits for `dw-dagster resume` while the org-wide stop is in force."""


def _store(snowflake: WarehouseResource, ops: OpsSchema, context: dg.OpExecutionContext) -> IncidentStore:
    return IncidentStore(snowflake, ops, run_id=context.run_id)


def build_remediation_definitions(
    metrics: MetricsFile,
    resolve_table: Callable[[str, str], str],
    ops: OpsSchema,
    context_file: ContextFile,
) -> dg.Definitions:
    def refuse(
        context: dg.OpExecutionContext, store: IncidentStore, slack: SlackNotifier, reason: str
    ) -> NoReturn:
        """Records the refusal, tells the owners (a refused run is someone trying something) and fails."""
        incident = store.get(context.run.tags.get(INCIDENT_ID, ""))
        if incident is not None:
            store.append_event(incident.incident_id, "refused", f"refused|{context.run_id}|{context.op.name}",
                               {"what": "run", "run_id": context.run_id, "step": context.op.name, "reason": reason})  # fmt: skip
            gated_notifier(slack, store, context_file).post_update(
                incident, f":no_entry: Refused run {context.run_id} at {context.op.name}: {reason}",
                kind="refused", version=f"{context.run_id}|{context.op.name}",
            )  # fmt: skip
        raise dg.Failure(f"Not approved: {reason}", allow_retries=False)

    def require_approval(
        context: dg.OpExecutionContext, config: RemediationConfig, store: IncidentStore, resources: Mapping[str, Any]
    ) -> Approved:  # fmt: skip
        """Every step that changes something checks the record itself: a re-execution from failure, or of a
        single step, skips the first op but not this. While the org-wide stop is in force it waits."""
        book = ApprovalBook(store, context_file)
        tags = context.run.tags
        try:
            if tags.get(APPROVAL) != APPROVAL_APPROVED:
                raise ApprovalError(f"run tag {APPROVAL} is {tags.get(APPROVAL)!r}; approvals release runs")
            plan, approvals, binding = book.validate(context.run, resources)
        except (ApprovalError, SealError) as e:
            refuse(context, store, resources["slack"], str(e))
        control = OrgControl(store.warehouse, ops)
        deadline = time.monotonic() + config.stop_wait_seconds
        while (state := control.state()).stopped:
            if time.monotonic() > deadline:
                raise dg.Failure(
                    f"{state.describe()}; {context.op.name} gave up waiting for `dw-dagster resume`"
                )
            context.log.warning(f"{state.describe()}; {context.op.name} waits for `dw-dagster resume`")
            time.sleep(config.poll_seconds)
        incident = store.get(plan.incident_id)
        if incident is None:
            raise dg.Failure(f"incident {plan.incident_id}: not found in {ops.table('INCIDENTS')}")
        return Approved(plan=plan, approvals=approvals, incident=incident, binding=binding)

    def publish(context: dg.OpExecutionContext, store: IncidentStore, slack: SlackNotifier, approved: Approved,
                receipt: Receipt, problem: str) -> None:  # fmt: skip
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
        from dw_dagster.incidents.jobs import latest_diagnosis  # imports this module: not at the top

        notifier = gated_notifier(slack, store, context_file)
        # The receipt whole, then (verified) the resolution: each thread reads them in that order.
        approvers = ", ".join(a.approver for a in approved.approvals)
        resolution = f"Fixed and verified on approval of {approvers}." if receipt.verified else None
        found = latest_diagnosis(store, plan.incident_id)
        wording = wording_for(context_file, metrics, *found) if found else None
        notifier.post_receipt(approved.incident, receipt, resolution=resolution, wording=wording)
        if not receipt.verified:
            escalate(notifier, approved.incident, context_file, plan, problem, run_id=context.run_id)

    def fail(context: dg.OpExecutionContext, store: IncidentStore, slack: SlackNotifier, approved: Approved,
             changes: Sequence[Change], what: str, rerun: Rerun | None = None) -> NoReturn:  # fmt: skip
        """A step failed after changes may have been made: the receipt says what was done and how to undo it."""
        receipt = _receipt(context, store, approved, changes, rerun, [], failure=what)
        publish(context, store, slack, approved, receipt, what)
        raise dg.Failure(what, metadata={"receipt": dg.MetadataValue.md(receipt_markdown(receipt))})

    @dg.op(description="Refuses to go on unless the project's own approval record approves this very run.")
    def check_approval(
        context: dg.OpExecutionContext, config: RemediationConfig, snowflake: WarehouseResource,
        coalesce: CoalesceWorkspace, slack: SlackNotifier,
    ) -> Approved:  # fmt: skip
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = require_approval(context, config, _store(snowflake, ops, context), resources)
        for a in approved.approvals:
            context.log.info(f"approved by {a.approver} for {a.team} at {a.at.isoformat()}")
        return approved

    @dg.op(description="Adds the approved reference-data rows, recording how to undo each.")
    def apply_reference_rows(
        context: dg.OpExecutionContext, config: RemediationConfig, snowflake: WarehouseResource, slack: SlackNotifier,
        coalesce: CoalesceWorkspace, approved: Approved,
    ) -> list[Change]:  # fmt: skip
        store = _store(snowflake, ops, context)
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = require_approval(context, config, store, resources)
        changes: list[Change] = []
        for p in approved.plan.of_kind(ProposalKind.REFERENCE_ROW):
            if p.reference_row is None:
                continue
            approval = approved.approver_for(p.owners)
            intent = intent_recorder(store, approved.plan, p.proposal_id, context.run_id)
            try:
                with snowflake.tagged_connection(
                    "job.remediate", job=REMEDIATION_JOB, dagster_run_id=context.run_id
                ) as conn:
                    change = apply_row(conn.cursor(), p.proposal_id, p.reference_row, approval, intent)
            except ChangeConflict as e:
                fail(context, store, slack, approved, changes, str(e))
            record_change(store, approved.plan, change, context.run_id)
            context.log.info(change.what)
            changes.append(change)
        try:
            changes += apply_source_changes(snowflake, store, approved, context.run_id, REMEDIATION_JOB)
        except SourceStepFailed as e:
            fail(context, store, slack, approved, changes, str(e))
        return changes

    @dg.op(
        description="Waits until the node owner has applied and deployed the proposed node change in Coalesce."
    )
    def await_node_deploy(
        context: dg.OpExecutionContext, config: RemediationConfig, approved: Approved, changes: list[Change],
        coalesce: CoalesceWorkspace, snowflake: WarehouseResource, slack: SlackNotifier,
    ) -> list[str]:  # fmt: skip
        store = _store(snowflake, ops, context)
        # It sends the Coalesce token and posts to Slack: the same check as the steps that change something.
        approved = require_approval(
            context, config, store, {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        )
        client = coalesce.get_client()
        # From the last approval, not from this step's start: a restarted run does not get a new allowance.
        deadline = max(a.at for a in approved.approvals).timestamp() + config.deploy_timeout_seconds
        try:  # a stopped source is waited for as long as a deploy
            for line in await_sources(snowflake, approved, context.run_id, REMEDIATION_JOB,
                                      time.monotonic() + deadline - time.time(), config.poll_seconds,
                                      lambda text: gated_notifier(slack, store, context_file).post_update(
                                          approved.incident, text, kind="awaiting_source",
                                          version=f"{approved.plan.plan_id}|{context.run_id}")):  # fmt: skip
                context.log.info(line)
        except SourceStepFailed as e:
            fail(context, store, slack, approved, changes, str(e))
        deployed = []
        for p in approved.plan.of_kind(ProposalKind.NODE_CHANGE):
            nc = p.node_change
            if nc is None:
                continue
            told = False
            while not is_deployed(definition(client.get_node(nc.environment_id, nc.node_id)), nc):
                if time.time() > deadline:
                    fail(context, store, slack, approved, changes,
                         f"the change to {nc.node_name} was not deployed within {config.deploy_timeout_seconds / 3600:.1f} h "
                         "of the approvals; the rerun did not start")  # fmt: skip
                if not told:
                    approval = approved.approver_for(p.owners)
                    gated_notifier(slack, store, context_file).post_update(
                        approved.incident,
                        f"Approved. {sum(c.added for c in changes)} reference row(s) added. Waiting for {approval.approver} to "
                        f"apply the {nc.node_name} change in Coalesce and deploy it; the rerun starts once it is deployed.",
                        kind="awaiting_deploy", version=f"{approved.plan.plan_id}|{context.run_id}",
                        run_id=context.run_id,
                    )  # fmt: skip
                    store.append_event(
                        approved.plan.incident_id,
                        "awaiting_deploy",
                        f"awaiting_deploy|{approved.plan.plan_id}|{context.run_id}",
                        {"node": nc.node_name},
                    )
                    told = True
                time.sleep(config.poll_seconds)
            context.log.info(
                f"{nc.node_name}: the proposed change is deployed in environment {nc.environment_id}"
            )
            deployed.append(nc.node_name)
        return deployed

    @dg.op(
        description="Starts the scoped Coalesce rerun under the approving owner's own credentials and follows it."
    )
    def scoped_rerun(
        context: dg.OpExecutionContext, config: RemediationConfig, approved: Approved, changes: list[Change],
        deployed: list[str], coalesce: CoalesceWorkspace, snowflake: WarehouseResource, slack: SlackNotifier,
    ) -> Rerun:  # fmt: skip
        store = _store(snowflake, ops, context)
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = require_approval(context, config, store, resources)
        reruns = approved.plan.of_kind(ProposalKind.SCOPED_RERUN)
        if len(reruns) != 1 or reruns[0].rerun is None:
            raise dg.Failure(f"plan {approved.plan.plan_id}: expected one scoped rerun, found {len(reruns)}")
        p, rerun = reruns[0], reruns[0].rerun
        approval = approved.approver_for(p.owners)
        client = coalesce.get_client()
        try:
            # The approver's password goes to the Coalesce the plan's run was submitted against, or nowhere.
            check_credential_host(client.base_url, approved.binding)
        except RunRecordError as e:
            refuse(context, store, slack, str(e))
        credentials = run_credentials(coalesce, context_file, approval)
        key = f"rerun|{approved.plan.plan_id}|{context.run_id}"
        started = [e for e in store.events(approved.plan.incident_id, kind="rerun") if e.event_key == key]
        if started:
            # A retried step follows the rerun it already started instead of starting a second one.
            run_id = int(started[0].detail["coalesce_run_id"])
        else:
            day = approved.incident.business_date
            run_id = client.start_run(
                rerun.environment_id,
                include_selector=rerun.include_selector,
                user_credentials=credentials,
                # Seen by the run sensor: the rerun rebuilds the incident's business date, not this morning's.
                parameters={
                    COALESCE_PARAM_INCIDENT_ID: approved.incident.incident_id,
                    COALESCE_PARAM_BUSINESS_DATE: day.isoformat() if day else "",
                },  # fmt: skip
            )
            store.append_event(
                approved.plan.incident_id,
                "rerun",
                key,
                {"coalesce_run_id": run_id, "run_as": credentials.snowflake_username},
            )
        context.log.info(
            f"Coalesce run {run_id} as {credentials.snowflake_username}: {rerun.include_selector}"
        )
        run = client.wait_for_run(
            run_id, poll_interval=min(config.poll_seconds, 5.0), timeout=config.rerun_timeout_seconds
        )
        result = Rerun(coalesce_run_id=run_id, run_as=credentials.snowflake_username)
        if run.run_status.value != "completed":
            fail(context, store, slack, approved, changes,
                 f"the scoped rerun (Coalesce run {run_id}) ended {run.run_status.value}: {run.run_failure_reason or ''}", result)  # fmt: skip
        return result

    @dg.op(description="Verifies the fix: totals reconcile, the new node test passed, moved totals are back.")
    def verify_fix(
        context: dg.OpExecutionContext, config: RemediationConfig, approved: Approved, rerun: Rerun,
        coalesce: CoalesceWorkspace, snowflake: WarehouseResource, slack: SlackNotifier,
    ) -> list[VerificationResult]:  # fmt: skip
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = require_approval(context, config, _store(snowflake, ops, context), resources)
        results = coalesce.get_client().get_run_results(rerun.coalesce_run_id)
        day = approved.incident.business_date
        if day is None:
            raise dg.Failure(f"incident {approved.incident.incident_id} has no business date to verify")
        with ops.connect(snowflake, "job.verify", job=REMEDIATION_JOB, dagster_run_id=context.run_id) as conn:
            out = verify(
                approved.plan.expectations, day=day, metrics=metrics, resolve_table=resolve_table,
                cursor=conn.cursor(), history=HistorySession(conn, ops), run_results=results,
            )  # fmt: skip
        for v in out:
            context.log.info(
                f"{'passed' if v.passed else 'FAILED' if v.passed is False else 'ERRORED'}: {v.detail}"
            )
        return out

    @dg.op(
        description="Writes the receipt (append-only), shows it in the UI and posts it to the incident's threads."
    )
    def write_receipt(
        context: dg.OpExecutionContext, config: RemediationConfig, approved: Approved, changes: list[Change],
        rerun: Rerun, verification: list[VerificationResult], snowflake: WarehouseResource, slack: SlackNotifier,
        coalesce: CoalesceWorkspace,
    ) -> None:  # fmt: skip
        store = _store(snowflake, ops, context)
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = require_approval(context, config, store, resources)
        receipt = _receipt(context, store, approved, changes, rerun, verification)
        problem = "the fix did not verify: " + (
            "; ".join(v.detail for v in verification if not v.passed) or "nothing was verified"
        )
        publish(context, store, slack, approved, receipt, problem)
        if not receipt.verified:
            raise dg.Failure(problem, metadata={"receipt": dg.MetadataValue.md(receipt_markdown(receipt))})

    @dg.job(
        name=REMEDIATION_JOB,
        description="Carries out an approved remediation plan: reference rows, node deploy, scoped rerun, verification, receipt.",
        tags={"dw/kind": "remediation"},
    )
    def remediate_incident():
        approved = check_approval()
        changes = apply_reference_rows(approved)
        deployed = await_node_deploy(approved, changes)
        rerun = scoped_rerun(approved, changes, deployed)
        write_receipt(approved, changes, rerun, verify_fix(approved, rerun))

    return dg.Definitions(
        jobs=[remediate_incident], sensors=build_remediation_sensors(remediate_incident, ops, context_file)
    )


def _receipt(
    context: dg.OpExecutionContext, store: IncidentStore, approved: Approved, changes: Sequence[Change],
    rerun: Rerun | None, verification: list[VerificationResult], failure: str | None = None,
) -> Receipt:  # fmt: skip
    # incidents.jobs builds these definitions, so it is imported here, not at the top.
    from dw_dagster.incidents.jobs import latest_diagnosis

    plan = approved.plan
    found = latest_diagnosis(store, plan.incident_id)
    return Receipt(
        incident_id=plan.incident_id, plan_id=plan.plan_id,
        cause=found[0].cause if found else approved.incident.title,
        evidence=dict(found[0].evidence) if found else {},
        proposals=plan.proposals, approvals=approved.approvals, changes=list(changes),
        dagster_run_id=context.run_id, coalesce_run_id=rerun.coalesce_run_id if rerun else None,
        coalesce_run_as=rerun.run_as if rerun else None, verification=verification,
        # Nothing verified is not verified.
        verified=failure is None and bool(verification) and all(v.passed for v in verification),
        failure=failure, undo=undo_steps(plan, changes), written_at=datetime.now(UTC),
    )  # fmt: skip


def run_credentials(
    coalesce: CoalesceWorkspace, context_file: ContextFile, approval: Approval
) -> CoalesceUserCredentials:
    """The approver's own credentials: the workspace's ``owner_credentials`` for their email, else their
    ``run_as`` in the context file with the password read now (one approver's missing variable fails only
    the rerun they approved)."""
    try:
        return coalesce.user_credentials_for(approval.email)
    except KeyError:
        pass
    person = context_file.person(approval.email)
    if person is None or person.run_as is None:
        raise dg.Failure(
            f"{approval.approver}: no run_as in the context file and no owner_credentials for {approval.email}"
        )
    password = os.environ.get(person.run_as.password_env)
    if not password:
        raise dg.Failure(
            f"{person.run_as.password_env}: not set; it holds {approval.approver}'s Snowflake password for Coalesce reruns"
        )
    return CoalesceUserCredentials(
        snowflake_username=person.run_as.snowflake_username,
        snowflake_password=password,
        snowflake_warehouse=person.run_as.snowflake_warehouse,
        snowflake_role=person.run_as.snowflake_role,
    )
