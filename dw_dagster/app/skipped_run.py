"""The run that records a skipped night, and the run requests the incident sensor makes for it.

The sensor only reads Dagster's storage (``skipped_run.skipped_runs``); the warehouse is touched by this run
alone, once per skipped night (its run key is the job and the start it missed). The run judges the night
again from Dagster's storage before it writes: a run reported in between records nothing.
"""

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.specs import key_from_path
from dw_dagster.incidents.skipped_run import skipped_runs
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_asset import incident_materialization
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

SKIPPED_RUN_JOB = "report_skipped_run"
# Not the checks runs' dw/coalesce_job and dw/business_date: this run reports no Coalesce run.
SKIPPED_JOB = "dw/skipped_job"
SKIPPED_NIGHT = "dw/skipped_night"


def skipped_run_requests(
    context: dg.SensorEvaluationContext, metrics: MetricsFile, tables: Mapping[str, Sequence[str]]
) -> Iterator[dg.RunRequest]:
    """One run request per skipped night (on a night the calendar names a holiday, its finding is a WARN)."""
    for skipped in skipped_runs(context.instance, metrics, tables):
        yield dg.RunRequest(
            run_key=skipped.run_key,
            job_name=SKIPPED_RUN_JOB,
            tags={SKIPPED_JOB: skipped.job, SKIPPED_NIGHT: skipped.business_date.isoformat()},
        )


def _built_at(instance: dg.DagsterInstance, asset: str) -> datetime | None:
    event = instance.get_latest_materialization_event(key_from_path(asset))
    return datetime.fromtimestamp(event.timestamp, tz=UTC) if event else None


def build_skipped_run_job(
    metrics: MetricsFile,
    tables: Mapping[str, Sequence[str]],
    ops: OpsSchema,
    resources: Mapping[str, Any] | None = None,
) -> dg.JobDefinition:
    @dg.op(
        name="record_skipped_run",
        description="Record a scheduled Coalesce run that never started: a finding on each of its stale tables.",
    )
    def record_skipped_run(context: dg.OpExecutionContext, snowflake: WarehouseResource) -> None:
        job = context.run.tags.get(SKIPPED_JOB)
        if not job or job not in tables:
            raise dg.Failure(f"run tag {SKIPPED_JOB}: expected one of {sorted(tables)}, got {job!r}")
        found = skipped_runs(context.instance, metrics, {job: tables[job]})
        if not found or found[0].business_date.isoformat() != context.run.tags.get(SKIPPED_NIGHT):
            context.log.info(f"{job}: a run was reported for the night in the meantime; nothing to record")
            return
        skipped = found[0]
        store = IncidentStore(snowflake, ops, run_id=context.run_id, policy=metrics.incidents)
        outcome = None
        for asset in skipped.failing:
            outcome = store.record_finding(skipped.finding(asset, _built_at(context.instance, asset)))
        if outcome is not None:
            findings = store.events(outcome.incident.incident_id, kind="finding")
            context.log_event(incident_materialization(outcome.incident, findings))
            context.log.warning(f"incident {outcome.incident.incident_id}: {skipped.describe()}")

    @dg.job(
        name=SKIPPED_RUN_JOB,
        description="Record a skipped night: the Coalesce job's schedule passed and no run of it was reported.",
        resource_defs=dict(resources or {}),
    )
    def report_skipped_run():
        record_skipped_run()

    return report_skipped_run
