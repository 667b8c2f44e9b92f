"""What a failing check does besides failing: record the finding on its incident, and show the incident.

The incident is provisional until its diagnosis lands (``dw_dagster/incidents/store.py``). A finding the
record explains (the row-count step of a verified fix) opens nothing and is not shown as news: it is logged
and kept on the fixed incident as ``explained``.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from dw_dagster.checks.run_context import CheckRun
from dw_dagster.context.specs import key_from_path
from dw_dagster.incidents.assets import incident_materialization
from dw_dagster.incidents.models import Finding, RecordOutcome
from dw_dagster.incidents.policy import IncidentPolicy
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


def _ancestors(context: dg.AssetCheckExecutionContext, asset: str) -> set[str]:
    # The job's asset graph (the whole code location's, also in a checks-only subset run).
    graph = context.op_execution_context.job_def.asset_layer.asset_graph
    key = key_from_path(asset)
    if not graph.has(key):
        return set()
    return {k.to_user_string() for k in graph.get_ancestor_asset_keys(key)}


def report_failure(
    context: dg.AssetCheckExecutionContext,
    *,
    warehouse: WarehouseResource,
    ops: OpsSchema,
    run: CheckRun,
    check: str,
    asset: str,
    summary: str,
    evidence: dict[str, Any],
    cause_scope: str,
    policy: IncidentPolicy | None = None,
) -> RecordOutcome:
    """Records the finding; the outcome's ``explained_by`` says the record explains it (the check should then
    report at WARN: it is not an incident)."""
    store = IncidentStore(warehouse, ops, run_id=run.dagster_run_id, policy=policy)
    outcome = store.record_finding(
        Finding(
            check_name=check,
            asset_key=asset,
            business_date=run.business_date,
            summary=summary,
            evidence=evidence,
            cause_scope=f"job:{run.coalesce_job}" if run.coalesce_job else cause_scope,
            dagster_run_id=run.dagster_run_id,
            coalesce_run_id=run.coalesce_run_id,
        ),
        ancestors=_ancestors(context, asset),
    )
    if outcome.explained_by:
        context.log.info(f"not an incident: {summary}; explained by {outcome.explained_by}")
        return outcome
    if outcome.new_finding:
        findings = store.events(outcome.incident.incident_id, kind="finding")
        context.op_execution_context.log_event(incident_materialization(outcome.incident, findings))
        verb = (
            "opened" if outcome.new_incident else "reopened" if outcome.reopened else "updated (provisional)"
        )
        context.log.warning(f"incident {outcome.incident.incident_id} {verb}: {summary}")
    return outcome
