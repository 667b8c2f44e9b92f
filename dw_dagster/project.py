"""The code location as a project of components: what the commands read their settings from, and the
refresh of the Coalesce state that loading reads (what ``dg utils refresh-defs-state`` does).

The settings live in the ``defs.yaml`` files under ``dw_dagster/defs`` (validated component attributes, most
of them templated from the environment); the commands load those components rather than read variables of
their own, so a command and the code location can never disagree.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import dagster as dg
from dagster._core.storage.defs_state.base import set_defs_state_storage
from dagster.components.core.component_tree import ComponentTree

from dw_dagster.coalesce.component import CoalesceComponent
from dw_dagster.components import OperationsComponent

PROJECT_ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = "operations"


def component_tree() -> ComponentTree:
    return ComponentTree.for_project(PROJECT_ROOT)


def operations_component(tree: ComponentTree | None = None) -> OperationsComponent:
    return (tree or component_tree()).load_component(OPERATIONS, OperationsComponent)


def coalesce_components(tree: ComponentTree | None = None) -> list[CoalesceComponent]:
    tree = tree or component_tree()
    return list(tree.get_all_components(of_type=CoalesceComponent))


def refresh_coalesce_state(instance: dg.DagsterInstance) -> list[CoalesceComponent]:
    """Fetches every Coalesce component's environments, nodes and jobs into the instance's definitions
    state, where loading reads them; returns the components refreshed."""
    storage = instance.defs_state_storage
    if storage is None:
        raise dg.DagsterInvariantViolationError(
            "The Dagster instance has no defs_state_storage to keep the Coalesce state in; set DAGSTER_HOME "
            "to an instance directory"
        )
    with set_defs_state_storage(storage):
        components = coalesce_components()
        for component in components:
            asyncio.run(component.refresh_state(PROJECT_ROOT))
    return components
