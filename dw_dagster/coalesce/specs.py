"""Coalesce nodes as asset specs: the workspace state through the translator, one spec per node."""

from __future__ import annotations

from collections import defaultdict

import dagster as dg

from dw_dagster.coalesce.errors import CoalesceStateError
from dw_dagster.coalesce.selectors import SelectorGraph
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.translator import CoalesceWorkspaceIndex, DagsterCoalesceTranslator
from dw_dagster.coalesce.workspace_models import CoalesceJob


def jobs_by_node(env_data: CoalesceEnvironmentData) -> dict[str, list[CoalesceJob]]:
    """Which of the environment's jobs build each node (Source nodes are read, never built)."""
    out: dict[str, list[CoalesceJob]] = defaultdict(list)
    graph = SelectorGraph.from_nodes(env_data.nodes)
    for job in env_data.jobs:
        for node_id in graph.select(job.include_selector, job.exclude_selector):
            out[node_id].append(job)
    return out


def workspace_indexes(data: CoalesceWorkspaceData) -> list[CoalesceWorkspaceIndex]:
    return [
        CoalesceWorkspaceIndex.build(env_data.environment, env_data.nodes, jobs_by_node(env_data))
        for env_data in data.environments
    ]


def load_coalesce_asset_specs(
    data: CoalesceWorkspaceData, translator: DagsterCoalesceTranslator | None = None
) -> list[dg.AssetSpec]:
    """Returns one ``AssetSpec`` per Coalesce node of the workspace data, each after the nodes it reads (so
    a parent's spec is made before its children name its key)."""
    translator = translator or DagsterCoalesceTranslator()
    specs = []
    for index in workspace_indexes(data):
        try:
            ordered = index.in_lineage_order()
        except ValueError as e:
            raise CoalesceStateError(f"environment {index.environment.id}: {e}") from None
        specs += [translator.spec_of(node, index) for node in ordered]
    seen: dict[dg.AssetKey, int] = {}
    for spec in specs:
        seen[spec.key] = seen.get(spec.key, 0) + 1
    clashes = sorted(k.to_user_string() for k, n in seen.items() if n > 1)
    if clashes:
        raise CoalesceStateError(
            f"Coalesce nodes map to the same asset key {clashes[:5]}: several environments loaded at once "
            "need a translator whose get_asset_key includes the environment"
        )
    return specs
