"""The context graph: the systems around a Coalesce pipeline (ERP tables, replication, reference data, BI
consumers), their owners, and how they connect to the Coalesce nodes."""

from dw_dagster.context.models import ContextFile, ContextSystem, Team, load_context_file
from dw_dagster.context.specs import build_context_asset_specs

__all__ = ["ContextFile", "ContextSystem", "Team", "build_context_asset_specs", "load_context_file"]
