"""Loading definitions keeps the defs-state storage it was given, whatever another instance left behind."""

from __future__ import annotations

import gc

import dagster as dg
from dagster._core.storage.defs_state.base import DefsStateStorage, set_defs_state_storage

from dw_dagster.app.project import pinned_defs_state_storage


def abandon_an_entered_storage(storage: DefsStateStorage) -> None:
    """As an instance entered and never exited does: its ``set_defs_state_storage`` generator, suspended,
    left in a reference cycle only the cyclic collector frees."""
    entered = set_defs_state_storage(storage)
    entered.__enter__()
    cycle: list[object] = [entered]
    cycle.append(cycle)


def allocate() -> None:
    # Enough new containers for the collector's youngest generation to run, as a load's own work does.
    _ = [[] for _ in range(20_000)]


def test_a_generator_collected_mid_load_cannot_unset_the_storage_being_loaded(tmp_path):
    with (
        dg.instance_for_test(temp_dir=str(tmp_path)) as ours,
        dg.instance_for_test() as theirs,
    ):
        storage, stale = ours.defs_state_storage, theirs.defs_state_storage
        assert gc.isenabled()

        # Why the pin exists: under a plain set, collecting the abandoned generator resets the variable.
        with set_defs_state_storage(None):
            abandon_an_entered_storage(stale)
            with set_defs_state_storage(storage):
                allocate()
                assert DefsStateStorage.get() is not storage

        with set_defs_state_storage(None):
            abandon_an_entered_storage(stale)
            with pinned_defs_state_storage(storage):
                allocate()
                assert DefsStateStorage.get() is storage
            assert gc.isenabled(), "collection runs again after the block"
            gc.collect()
