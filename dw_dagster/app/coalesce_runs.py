"""What dw-dagster does with each finished Coalesce run the integration's polling sensor reports.

The sensor (:mod:`dw_dagster.coalesce.sensor_builder`) turns a run into materializations and observations;
this hook, the product's layer on it, turns the same run into

- findings for the incident store: one per failed or canceled node, or one for the run when it failed or was
  canceled and no node of an asset explains it, sharing one cause (the job and the business date);
- one checks-only run request for the checks of the assets the run built and of the Source nodes it read,
  keyed by the Coalesce run so that a replayed tick, a restart or a second local daemon requests it once;
  what a later run of the same tick built again is left to that run's checks (a check reads the warehouse
  as it is, and would record the later build under this run's business date);
- the review of the run's environment for sensitive new columns (:mod:`dw_dagster.governance`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any

import dagster as dg

from dw_dagster import tags
from dw_dagster.app.governance_review import review_run
from dw_dagster.checks.metrics import BusinessDay
from dw_dagster.coalesce.metadata import CoalesceMetadataSet
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.coalesce.run_models import CoalesceRunStatus
from dw_dagster.coalesce.run_report import CoalesceRunReport
from dw_dagster.coalesce.sensor_builder import CoalesceRunHook
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import Finding
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

CHECK_NAME = "coalesce_run"


def run_key(report: CoalesceRunReport) -> str:
    """The checks run of one Coalesce run, the same in every process that requests it."""
    return f"{report.environment_id}:{report.run.id}"


def business_date(report: CoalesceRunReport, business_day: BusinessDay) -> date:
    # A rerun dw-dagster started to fix an incident rebuilds that incident's business date.
    given = report.run.run_time_parameters.get(tags.COALESCE_PARAM_BUSINESS_DATE)
    if given:
        try:
            return date.fromisoformat(str(given))
        except ValueError:
            pass
    moment = report.run.run_start_time or report.run.run_end_time or datetime.now(UTC)
    return business_day.of(moment)


def cause_scope(report: CoalesceRunReport) -> str:
    if report.job_name:
        return f"job:{report.job_name}"
    # A run without a job (a selector run) is its own cause.
    return f"coalesce_run:{report.environment_id}:{report.run.id}"


def run_findings(report: CoalesceRunReport, business_day: BusinessDay) -> list[Finding]:
    """One finding per failed or canceled node; one for the run when it failed or was canceled and no node
    of an asset explains it."""
    run = report.run
    evidence: dict[str, Any] = {
        "coalesce_run_id": run.id,
        "run_link": report.run_link,
        "environment_id": report.environment_id,
        "job_id": report.job_id,
        "job_name": report.job_name,
        "run_status": run.run_status.value,
        "run_failure_reason": run.run_failure_reason,
        "run_start_time": run.run_start_time,
        "run_end_time": run.run_end_time,
    }
    common: dict[str, Any] = dict(
        check_name=CHECK_NAME,
        business_date=business_date(report, business_day),
        cause_scope=cause_scope(report),
        coalesce_run_id=str(run.id),
    )
    findings = [
        Finding(
            asset_key=f.asset_key.to_user_string(),
            summary=f"{report.describe()}: node {f.node_name} {f.state}: {f.error}",
            severity="ERROR" if f.state == "failed" else "WARN",
            evidence={
                **evidence,
                "node_id": f.node_id,
                "node_name": f.node_name,
                "node_state": f.state,
                "failed_query": f.query_name,
                "error": f.error,
                "error_detail": f.error_detail,
            },
            **common,
        )
        for f in report.failures
    ]
    status = run.run_status
    if not findings and (status is not CoalesceRunStatus.COMPLETED or report.unmapped_failures):
        canceled = status is CoalesceRunStatus.CANCELED
        what = "was canceled" if canceled else f"failed: {run.run_failure_reason or 'no reason given'}"
        findings.append(
            Finding(
                asset_key=f"coalesce_job/{report.job_name}" if report.job_name else f"coalesce_run/{run.id}",
                summary=f"{report.describe()} {what}",
                severity="WARN" if canceled else "ERROR",
                evidence={**evidence, "unmapped_failed_nodes": list(report.unmapped_failures)},
                **common,
            )
        )
    return findings


def run_request_tags(report: CoalesceRunReport, business_day: BusinessDay) -> dict[str, str]:
    run_tags = {
        **tags.CHECKS_RUN_RETRIES,
        tags.COALESCE_RUN_ID: str(report.run.id),
        tags.COALESCE_ENVIRONMENT_ID: report.environment_id,
        tags.BUSINESS_DATE: business_date(report, business_day).isoformat(),
    }
    if report.job_name:
        run_tags[tags.COALESCE_JOB] = report.job_name
    return run_tags


def source_inputs(asset_graph: Any, built: Iterable[dg.AssetKey]) -> set[dg.AssetKey]:
    """The Coalesce Source nodes (read, never built) that the built assets read directly."""
    out = set()
    for key in built:
        for parent in asset_graph.get(key).parent_keys:
            if (
                asset_graph.has(parent)
                and CoalesceMetadataSet.extract(asset_graph.get(parent).metadata).node_type == "Source"
            ):
                out.add(parent)
    return out


def check_keys_for_assets(asset_graph: Any, asset_keys: Iterable[dg.AssetKey]) -> list[dg.AssetCheckKey]:
    """The checks of these assets that a checks-only run can execute, with the checks that must run with
    them (a ``@multi_asset_check`` that cannot be subset runs whole)."""
    keys: set[dg.AssetCheckKey] = set()
    for check_key in asset_graph.get_check_keys_for_assets(set(asset_keys)):
        execution_set = asset_graph.get_execution_set_asset_and_check_keys(check_key)
        if any(isinstance(k, dg.AssetKey) for k in execution_set):
            continue  # runs only with an asset materialization: not a checks-only run
        keys.update(k for k in execution_set if isinstance(k, dg.AssetCheckKey))
    return sorted(keys, key=lambda k: k.to_user_string())


def build_run_hook(
    business_day: BusinessDay,
    warehouse: WarehouseResource,
    ops: OpsSchema,
    workspace: CoalesceWorkspace,
    context_file: ContextFile | None = None,
) -> CoalesceRunHook:
    """The hook the product's run sensor is built with: incidents go to ``ops`` in ``warehouse``; the
    run's environment is reviewed for sensitive new columns through ``workspace``."""
    store = IncidentStore(warehouse, ops)

    def on_run_finished(
        context: dg.SensorEvaluationContext, report: CoalesceRunReport
    ) -> list[dg.RunRequest]:
        outcomes = [store.record_finding(f) for f in run_findings(report, business_day)]
        asset_graph = context.repository_def.asset_graph
        built = report.built_asset_keys
        touched = [*built, *source_inputs(asset_graph, built)]
        # In a sensor tick: detailed node pages within a call's budget, not a refresh's minutes.
        with workspace.new_client(in_sensor_tick=True) as client:
            outcomes += review_run(
                context,
                client,
                store,
                environment_id=report.environment_id,
                touched=touched,
                business_date=business_date(report, business_day),
                coalesce_run_id=str(report.run.id),
                context_file=context_file,
            )
        for outcome in outcomes:
            if outcome.new_incident:
                context.log.warning(f"{report.describe()}: opened incident {outcome.incident.incident_id}")
            elif outcome.new_finding:
                context.log.info(f"{report.describe()}: added to incident {outcome.incident.incident_id}")
        # The Source nodes the run read are checked with what it built: the run just consumed them. What a
        # later run of this tick built or read again is that run's to check.
        current = report.current_asset_keys
        inputs = source_inputs(asset_graph, current) - source_inputs(asset_graph, report.superseded)
        if report.superseded:
            context.log.info(
                f"{report.describe()}: the checks of {len(report.superseded)} assets a later run built again "
                "are that run's"
            )
        check_keys = check_keys_for_assets(asset_graph, [*current, *inputs])
        if not check_keys:
            return []
        return [
            dg.RunRequest(
                run_key=run_key(report),
                asset_check_keys=check_keys,
                tags=run_request_tags(report, business_day),
            )
        ]

    return on_run_finished
