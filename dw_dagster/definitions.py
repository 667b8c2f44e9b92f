"""The code location: ``defs`` for ``dagster dev``, ``dagster definitions validate`` and the webserver."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from dw_dagster.checks import build_check_definitions, load_metrics_file
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.loader import CoalesceWorkspaceDefsLoader, table_resolver
from dw_dagster.coalesce.models import CoalesceWorkspaceData
from dw_dagster.coalesce.translator import DagsterCoalesceTranslator
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.assets import incidents_spec
from dw_dagster.notifications.resources import slack_from_env
from dw_dagster.settings import Settings
from dw_dagster.warehouse.resources import warehouse_from_env


def _monitoring(settings: Settings, metrics: MetricsFile):
    if not settings.database:
        raise DwConfigError("SNOWFLAKE_DATABASE: not set; the checks keep their history in its ops schema")

    def build(data: CoalesceWorkspaceData, specs: Sequence[dg.AssetSpec]) -> dg.Definitions:
        return build_check_definitions(metrics, specs, table_resolver(data), settings.database)  # type: ignore[arg-type]

    return build


def build_definitions(
    settings: Settings | None = None, translator: DagsterCoalesceTranslator | None = None
) -> dg.Definitions:
    settings = settings or Settings.from_env()
    context = load_context_file(settings.context_file) if settings.context_file else None
    metrics = load_metrics_file(settings.metrics_file) if settings.metrics_file else None
    coalesce_defs = CoalesceWorkspaceDefsLoader(
        settings,
        translator=translator,
        context=context,
        context_path=settings.context_file,
        builder=_monitoring(settings, metrics) if metrics else None,
    ).build_defs()
    return dg.Definitions.merge(
        coalesce_defs,
        dg.Definitions(
            assets=[incidents_spec],
            resources={"snowflake": warehouse_from_env(), "slack": slack_from_env()},
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    # Built when Dagster loads the code location, not at import: importing this module costs nothing.
    return build_definitions()
