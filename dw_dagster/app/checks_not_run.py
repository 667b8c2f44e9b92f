"""The job that records a night whose checks could not run, and the two run-status sensors that request it
(``incidents/checks_not_run.py`` says when a night is unjudged and what its finding is)."""

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from dw_dagster.app.reporting import record_finding
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.incidents.checks_not_run import (
    FAILED_RUN,
    REPORT_JOB,
    is_checks_run,
    not_run_finding,
    report_request,
    retried,
)
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


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
        record_finding(context, store, not_run_finding(context.instance, failed, tables))

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
