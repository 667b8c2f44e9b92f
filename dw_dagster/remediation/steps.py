"""The remediation job's steps (``remediate_incident``, wired in ``app/remediation.py``).

Check the approval record (first step), apply the reference rows (with their undo), wait for the node change
to be deployed in Coalesce, start the scoped rerun under the approving owner's credentials, verify, and
write the receipt. Every step that changes something asks the record again (:meth:`ApprovalBook.validate`):
this very run, as the system submitted it, approved by a verified member of each owning team. The receipt is
:mod:`~dw_dagster.remediation.job_receipt`'s.
"""

import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import dagster as dg

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.events import findings_of
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.receipt_text import receipt_markdown
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.text import counted
from dw_dagster.records.remediation import Change, ProposalKind, VerificationResult
from dw_dagster.remediation.approvals import REMEDIATION_JOB, ApprovalBook, ApprovalError
from dw_dagster.remediation.audit import audited
from dw_dagster.remediation.change_log import intent_recorder, record_change
from dw_dagster.remediation.changes import ChangeConflict, apply_row
from dw_dagster.remediation.control import OrgControl, gated_notifier
from dw_dagster.remediation.job_models import Approved, RemediationConfig, Rerun
from dw_dagster.remediation.job_receipt import JobReceipts, run_receipt
from dw_dagster.remediation.node_change import definition, is_deployed
from dw_dagster.remediation.run_credentials import run_credentials
from dw_dagster.remediation.signing import SealError
from dw_dagster.remediation.source_steps import SourceStepFailed, apply_source_changes, await_sources
from dw_dagster.remediation.submission import RunRecordError, check_credential_host
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


