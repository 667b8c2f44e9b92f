"""What a failing check does besides failing: record the finding on its incident, and show the incident."""

from __future__ import annotations

from typing import Any

import dagster as dg

from dw_dagster.checks.run_context import CheckRun
from dw_dagster.incidents.assets import incident_materialization
from dw_dagster.incidents.models import Finding
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


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
) -> None:
    store = IncidentStore(warehouse, ops, run_id=run.dagster_run_id)
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
        )
    )
    if outcome.new_finding:
        findings = store.events(outcome.incident.incident_id, kind="finding")
        context.op_execution_context.log_event(incident_materialization(outcome.incident, findings))
        verb = "opened" if outcome.new_incident else "updated"
        context.log.warning(f"incident {outcome.incident.incident_id} {verb}: {summary}")
