"""Coalesce nodes as external assets, loaded from the state file with Dagster's state-backed loader."""

from __future__ import annotations

import gc
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import dagster as dg
from dagster._core.definitions.definitions_load_context import StateBackedDefinitionsLoader

from dw_dagster.coalesce.models import CoalesceEnvironmentData, CoalesceJob, CoalesceWorkspaceData
from dw_dagster.coalesce.selectors import SelectorGraph
from dw_dagster.coalesce.sql import table_reference
from dw_dagster.coalesce.state import REFRESH_HINT, parse_state, read_state_text, state_age_hours
from dw_dagster.coalesce.translator import (
    SOURCE_NODE_TYPE,
    CoalesceNodeProps,
    CoalesceWorkspaceIndex,
    DagsterCoalesceTranslator,
)
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import ContextFile
from dw_dagster.context.specs import attach_context, build_context_asset_specs
from dw_dagster.settings import Settings

logger = logging.getLogger(__name__)

COALESCE_DEFS_KEY = "dw_dagster/coalesce_workspace"


def jobs_by_node(env_data: CoalesceEnvironmentData) -> dict[str, list[CoalesceJob]]:
    """Which of the environment's jobs build each node (Source nodes are read, never built)."""
    out: dict[str, list[CoalesceJob]] = defaultdict(list)
    graph = SelectorGraph.from_nodes(env_data.nodes)
    for job in env_data.jobs:
        for node_id in graph.select(job.include_selector, job.exclude_selector):
            out[node_id].append(job)
    return out


def node_props(data: CoalesceWorkspaceData) -> list[CoalesceNodeProps]:
    props = []
    for env_data in data.environments:
        index = CoalesceWorkspaceIndex.build(env_data.environment, env_data.nodes)
        jobs = jobs_by_node(env_data)
        for node in env_data.nodes:
            built_by = [] if node.node_type == SOURCE_NODE_TYPE else jobs.get(node.id, [])
            props.append(CoalesceNodeProps(node=node, workspace=index, jobs=built_by))
    return props


def load_coalesce_asset_specs(
    data: CoalesceWorkspaceData, translator: DagsterCoalesceTranslator | None = None
) -> list[dg.AssetSpec]:
    """Returns one ``AssetSpec`` per Coalesce node of the workspace data."""
    translator = translator or DagsterCoalesceTranslator()
    specs = [translator.get_asset_spec(p) for p in node_props(data)]
    seen: dict[dg.AssetKey, int] = {}
    for spec in specs:
        seen[spec.key] = seen.get(spec.key, 0) + 1
    clashes = sorted(k.to_user_string() for k, n in seen.items() if n > 1)
    if clashes:
        raise DwConfigError(
            f"Coalesce nodes map to the same asset key {clashes[:5]}: several environments loaded at once "
            "need a translator whose get_asset_key includes the environment"
        )
    return specs


def table_resolver(data: CoalesceWorkspaceData) -> Callable[[str, str], str]:
    """Resolves ``{{ ref('LOC', 'NAME') }}`` to the node's fully quoted table, as Coalesce does."""
    tables = {
        (n.location_name, n.name): table_reference(n.database or "", n.schema_name or "", n.name)
        for env in data.environments
        for n in env.nodes
    }

    def resolve(location: str, name: str) -> str:
        try:
            return tables[(location, name)]
        except KeyError:
            raise ValueError(
                f"ref('{location}', '{name}'): no such Coalesce node in the state file"
            ) from None

    return resolve


# Builds what depends on the node graph besides the assets (checks, sensors) from the loaded state.
StateBackedBuilder = Callable[[CoalesceWorkspaceData, Sequence[dg.AssetSpec]], dg.Definitions]


class CoalesceWorkspaceDefsLoader(StateBackedDefinitionsLoader[str]):
    """Builds the asset graph from the state file; the Coalesce API is never called while loading.

    The state (the file's text) travels in the reconstruction metadata, so run workers rebuild the
    same definitions even if the file changes under them.
    """

    def __init__(
        self,
        settings: Settings,
        translator: DagsterCoalesceTranslator | None = None,
        context: ContextFile | None = None,
        context_path: Path | None = None,
        builder: StateBackedBuilder | None = None,
    ):
        self.settings = settings
        self.builder = builder
        self.translator = translator or DagsterCoalesceTranslator()
        self.context = context
        self.context_path = context_path

    @property
    def defs_key(self) -> str:
        return COALESCE_DEFS_KEY

    def fetch_state(self) -> str:
        return read_state_text(self.settings.coalesce_state_file)

    def defs_from_state(self, state: str) -> dg.Definitions:
        # Loading builds hundreds of thousands of small, long-lived objects and no cycles worth collecting.
        # The cyclic collector would rescan them all, again and again (two thirds of the load at 10,000
        # nodes: benchmarks/README.md): pause it, then freeze what was built so later collections skip it.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._defs_from_state(state)
        finally:
            gc.freeze()
            if collecting:
                gc.enable()

    def _defs_from_state(self, state: str) -> dg.Definitions:
        path = self.settings.coalesce_state_file
        data = parse_state(path, state, self.settings)
        age = state_age_hours(data)
        if age > self.settings.state_max_age_hours:
            logger.warning("%s: the Coalesce state is %.0f hours old; %s", path, age, REFRESH_HINT)
        specs: Sequence[dg.AssetSpec] = load_coalesce_asset_specs(data, self.translator)
        if self.context is not None:
            try:
                specs = [*attach_context(specs, self.context), *build_context_asset_specs(self.context)]
            except DwConfigError as e:
                raise DwConfigError(f"{self.context_path}: {e}") from e
        if self.builder is not None:
            return self.builder(data, specs)
        return dg.Definitions(assets=specs)
