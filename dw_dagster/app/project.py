"""The code location as a project of components: what the commands read their settings from, and the
refresh of the Coalesce state that loading reads (what ``dg utils refresh-defs-state`` does).

The settings live in the ``defs.yaml`` files under ``dw_dagster/app/defs`` (validated component attributes, most
of them templated from the environment); the commands load those components rather than read variables of
their own, so a command and the code location can never disagree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from dagster.components.core.component_tree import ComponentTree

from dw_dagster.app.components import OperationsComponent, check_defs_files
from dw_dagster.coalesce.collector import collector_paused
from dw_dagster.coalesce.component import CoalesceComponent
from dw_dagster.internals import DefsStateStorage, set_defs_state_storage

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The package itself: its ``dg.toml`` declares the project, so the component tree, the ``defs.yaml`` files and
a ``LOCAL_FILESYSTEM`` Coalesce state (under ``app/defs/.local_defs_state``) resolve wherever it is installed."""
OPERATIONS = "operations"


DEFS_FOLDER = Path(__file__).parent / "defs"


def component_tree() -> ComponentTree:
    check_defs_files(DEFS_FOLDER)
    return ComponentTree.for_project(PROJECT_ROOT)


def project_files() -> list[Path]:
    """The files the component tree is read from: the project's ``dg.toml`` and every ``defs.yaml``."""
    return [PROJECT_ROOT / "dg.toml", *sorted(DEFS_FOLDER.rglob("defs.yaml"))]


def operations_component(tree: ComponentTree | None = None) -> OperationsComponent:
    return (tree or component_tree()).load_component(OPERATIONS, OperationsComponent)


def coalesce_components(tree: ComponentTree | None = None) -> list[CoalesceComponent]:
    tree = tree or component_tree()
    return list(tree.get_all_components(of_type=CoalesceComponent))


@contextmanager
def pinned_defs_state_storage(storage: DefsStateStorage | None) -> Iterator[None]:
    """Makes ``storage`` Dagster's current defs-state storage for the block, and keeps it so.

    Dagster keeps the current storage in a context variable that every entered ``DagsterInstance`` sets
    through a generator. When an instance entered elsewhere is abandoned in a reference cycle, the cyclic
    collector closes that generator at an arbitrary moment, and its ``finally`` resets the variable in
    whatever context is running (to ``None`` when the reset fails): a load in progress then finds no storage.
    Cyclic collection is held off for the block so that cannot happen half-way; it runs again afterwards."""
    with collector_paused(freeze=False), set_defs_state_storage(storage):
        yield


def refresh_coalesce_state(instance: dg.DagsterInstance) -> list[CoalesceComponent]:
    """Fetches every Coalesce component's environments, nodes and jobs into the instance's definitions
    state, where loading reads them; returns the components refreshed."""
    storage = instance.defs_state_storage
    if storage is None:
        raise dg.DagsterInvariantViolationError(
            "The Dagster instance has no defs_state_storage to keep the Coalesce state in; set DAGSTER_HOME "
            "to an instance directory"
        )
    with pinned_defs_state_storage(storage):
        components = coalesce_components()
        for component in components:
            asyncio.run(component.refresh_state(PROJECT_ROOT))
    return components
