"""The diagnosis job, launched once per new incident (and again when new findings join it) by a sensor."""

import functools
from collections.abc import Callable, Sequence

import dagster as dg

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.assets import incident_materialization
from dw_dagster.incidents.blast_radius import blast_radius
from dw_dagster.incidents.diagnosis import DiagnosisContext, by_priority, diagnose
from dw_dagster.incidents.models import BlastRadius, Diagnosis, Finding
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.outbox_sensor import build_slack_outbox_sensor
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.routing import alerts_allowed, route_incident
from dw_dagster.notifications.wording import wording_for
from dw_dagster.remediation.approvals import ApprovalBook, supersede_older
from dw_dagster.remediation.control import OrgControl, gated_notifier
from dw_dagster.remediation.jobs import build_remediation_definitions
from dw_dagster.remediation.proposals import NoPlan, PlanContext, plan_remediation
from dw_dagster.remediation.receipt import approve_hint, plan_markdown
from dw_dagster.tags import INCIDENT_ID
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

DIAGNOSE_JOB = "diagnose_incident"


def findings_of(store: IncidentStore, incident_id: str) -> list[Finding]:
    return [Finding.model_validate(e.detail) for e in store.events(incident_id, kind="finding")]


def build_incident_definitions(
    specs: Sequence[dg.AssetSpec],
    metrics: MetricsFile,
    resolve_table: Callable[[str, str], str],
    ops: OpsSchema,
    context_file: ContextFile | None = None,
) -> dg.Definitions:
    # Built on first use in a run worker, not while the code location loads (seconds at 10,000 nodes).
    lineage = functools.cache(lambda: LineageGraph(specs))
    specs_by_key = functools.cache(lambda: {s.key.to_user_string(): s for s in specs})

    @dg.op(
        name="diagnose",
        description="Walk the lineage from the failing number to its cause and its readers; propose the fix.",
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
        store = IncidentStore(snowflake, ops, run_id=context.run_id)
        incident = store.get(incident_id)
        if incident is None:
            raise dg.Failure(f"incident {incident_id}: not found in {ops.table('INCIDENTS')}")
        findings = findings_of(store, incident_id)
        start = by_priority(findings)[0].asset_key
        with snowflake.tagged_connection(
            "job.diagnose", schema=ops.schema, job=DIAGNOSE_JOB, asset=start, dagster_run_id=context.run_id
        ) as conn:
            ctx = DiagnosisContext(
                lineage(), metrics, resolve_table, HistorySession(conn, ops), conn.cursor()
            )
            diagnosis = diagnose(incident, findings, ctx)
            radius = blast_radius(start, incident.business_date or findings[0].business_date, diagnosis, ctx)
            plan = None
            if context_file is not None:
                plan_ctx = PlanContext(ctx, context_file, specs_by_key(), coalesce.get_client())
                try:
                    plan = plan_remediation(incident, diagnosis, radius, plan_ctx)
                except NoPlan as e:
                    context.log.info(f"{incident_id}: no remediation plan: {e}")
                except Exception as e:  # noqa: BLE001 - a plan that cannot be made must not cost the alert
                    context.log.warning(f"{incident_id}: no remediation plan: {type(e).__name__}: {e}")
        record_diagnosis(store, incident_id, len(findings), diagnosis, radius)
        book = ApprovalBook(store, context_file) if context_file is not None else None
        plan_md = (
            plan_markdown(plan, book.approvers(plan)) + approve_hint(plan, book.approvers(plan))
            if plan and book
            else None
        )
        finding_events = store.events(incident_id, kind="finding")
        context.log_event(
            incident_materialization(incident, finding_events, diagnosis, radius, proposed_fix=plan_md)
        )
        context.log.info(f"{incident_id}: {diagnosis.classification.value}: {diagnosis.cause}")
        if context_file is None:
            context.log.warning("no context file (DW_CONTEXT_FILE): nobody to alert")
            return
        if not alerts_allowed(context_file, diagnosis, radius):
            context.log.info(f"{incident_id}: its domain is at L0 (manual): recorded, nobody is alerted")
            return
        # The org-wide stop is asked when routing (the hold notice is proposed, not sent) and again as each
        # autonomous message is posted (a stop given in between holds it in the outbox).
        control = OrgControl(snowflake, ops)
        # Through the outbox: a Slack outage delays the alert (the outbox sensor retries), never loses it.
        notifier = gated_notifier(slack, store, context_file)
        recipients = route_incident(context_file, diagnosis, radius, stopped=control.state().stopped)
        wording = wording_for(context_file, metrics, diagnosis, radius)
        notifier.notify(incident, diagnosis, radius, recipients, run_id=context.run_id, wording=wording)
        if plan is not None and book is not None and plan_md is not None:
            if book.record_plan(plan):
                for run_id in supersede_older(context.instance, book, plan):
                    context.log.info(f"{incident_id}: canceled {run_id}, which waited for an older plan")
                # Posted to Slack, with its Approve / Reject buttons, once its run is held for approval.
                context.log.info(f"{incident_id}: proposed {plan.plan_id} ({len(plan.proposals)} proposals)")

    @dg.job(name=DIAGNOSE_JOB, description="Diagnose one incident: cause, evidence, blast radius.")
    def diagnose_incident():
        diagnose_op()

    @dg.sensor(
        name="incident_sensor",
        job=diagnose_incident,
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Launches a diagnosis for each new incident, and again when new findings join one.",
    )
    def incident_sensor(context: dg.SensorEvaluationContext, snowflake: WarehouseResource):
        store = IncidentStore(snowflake, ops)
        for incident in store.list(status="open"):
            count = len(store.events(incident.incident_id, kind="finding"))
            done = {e.event_key for e in store.events(incident.incident_id, kind="diagnosis")}
            if f"diagnosis|{count}" in done:
                continue
            # The run key makes a re-tick or a restart of the daemon launch nothing twice.
            yield dg.RunRequest(
                run_key=f"{incident.incident_id}:{count}", tags={INCIDENT_ID: incident.incident_id}
            )

    outbox = build_slack_outbox_sensor(
        ops, dispatch_gate=lambda warehouse: OrgControl(warehouse, ops).dispatch_allowed
    )
    defs = dg.Definitions(jobs=[diagnose_incident], sensors=[incident_sensor, outbox])
    if context_file is None:
        return defs
    return dg.Definitions.merge(
        defs, build_remediation_definitions(metrics, resolve_table, ops, context_file)
    )


def record_diagnosis(
    store: IncidentStore, incident_id: str, findings: int, diagnosis: Diagnosis, radius: BlastRadius
) -> None:
    store.append_event(
        incident_id,
        "diagnosis",
        f"diagnosis|{findings}",
        {"diagnosis": diagnosis.model_dump(mode="json"), "blast_radius": radius.model_dump(mode="json")},
    )


def latest_diagnosis(store: IncidentStore, incident_id: str) -> tuple[Diagnosis, BlastRadius] | None:
    events = store.events(incident_id, kind="diagnosis")
    if not events:
        return None
    detail = events[-1].detail
    return Diagnosis.model_validate(detail["diagnosis"]), BlastRadius.model_validate(detail["blast_radius"])
