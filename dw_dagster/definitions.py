"""The code location: ``defs`` for ``dagster dev``, ``dagster definitions validate`` and the webserver."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from dw_dagster.checks import build_check_definitions, load_metrics_file
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.loader import CoalesceWorkspaceDefsLoader, table_resolver
from dw_dagster.coalesce.models import CoalesceWorkspaceData
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.coalesce.sensor_builder import build_coalesce_run_sensor
from dw_dagster.coalesce.translator import DagsterCoalesceTranslator
from dw_dagster.context.models import ContextFile, load_context_file
from dw_dagster.context.references import check_references
from dw_dagster.cost.job import build_cost_definitions
from dw_dagster.incidents.assets import incidents_spec
from dw_dagster.incidents.jobs import build_incident_definitions
from dw_dagster.notifications.resources import slack_from_env
from dw_dagster.settings import Settings
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import warehouse_from_env


def coalesce_workspace(settings: Settings) -> CoalesceWorkspace:
    return CoalesceWorkspace(
        base_url=settings.coalesce_base_url,
        api_token=dg.EnvVar("COALESCE_API_TOKEN"),
        environment_ids=list(settings.coalesce_environment_ids),
    )


def _state_backed(settings: Settings, metrics: MetricsFile, context: ContextFile | None):
    """What is built from the node graph besides the assets: the run sensor and the checks."""
    ops = OpsSchema(settings.database or "", metrics.ops_schema)

    def build(data: CoalesceWorkspaceData, specs: Sequence[dg.AssetSpec]) -> dg.Definitions:
        check_references(specs, context=context, context_path=settings.context_file, metrics=metrics,
                         metrics_path=settings.metrics_file, resolve_table=table_resolver(data))  # fmt: skip
        monitored = build_check_definitions(metrics, specs, table_resolver(data), ops.database)
        sensor = build_coalesce_run_sensor(
            workspace=coalesce_workspace(settings),
            asset_specs=specs,
            business_day=metrics.business_day,
            ops_schema=ops,
        )
        incidents = build_incident_definitions(specs, metrics, table_resolver(data), ops, context)
        return dg.Definitions.merge(
            monitored,
            incidents,
            dg.Definitions(sensors=[sensor]),
            build_cost_definitions(specs, metrics, ops),
        )

    return build


def build_definitions(
    settings: Settings | None = None, translator: DagsterCoalesceTranslator | None = None
) -> dg.Definitions:
    settings = settings or Settings.from_env()
    context = load_context_file(settings.context_file) if settings.context_file else None
    # Without a metrics file the sensor still reports runs; only the recorded totals are missing.
    metrics = load_metrics_file(settings.metrics_file) if settings.metrics_file else MetricsFile()
    coalesce_defs = CoalesceWorkspaceDefsLoader(
        settings,
        translator=translator,
        context=context,
        context_path=settings.context_file,
        # Incidents and check history live in the warehouse: without a database, assets only.
        builder=_state_backed(settings, metrics, context) if settings.database else None,
    ).build_defs()
    return dg.Definitions.merge(
        coalesce_defs,
        dg.Definitions(
            assets=[incidents_spec],
            # Checks and diagnosis push their work down to Snowflake: one process per run, not per step,
            # saves seconds of start-up on every night's checks run.
            executor=dg.in_process_executor,
            resources={
                "snowflake": warehouse_from_env(),
                "slack": slack_from_env(),
                "coalesce": coalesce_workspace(settings),
            },
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    # Built when Dagster loads the code location, not at import: importing this module costs nothing.
    return build_definitions()
