"""The code location: ``defs`` for ``dagster dev``, ``dg check defs``, ``workspace.yaml`` and the webserver.

Everything is declared as components under ``dw_dagster/app/defs``: the Coalesce integration
(``coalesce/defs.yaml``) and dw-dagster's own layer on it (``operations/defs.yaml``), which also sets the
owners, feeding systems and freshness policies of the Coalesce assets (:meth:`OperationsComponent.layer_over`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg

from dw_dagster.coalesce.collector import collector_paused

# Dagster copies each asset checks definition with every attribute, ``execution_type`` included, and so warns
# on every load that a beta parameter was passed: no code of ours passes it. Only that notice is silenced.
warnings.filterwarnings(
    "ignore",
    message=r"Parameter `execution_type` of function `AssetsDefinition.__init__` is currently in beta",
    category=dg.BetaWarning,
)


def build_definitions() -> dg.Definitions:
    """The code location's definitions, as the environment configures them."""
    return _build()[0]


def _build() -> tuple[dg.Definitions, list[Path]]:
    """The definitions, and the files they were read from (the project's and the ones it names)."""
    from dw_dagster.app.project import component_tree, operations_component, project_files
    from dw_dagster.coalesce.component import CoalesceComponent

    # One tree: the operations component it loads is the one whose definitions it builds. Dagster's own
    # loader (load_from_defs_folder) quiets its preview and beta notices about its own machinery while it
    # builds the tree; so does this.
    # The whole build is what the process keeps (the Coalesce component pauses the collector for its own
    # part; the layers above and Dagster's components make as many objects again): no collection
    # while it is built, frozen once built.
    with collector_paused():
        tree = component_tree()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            warnings.simplefilter("ignore", dg.BetaWarning)
            operations = operations_component(tree)
            # Before the tree builds: the Coalesce component makes its specs with what the operations layer
            # says about them, once.
            operations.layer_over(tree.load_component(operations.coalesce, CoalesceComponent))
            built = tree.build_defs()
        return built, [*project_files(), *operations.files_read()]


def load_definitions(instance: dg.DagsterInstance) -> dg.Definitions:
    """The definitions as a code server of ``instance`` loads them: the Coalesce state read from that
    instance's storage, whatever an earlier load in this process left current (the storage an instance
    entered, or the load context a run's reconstruction set, pinned to another instance's versions)."""
    from dw_dagster.app.project import pinned_defs_state_storage
    from dw_dagster.internals import DefinitionsLoadContext, DefinitionsLoadType

    with pinned_defs_state_storage(instance.defs_state_storage):
        # Built inside the storage's scope: an initial load reads that storage's latest versions.
        fresh = DefinitionsLoadContext(load_type=DefinitionsLoadType.INITIALIZATION)
        with DefinitionsLoadContext.scoped(fresh):
            return build_definitions()


@dg.definitions
def defs() -> dg.Definitions:
    # Built when Dagster loads the code location, not at import: importing this module costs nothing. A run
    # worker's second reconstruction reuses its first's.
    from dw_dagster.app.reconstruction import reconstructed

    return reconstructed(_build)
