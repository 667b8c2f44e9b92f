"""The code location: ``defs`` for ``dagster dev``, ``dagster definitions validate`` and the webserver."""

from __future__ import annotations

import dagster as dg

from dw_dagster.coalesce.loader import CoalesceWorkspaceDefsLoader
from dw_dagster.coalesce.translator import DagsterCoalesceTranslator
from dw_dagster.context.models import load_context_file
from dw_dagster.notifications.resources import slack_from_env
from dw_dagster.settings import Settings
from dw_dagster.warehouse.resources import warehouse_from_env


def build_definitions(
    settings: Settings | None = None, translator: DagsterCoalesceTranslator | None = None
) -> dg.Definitions:
    settings = settings or Settings.from_env()
    context = load_context_file(settings.context_file) if settings.context_file else None
    coalesce_defs = CoalesceWorkspaceDefsLoader(
        settings, translator=translator, context=context, context_path=settings.context_file
    ).build_defs()
    return dg.Definitions.merge(
        coalesce_defs,
        dg.Definitions(resources={"snowflake": warehouse_from_env(), "slack": slack_from_env()}),
    )


@dg.definitions
def defs() -> dg.Definitions:
    # Built when Dagster loads the code location, not at import: importing this module costs nothing.
    return build_definitions()
