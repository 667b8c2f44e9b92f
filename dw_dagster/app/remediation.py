"""The remediation job, ``remediate_incident``, and the sensors around it: each op is one of
:class:`~dw_dagster.remediation.steps.RemediationSteps`' steps with the resources it needs.

Every remediation run is submitted with one run config, the deployment's: ``DW_REMEDIATION_RUN_CONFIG``, a
JSON object (e.g. ``{"ops": {"await_node_deploy": {"config": {"deploy_timeout_seconds": 3600}}}}``), empty by
default. A plan binds only to a run of exactly that configuration: op config set any other way (a run
launched by hand with other values) is refused.
"""

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from dw_dagster.app.remediation_sensors import build_remediation_sensors
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import ContextFile
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.records.remediation import Change, VerificationResult
from dw_dagster.remediation.approvals import REMEDIATION_JOB
from dw_dagster.remediation.job_models import Approved, RemediationConfig, Rerun
from dw_dagster.remediation.steps import RemediationSteps
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

REMEDIATION_RUN_CONFIG_ENV = "DW_REMEDIATION_RUN_CONFIG"


def remediation_run_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The run config every remediation run is submitted with (``DW_REMEDIATION_RUN_CONFIG``)."""
    text = (os.environ if environ is None else environ).get(REMEDIATION_RUN_CONFIG_ENV, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DwConfigError(
            f"{REMEDIATION_RUN_CONFIG_ENV}: not JSON ({e}); expected a run config object"
        ) from None
    if not isinstance(value, dict):
        raise DwConfigError(
            f"{REMEDIATION_RUN_CONFIG_ENV}: expected a run config object like {{'ops': ...}}, got {type(value).__name__}"
        )
    return value


def build_remediation_definitions(
    metrics: MetricsFile,
    resolve_table: Callable[[str, str], str],
    ops: OpsSchema,
    context_file: ContextFile,
    resources: Mapping[str, Any] | None = None,
) -> dg.Definitions:
    steps = RemediationSteps(metrics, resolve_table, ops, context_file)

    @dg.op(description="Refuses to go on unless the project's own approval record approves this very run.")
    def check_approval(
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        snowflake: WarehouseResource,
        coalesce: CoalesceWorkspace,
        slack: SlackNotifier,
    ) -> Approved:
        return steps.check_approval(context, config, snowflake, coalesce, slack)

    @dg.op(description="Adds the approved reference-data rows, recording how to undo each.")
    def apply_reference_rows(
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
        coalesce: CoalesceWorkspace,
        approved: Approved,
    ) -> list[Change]:
        return steps.apply_reference_rows(context, config, snowflake, slack, coalesce, approved)

    @dg.op(
        description="Waits until the node owner has applied and deployed the proposed node change in Coalesce."
    )
    def await_node_deploy(
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        approved: Approved,
        changes: list[Change],
        coalesce: CoalesceWorkspace,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
    ) -> list[str]:
        return steps.await_node_deploy(context, config, approved, changes, coalesce, snowflake, slack)

    @dg.op(
        description="Starts the scoped Coalesce rerun under the approving owner's own credentials and follows it."
    )
    def scoped_rerun(
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        approved: Approved,
        changes: list[Change],
        deployed: list[str],
        coalesce: CoalesceWorkspace,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
    ) -> Rerun:
        return steps.scoped_rerun(context, config, approved, changes, deployed, coalesce, snowflake, slack)

    @dg.op(description="Verifies the fix: totals reconcile, the new node test passed, moved totals are back.")
    def verify_fix(
        context: dg.OpExecutionContext,
        config: RemediationConfig,
        approved: Approved,
        rerun: Rerun,
        coalesce: CoalesceWorkspace,
        snowflake: WarehouseResource,
        slack: SlackNotifier,
    ) -> list[VerificationResult]:
        return steps.verify_fix(context, config, approved, rerun, coalesce, snowflake, slack)

    @dg.op(
        description="Writes the receipt (append-only), shows it in the UI and posts it to the incident's threads."
    )
    def write_receipt(
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
        steps.write_receipt(
            context, config, approved, changes, rerun, verification, snowflake, slack, coalesce
        )

    @dg.job(
        name=REMEDIATION_JOB,
        description="Carries out an approved remediation plan: reference rows, node deploy, scoped rerun, verification, receipt.",
        tags={"dw/kind": "remediation"},
        resource_defs=dict(resources or {}),
    )
    def remediate_incident():
        approved = check_approval()
        changes = apply_reference_rows(approved)
        deployed = await_node_deploy(approved, changes)
        rerun = scoped_rerun(approved, changes, deployed)
        write_receipt(approved, changes, rerun, verify_fix(approved, rerun))

    sensors = build_remediation_sensors(remediate_incident, ops, context_file, remediation_run_config())
    return dg.Definitions(jobs=[remediate_incident], sensors=sensors)
