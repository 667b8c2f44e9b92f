"""A run worker builds the code location once: Dagster reconstructs it from the code pointer twice before a
run's first step (the job, then its subset and plan), both pinned to the same state versions; the second gets
the first's definitions. Anything the definitions are built from that changed in between builds them anew.
A synthetic workspace of 16 nodes (``bench_load_definitions.py``'s), loaded as a run worker loads it."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from coalesce_state import environ, state_key
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.definitions.repository_definition import RepositoryLoadData
from dagster._core.storage.defs_state.base import set_defs_state_storage

from dw_dagster.app.definitions import load_definitions

ROOT = Path(__file__).resolve().parents[1]


def _synthetic_workspace(n: int) -> str:
    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks" / "bench_load_definitions.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.synthetic_workspace(n).serialize()


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    for k in list(os.environ):
        if k.startswith(("DW_", "COALESCE_", "SNOWFLAKE_")):
            monkeypatch.delenv(k)
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text("freshness:\n  schedules: {}\n")
    with (
        environ({"COALESCE_ENVIRONMENT_IDS": "2", "DW_METRICS_FILE": str(metrics)}),
        dg.instance_for_test() as instance,
    ):
        state = tmp_path / "state"
        state.write_text(_synthetic_workspace(16))
        instance.defs_state_storage.upload_state_from_path(state_key(), "v1", state)
        yield instance


def _worker_load(instance: dg.DagsterInstance) -> dg.RepositoryDefinition:
    """One reconstruction, as a run worker makes it: pinned to the state versions the run was planned with."""
    storage = instance.defs_state_storage
    load_data = RepositoryLoadData(
        cacheable_asset_data={},
        reconstruction_metadata={},
        defs_state_info=storage.get_latest_defs_state_info(),
    )
    repo = ReconstructableRepository.for_module("dw_dagster.definitions", "defs")
    # Reconstructing sets Dagster's process-wide load context: scoped, so later tests load their own.
    with set_defs_state_storage(storage), DefinitionsLoadContext.scoped(DefinitionsLoadContext.get()):
        return repo.with_repository_load_data(load_data).get_definition()


def test_a_second_reconstruction_from_the_same_inputs_reuses_the_first(instance):
    first = _worker_load(instance)
    assert _worker_load(instance) is first
    assert len(first.asset_graph.get_all_asset_keys()) == 17  # the nodes and the incidents asset


def test_what_changed_between_reconstructions_is_built_anew(instance, tmp_path):
    first = _worker_load(instance)
    # The metrics file rewritten: the node job_5 builds gets its freshness policy.
    (tmp_path / "metrics.yaml").write_text(
        "freshness:\n  schedules:\n    job_5: {cron: '0 6 * * *', timezone: UTC, grace_minutes: 60}\n"
    )
    second = _worker_load(instance)
    assert second is not first
    key = dg.AssetKey(["loc_05", "node_00005"])
    assert first.asset_graph.get(key).freshness_policy is None
    assert second.asset_graph.get(key).freshness_policy is not None
    # Another state version pinned.
    state = tmp_path / "state"
    state.write_text(_synthetic_workspace(17))
    instance.defs_state_storage.upload_state_from_path(state_key(), "v2", state)
    third = _worker_load(instance)
    assert len(third.asset_graph.get_all_asset_keys()) == 18
    # The environment changed (the components' templates read it).
    with environ({"DW_SOME_SETTING": "1"}):
        assert _worker_load(instance) is not third
    # And a code server's initial load always reads afresh.
    assert load_definitions(instance) is not load_definitions(instance)
