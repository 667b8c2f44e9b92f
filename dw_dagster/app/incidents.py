"""The diagnosis job, launched by the incident sensor once per new incident (and again when findings join
one), the sensor itself, and the lifecycle job it launches when an incident is over or stale.

The diagnosis settles a provisional incident once (``lifecycle.settle``): a night that continues an older
open incident is merged into it and told as a reply in its thread; an incident that stands gets its own
alert, linked to the related open ones.
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from dw_dagster.app.checks_not_run import build_checks_not_run_definitions
from dw_dagster.app.idle_gate import open_gate, utc_now
from dw_dagster.app.lifecycle import LIFECYCLE_JOB, build_lifecycle_job, open_incident
from dw_dagster.app.outbox_sensor import build_slack_outbox_sensor
from dw_dagster.app.remediation import build_remediation_definitions
from dw_dagster.app.skipped_run import build_skipped_run_job, skipped_run_requests
from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.diagnosis import DiagnosisContext, by_priority
from dw_dagster.incidents.events import findings_of
from dw_dagster.incidents.lifecycle import continuation_text, related_text
from dw_dagster.incidents.nights import lifecycle_due
from dw_dagster.incidents.skipped_run import job_tables
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.incidents.triage import triage
from dw_dagster.notifications.incident_asset import view_materialization
from dw_dagster.notifications.incident_view import view_of
from dw_dagster.notifications.receipt_text import approve_hint, plan_markdown
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.routing import alerts_allowed, route_incident
from dw_dagster.notifications.wording import wording_for
from dw_dagster.records.incidents import Finding
from dw_dagster.remediation.approvals import ApprovalBook, supersede_older
from dw_dagster.remediation.control import OrgControl, gated_notifier
from dw_dagster.remediation.proposals import NoPlan, PlanContext, plan_remediation
from dw_dagster.tags import INCIDENT_ID, LIFECYCLE_ACTION
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

DIAGNOSE_JOB = "diagnose_incident"


def build_incident_definitions(
    specs: Sequence[dg.AssetSpec],
    metrics: MetricsFile,
    resolve_table: Callable[[str, str], str],
    ops: OpsSchema,
    context_file: ContextFile | None = None,
    resources: Mapping[str, Any] | None = None,
) -> dg.Definitions:
    """The diagnosis, lifecycle, skipped-run and checks-not-run jobs and the sensors that start them, and the
    remediation's with a context file. ``resources`` are bound to every job where it is defined: a sensor's
    job left for ``Definitions`` to bind is copied with the sensor, and Dagster 1.13's copy of a sensor passes
    its (empty) owners on and warns that they are beta."""
    # Built on first use in a run worker, not while the code location loads (seconds at 10,000 nodes).
    lineage = functools.cache(lambda: LineageGraph(specs))
    specs_by_key = functools.cache(lambda: {s.key.to_user_string(): s for s in specs})
    policy = metrics.incidents

    @dg.op(
        name="diagnose",
        description="Walk the lineage from the failing number to its cause and its readers; settle whether "
        "the night continues an open incident or stands as its own; propose the fix.",
    )
    def diagnose_op(
        context: dg.OpExecutionContext,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
        coalesce: CoalesceWorkspace,
    ) -> None:
        incident_id = context.run.tags.get(INCIDENT_ID)
        if not incident_id:
            raise dg.Failure(f"run tag {INCIDENT_ID}: missing; this job diagnoses one incident")
        store = IncidentStore(snowflake, ops, run_id=context.run_id, policy=policy)
        incident = open_incident(context, store, ops, incident_id, "nothing to diagnose")
        if incident is None:
            return
        findings = findings_of(store, incident_id)
        start = by_priority(findings)[0].asset_key
        plan = None
        with snowflake.tagged_connection(
            "job.diagnose", schema=ops.schema, job=DIAGNOSE_JOB, asset=start, dagster_run_id=context.run_id
        ) as conn:
            ctx = DiagnosisContext(
                lineage(), metrics, resolve_table, HistorySession(conn, ops), conn.cursor()
            )
            found = triage(store, incident, findings, start, ctx, policy)
            diagnosis, radius, settlement = found.diagnosis, found.radius, found.settlement
            context.log.info(f"{incident_id}: {diagnosis.classification.words}: {diagnosis.cause}")
            if settlement is not None and found.continues is not None:
                target = found.continues
                context.log_event(view_materialization(view_of(store, target)))
                context.log.info(
                    f"{incident_id}: {settlement.kind} {target.incident_id} ({settlement.dedup.describe()})"
                )
                if context_file is not None:
                    gated_notifier(slack, store, context_file).post_update(
                        target,
                        continuation_text(settlement, incident, findings),
                        kind="continued",
                        version=incident_id,
                    )
                return
            if context_file is not None:
                plan_ctx = PlanContext(ctx, context_file, specs_by_key(), coalesce.get_client())
                try:
                    plan = plan_remediation(incident, diagnosis, radius, plan_ctx)
                except NoPlan as e:
                    context.log.info(f"{incident_id}: no remediation plan: {e}")
                except Exception as e:  # noqa: BLE001 - a plan that cannot be made must not cost the alert
                    context.log.warning(f"{incident_id}: no remediation plan: {type(e).__name__}: {e}")
        incident = store.get(incident_id) or incident
        book = ApprovalBook(store, context_file) if context_file is not None else None
        plan_md = (
            plan_markdown(plan, book.approvers(plan)) + approve_hint(plan, book.approvers(plan))
            if plan and book
            else None
        )
        context.log_event(view_materialization(view_of(store, incident), proposed_fix=plan_md))
        if context_file is None:
            context.log.warning("no context file (DW_CONTEXT_FILE): nobody to alert")
            return
        if not alerts_allowed(context_file, diagnosis, radius):
            context.log.info(f"{incident_id}: its domain is at L0 (manual): recorded, nobody is alerted")
            return
        # The org-wide stop is asked when routing (the hold notice is proposed, not sent) and again as each
        # autonomous message is posted (a stop given in between holds it in the outbox).
        control = OrgControl(snowflake, ops, context_file)
        # Through the outbox: a Slack outage delays the alert (the outbox sensor retries), never loses it.
        notifier = gated_notifier(slack, store, context_file)
        recipients = route_incident(context_file, diagnosis, radius, stopped=control.state().stopped)
        wording = wording_for(context_file, metrics, diagnosis, radius)
        notifier.notify(incident, diagnosis, radius, recipients, run_id=context.run_id, wording=wording)
        if settlement is not None and settlement.related:
            notifier.post_update(incident, related_text(settlement), kind="related", version=incident_id)
        if plan is not None and book is not None and plan_md is not None:
            if book.record_plan(plan):
                for run_id in supersede_older(context.instance, book, plan):
                    context.log.info(f"{incident_id}: canceled {run_id}, which waited for an older plan")
                # Posted to Slack, with its Approve / Reject buttons, once its run is held for approval.
                context.log.info(f"{incident_id}: proposed {plan.plan_id} ({len(plan.proposals)} proposals)")

    @dg.job(
        name=DIAGNOSE_JOB,
        description="Diagnose one incident: cause, evidence, blast radius.",
        resource_defs=dict(resources or {}),
    )
    def diagnose_incident():
        diagnose_op()

    lifecycle_job = build_lifecycle_job(ops, policy, context_file, resources)
    scheduled = job_tables(specs, metrics.freshness.schedules)
    skipped_run_job = build_skipped_run_job(metrics, scheduled, ops, resources)

    @dg.sensor(
        name="incident_sensor",
        jobs=[diagnose_incident, lifecycle_job, skipped_run_job],
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Launches a diagnosis for each new incident (and again when findings join one), and the "
        "lifecycle step for an open incident whose checks all passed again (resolve) or that went stale, and "
        "records a scheduled Coalesce run that never started (read from Dagster's freshness states).",
    )
    def incident_sensor(context: dg.SensorEvaluationContext, snowflake: WarehouseResource):
        skipped = list(skipped_run_requests(context, metrics, scheduled))
        yield from skipped
        # A new incident, a finding joining one, a diagnosis or a new night judged: each is a run (or an
        # incident command) that Dagster's storage records; with none since the last look, nothing is due.
        gate = open_gate(context, utc_now())
        if gate.work is None:
            if not skipped:  # a SkipReason may not follow a run request
                yield gate.skip("incidents")
            return
        store = IncidentStore(snowflake, ops, policy=policy)
        requested = bool(skipped)
        for incident in store.list(status="open"):
            if gate.out_of_time(incident.incident_id):
                continue
            events = store.events(incident.incident_id)
            findings = [Finding.model_validate(e.detail) for e in events if e.kind == "finding"]
            done = {e.event_key for e in events if e.kind == "diagnosis"}
            # The run keys make a re-tick or a restart of the daemon launch nothing twice.
            if f"diagnosis|{len(findings)}" not in done:
                requested = True
                yield dg.RunRequest(
                    run_key=f"{incident.incident_id}:{len(findings)}",
                    job_name=DIAGNOSE_JOB,
                    tags={INCIDENT_ID: incident.incident_id},
                )
                continue
            due = lifecycle_due(context.instance, store, incident, findings, policy)
            if due is not None:
                requested = True
                yield dg.RunRequest(
                    run_key=f"{due.action}:{incident.incident_id}:{due.night}",
                    job_name=LIFECYCLE_JOB,
                    tags={INCIDENT_ID: incident.incident_id, LIFECYCLE_ACTION: due.action},
                )
        gate.done(context)
        if gate.left and not requested:
            yield dg.SkipReason(f"incidents ({gate.work}): nothing due{gate.leftover()}")

    outbox = build_slack_outbox_sensor(
        ops, dispatch_gate=lambda warehouse: OrgControl(warehouse, ops, context_file).dispatch_allowed
    )
    defs = dg.Definitions.merge(
        dg.Definitions(
            jobs=[diagnose_incident, lifecycle_job, skipped_run_job], sensors=[incident_sensor, outbox]
        ),
        build_checks_not_run_definitions(metrics, job_tables(specs), ops, resources),
    )
    if context_file is None:
        return defs
    return dg.Definitions.merge(
        defs, build_remediation_definitions(metrics, resolve_table, ops, context_file, resources)
    )