class RemediationSteps:
    """The remediation job's steps over one code location's metrics and context files; each step asks the
    approval record again before it changes anything (see the module's docstring)."""

    def __init__(
        self,
        metrics: MetricsFile,
        resolve_table: Callable[[str, str], str],
        ops: OpsSchema,
        context_file: ContextFile,
    ):
        self.metrics = metrics
        self.resolve_table = resolve_table
        self.ops = ops
        self.context_file = context_file
        self.receipts = JobReceipts(metrics, context_file)

    def store(self, snowflake: WarehouseResource, context: dg.OpExecutionContext) -> IncidentStore:
        # What the run records (its intents, changes, refusals, receipt) goes on the audit trail too.
        return audited(IncidentStore(snowflake, self.ops, run_id=context.run_id))

    def refuse(
        self, context: dg.OpExecutionContext, store: IncidentStore, slack: SlackNotifier, reason: str
    ) -> NoReturn:
        """Records the refusal, tells the owners (a refused run is someone trying something) and fails."""
        incident = store.get(context.run.tags.get(INCIDENT_ID, ""))
        if incident is not None:
            store.append_event(
                incident.incident_id,
                "refused",
                f"refused|{context.run_id}|{context.op.name}",
                {"what": "run", "run_id": context.run_id, "step": context.op.name, "reason": reason},
            )
            gated_notifier(slack, store, self.context_file).post_update(
                incident,
                f":no_entry: Refused run {context.run_id} at {context.op.name}: {reason}",
                kind="refused",
                version=f"{context.run_id}|{context.op.name}",
            )
        raise dg.Failure(f"Not approved: {reason}", allow_retries=False)

    def require_approval(
        self,
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        store: IncidentStore,
        resources: Mapping[str, Any],
    ) -> Approved:
        """Every step that changes something checks the record itself: a re-execution from failure, or of a
        single step, skips the first op but not this. While the org-wide stop is in force it waits."""
        book = ApprovalBook(store, self.context_file)
        tags = context.run.tags
        try:
            if tags.get(APPROVAL) != APPROVAL_APPROVED:
                raise ApprovalError(f"run tag {APPROVAL} is {tags.get(APPROVAL)!r}; approvals release runs")
            plan, approvals, binding = book.validate(context.run, resources)
        except (ApprovalError, SealError) as e:
            self.refuse(context, store, resources["slack"], str(e))
        control = OrgControl(store.warehouse, self.ops, self.context_file)
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
            raise dg.Failure(f"incident {plan.incident_id}: not found in {self.ops.table('INCIDENTS')}")
        return Approved(plan=plan, approvals=approvals, incident=incident, binding=binding)

    def check_approval(
        self,
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        snowflake: WarehouseResource,
        coalesce: CoalesceWorkspace,
        slack: SlackNotifier,
    ) -> Approved:
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = self.require_approval(context, config, self.store(snowflake, context), resources)
        for a in approved.approvals:
            context.log.info(f"approved by {a.approver} for {a.team} at {a.at.isoformat()}")
        return approved

    def apply_reference_rows(
        self,
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
        coalesce: CoalesceWorkspace,
        approved: Approved,
    ) -> list[Change]:
        store = self.store(snowflake, context)
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = self.require_approval(context, config, store, resources)
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
                self.receipts.fail(context, store, slack, approved, changes, str(e))
            record_change(store, approved.plan, change, context.run_id)
            context.log.info(change.what)
            changes.append(change)
        try:
            changes += apply_source_changes(snowflake, store, approved, context.run_id, REMEDIATION_JOB)
        except SourceStepFailed as e:
            self.receipts.fail(context, store, slack, approved, changes, str(e))
        return changes

    def await_node_deploy(
        self,
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        approved: Approved,
        changes: list[Change],
        coalesce: CoalesceWorkspace,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
    ) -> list[str]:
        store = self.store(snowflake, context)
        # It sends the Coalesce token and posts to Slack: the same check as the steps that change something.
        approved = self.require_approval(
            context, config, store, {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        )
        client = coalesce.get_client()
        # From the last approval, not from this step's start: a restarted run does not get a new allowance.
        deadline = max(a.at for a in approved.approvals).timestamp() + config.deploy_timeout_seconds
        try:  # a stopped source is waited for as long as a deploy
            for line in await_sources(
                snowflake,
                approved,
                context.run_id,
                REMEDIATION_JOB,
                time.monotonic() + deadline - time.time(),
                config.poll_seconds,
                lambda text: gated_notifier(slack, store, self.context_file).post_update(
                    approved.incident,
                    text,
                    kind="awaiting_source",
                    version=f"{approved.plan.plan_id}|{context.run_id}",
                ),
            ):
                context.log.info(line)
        except SourceStepFailed as e:
            self.receipts.fail(context, store, slack, approved, changes, str(e))
        deployed = []
        for p in approved.plan.of_kind(ProposalKind.NODE_CHANGE):
            nc = p.node_change
            if nc is None:
                continue
            told = False
            while not is_deployed(definition(client.get_node(nc.environment_id, nc.node_id)), nc):
                if time.time() > deadline:
                    self.receipts.fail(
                        context,
                        store,
                        slack,
                        approved,
                        changes,
                        f"the change to {nc.node_name} was not deployed within {config.deploy_timeout_seconds / 3600:.1f} h "
                        "of the approvals; the rerun did not start",
                    )
                if not told:
                    approval = approved.approver_for(p.owners)
                    gated_notifier(slack, store, self.context_file).post_update(
                        approved.incident,
                        f"Approved. {counted(sum(c.added for c in changes), 'reference row')} added. Waiting for {approval.approver} to "
                        f"apply the {nc.node_name} change in Coalesce and deploy it; the rerun starts once it is deployed.",
                        kind="awaiting_deploy",
                        version=f"{approved.plan.plan_id}|{context.run_id}",
                        run_id=context.run_id,
                    )
                    store.append_event(
                        approved.plan.incident_id,
                        "awaiting_deploy",
                        f"awaiting_deploy|{approved.plan.plan_id}|{context.run_id}",
                        {"node": nc.node_name},
                    )
                    told = True
                time.sleep(config.poll_seconds)
            context.log.info(f"{nc.node_name}: the proposed change is deployed in {nc.environment}")
            deployed.append(nc.node_name)
        return deployed

    def scoped_rerun(
        self,
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        approved: Approved,
        changes: list[Change],
        deployed: list[str],
        coalesce: CoalesceWorkspace,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
    ) -> Rerun:
        store = self.store(snowflake, context)
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = self.require_approval(context, config, store, resources)
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
            self.refuse(context, store, slack, str(e))
        credentials = run_credentials(coalesce, self.context_file, approval)
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
                },
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
            self.receipts.fail(
                context,
                store,
                slack,
                approved,
                changes,
                f"the scoped rerun (Coalesce run {run_id}) ended {run.run_status.value}: {run.run_failure_reason or ''}",
                result,
            )
        return result

    def verify_fix(
        self,
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        approved: Approved,
        rerun: Rerun,
        coalesce: CoalesceWorkspace,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
    ) -> list[VerificationResult]:
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        store = self.store(snowflake, context)
        approved = self.require_approval(context, config, store, resources)
        # The reconciliations that raised the incident are checked again, whatever the plan lists.
        findings = findings_of(store, approved.incident.incident_id)
        results = coalesce.get_client().get_run_results(rerun.coalesce_run_id)
        day = approved.incident.business_date
        if day is None:
            raise dg.Failure(f"incident {approved.incident.incident_id} has no business date to verify")
        with self.ops.connect(
            snowflake, "job.verify", job=REMEDIATION_JOB, dagster_run_id=context.run_id
        ) as conn:
            out = verify(
                approved.plan.expectations,
                day=day,
                metrics=self.metrics,
                resolve_table=self.resolve_table,
                cursor=conn.cursor(),
                history=HistorySession(conn, self.ops),
                run_results=results,
                findings=findings,
            )
        for v in out:
            context.log.info(
                f"{'passed' if v.passed else 'FAILED' if v.passed is False else 'ERRORED'}: {v.detail}"
            )
        return out

    def write_receipt(
        self,
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        approved: Approved,
        changes: list[Change],
        rerun: Rerun,
        verification: list[VerificationResult],
        snowflake: WarehouseResource,
        slack: SlackNotifier,
        coalesce: CoalesceWorkspace,
    ) -> None:
        store = self.store(snowflake, context)
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        approved = self.require_approval(context, config, store, resources)
        receipt = run_receipt(context, store, approved, changes, rerun, verification)
        problem = "the fix did not verify: " + (
            "; ".join(v.detail for v in verification if not v.passed) or "nothing was verified"
        )
        self.receipts.publish(context, store, slack, approved, receipt, problem)
        if not receipt.verified:
            raise dg.Failure(problem, metadata={"receipt": dg.MetadataValue.md(receipt_markdown(receipt))})
