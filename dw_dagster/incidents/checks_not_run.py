"""A night whose checks could not run is a finding of its own (``checks_not_run``), never a pass.

A checks run that errors (the warehouse unreachable) or whose worker dies is retried by Dagster's run
retries (``tags.CHECKS_RUN_RETRIES``). When the last retry fails too, or run monitoring cancels a hung one,
that Coalesce run's night was never judged. Two run-status sensors (failure, cancellation) read that from
Dagster's storage, never the warehouse: a failed checks run that Dagster will not retry (its
``dagster/will_retry`` tag, as the retry daemon decides it) or a canceled one requests ``report_checks_not_run``,
which records the finding for the job's owners (the on-call), on the job's incident of the night.
"""

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

import dagster as dg
from dagster._core.execution.retries import auto_reexecution_should_retry_run
from dagster._core.storage.tags import RETRY_NUMBER_TAG, ROOT_RUN_ID_TAG, WILL_RETRY_TAG

from dw_dagster import tags
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.incidents.assets import incident_materialization
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.models import CauseClass, Diagnosis, Finding, Incident
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.runs import failure_reason
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

CHECKS_NOT_RUN = "checks_not_run"
REPORT_JOB = "report_checks_not_run"
FAILED_RUN = "dw/failed_run_id"
"""The checks run (the last of its retries) that could not judge the night, on the report run."""
OUTCOME = "dw/checks_run_outcome"


def is_checks_run(run: dg.DagsterRun) -> bool:
    """A run the Coalesce run sensor requested to judge one Coalesce run (not a diagnosis or remediation)."""
    return tags.COALESCE_RUN_ID in run.tags and tags.INCIDENT_ID not in run.tags


def retried(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether Dagster's run retries will launch another attempt of this failed run."""
    value = run.tags.get(WILL_RETRY_TAG)
    if value is None:
        return bool(auto_reexecution_should_retry_run(instance, run, None))
    return value.lower() == "true"


def report_request(run: dg.DagsterRun, what: str) -> dg.RunRequest:
    # Only the failed run's id: the checks runs' own tags would make this run count as a reported night.
    return dg.RunRequest(
        run_key=f"{CHECKS_NOT_RUN}:{run.run_id}",
        job_name=REPORT_JOB,
        tags={FAILED_RUN: run.run_id, OUTCOME: what},
    )


def not_run_finding(
    instance: dg.DagsterInstance, run: dg.DagsterRun, tables: Mapping[str, Sequence[str]]
) -> Finding:
    job = run.tags.get(tags.COALESCE_JOB)
    coalesce_run = run.tags[tags.COALESCE_RUN_ID]
    tries = int(run.tags.get(RETRY_NUMBER_TAG, "0"))
    what = "was canceled" if run.status is dg.DagsterRunStatus.CANCELED else "failed"
    after = f" after {tries} {'retry' if tries == 1 else 'retries'}" if tries else ""
    night = date.fromisoformat(run.tags[tags.BUSINESS_DATE])
    subject = f"Coalesce job {job}" if job else "Coalesce"
    return Finding(
        check_name=CHECKS_NOT_RUN,
        asset_key=f"coalesce_job/{job}" if job else f"coalesce_run/{coalesce_run}",
        business_date=night,
        summary=f"The checks of {subject} run {coalesce_run} ({night}) could not run: checks run {run.run_id} "
        f"{what}{after}: {failure_reason(instance, run)}. Nothing of that night was judged.",
        evidence={
            "checks_run_id": run.run_id,
            "root_run_id": run.tags.get(ROOT_RUN_ID_TAG, run.run_id),
            "retries": tries,
            "outcome": run.status.value,
            "tables": list(tables.get(job, [])) if job else [],
        },
        cause_scope=f"job:{job}" if job else f"coalesce_run:{coalesce_run}",
        dagster_run_id=run.run_id,
        coalesce_run_id=coalesce_run,
    )


def checks_not_run_diagnosis(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    """Not a data cause: the night is unjudged. The owners of the job's tables are told what stopped it."""
    tables = [t for t in finding.evidence.get("tables", []) if t in ctx.graph]
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.UNKNOWN,
        cause=finding.summary + " Rerun the checks once the cause is fixed (re-execute the checks run).",
        evidence={
            k: finding.evidence[k] for k in ("checks_run_id", "retries", "outcome") if k in finding.evidence
        },
        path=tables,
        owners=ctx.graph.owners_on(tables),
    )


def build_checks_not_run_definitions(
    metrics: MetricsFile,
    tables: Mapping[str, Sequence[str]],
    ops: OpsSchema,
    resources: Mapping[str, Any] | None = None,
) -> dg.Definitions:
    @dg.op(name="record_checks_not_run", description="Record a night whose checks could not run.")
    def record_checks_not_run(context: dg.OpExecutionContext, snowflake: WarehouseResource) -> None:
        failed = context.instance.get_run_by_id(context.run.tags.get(FAILED_RUN, ""))
        if failed is None or not is_checks_run(failed):
            raise dg.Failure(f"run tag {FAILED_RUN}: no checks run {context.run.tags.get(FAILED_RUN)!r}")
        store = IncidentStore(snowflake, ops, run_id=context.run_id, policy=metrics.incidents)
        outcome = store.record_finding(not_run_finding(context.instance, failed, tables))
        findings = store.events(outcome.incident.incident_id, kind="finding")
        context.log_event(incident_materialization(outcome.incident, findings))
        context.log.warning(f"incident {outcome.incident.incident_id}: {findings[-1].detail['summary']}")

    @dg.job(
        name=REPORT_JOB,
        description="Record a night whose checks run failed after its retries or was canceled.",
        resource_defs=dict(resources or {}),
    )
    def report_checks_not_run():
        record_checks_not_run()

    @dg.run_failure_sensor(
        name="checks_run_failed",
        request_job=report_checks_not_run,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="A checks run that failed and that Dagster will not retry: its night is a finding.",
    )
    def checks_run_failed(context: dg.RunFailureSensorContext):
        run = context.dagster_run
        if is_checks_run(run) and not retried(context.instance, run):
            yield report_request(run, "failed")

    @dg.run_status_sensor(
        name="checks_run_canceled",
        run_status=dg.DagsterRunStatus.CANCELED,
        request_job=report_checks_not_run,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="A checks run canceled (by run monitoring, or by hand): its night is a finding.",
    )
    def checks_run_canceled(context: dg.RunStatusSensorContext):
        if is_checks_run(context.dagster_run):
            yield report_request(context.dagster_run, "canceled")

    return dg.Definitions(jobs=[report_checks_not_run], sensors=[checks_run_failed, checks_run_canceled])
