"""What the code location's load hands Dagster for a synthetic workspace (``bench_load_definitions.py``'s,
16 nodes, one environment, jobs by location selector) is exactly what it was: every asset node's snapshot
(the key, deps both ways, description, group, kinds, tags, owners, metadata with the ``coalesce/*`` set,
column schema and lineage, code references, the jobs it is in, freshness policies), as the code server sends
it to the webserver and the daemon. A context file (owners, a system feeding a node) and a metrics file (two
jobs scheduled) put the operations layer on the Coalesce specs too. Work done to make loading faster must not
change it.

A change meant to change the specs: ``DW_UPDATE_LOAD_SNAPSHOT=1`` rewrites the snapshot; review its diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest
from coalesce_state import bench_load_definitions, environ, state_key
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster_shared.serdes import serialize_value

from dw_dagster.app.definitions import load_definitions

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "data" / "load_snapshot.json"
NODES = 16


def _synthetic_workspace(n: int) -> str:
    return bench_load_definitions().synthetic_workspace(n).serialize()


METRICS = """
freshness:
  schedules:
    job_5: {cron: "0 6 * * 1-5", timezone: America/Chicago, grace_minutes: 90}
    job_7: {cron: "30 23 * * *", timezone: UTC, grace_minutes: 60}
"""


def _asset_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    # Unset, not empty: an empty COALESCE_BASE_URL is a setting (and refused), not the default.
    for k in list(os.environ):
        if k.startswith(("DW_", "COALESCE_", "SNOWFLAKE_")):
            monkeypatch.delenv(k)
    (tmp_path / "context.yaml").write_text(bench_load_definitions().CONTEXT)
    (tmp_path / "metrics.yaml").write_text(METRICS)
    settings = {
        "COALESCE_ENVIRONMENT_IDS": "2",
        "DW_CONTEXT_FILE": str(tmp_path / "context.yaml"),
        "DW_METRICS_FILE": str(tmp_path / "metrics.yaml"),
    }
    with environ(settings), dg.instance_for_test() as instance:
        state = tmp_path / "state"
        state.write_text(_synthetic_workspace(NODES))
        instance.defs_state_storage.upload_state_from_path(state_key(), "v1", state)
        repo = load_definitions(instance).get_repository_def()
    snap = RepositorySnap.from_def(repo)
    nodes = {}
    for node in snap.asset_nodes:
        # Code references name files under the checkout: the same wherever it is.
        text = serialize_value(node).replace(str(ROOT), "<root>")
        nodes[node.asset_key.to_user_string()] = json.loads(text)
    return nodes


def test_the_load_hands_dagster_the_same_asset_nodes(tmp_path, monkeypatch):
    update = os.environ.get("DW_UPDATE_LOAD_SNAPSHOT")  # read before the load's DW_* settings are cleared
    nodes = _asset_nodes(tmp_path, monkeypatch)
    assert len(nodes) == NODES + 2  # the nodes, the system feeding one and the incidents asset
    if update:
        SNAPSHOT.write_text(json.dumps(nodes, indent=1, sort_keys=True) + "\n")
    expected = json.loads(SNAPSHOT.read_text())
    assert sorted(nodes) == sorted(expected)
    for key, node in nodes.items():
        assert node == expected[key], f"{key}: its asset node differs from {SNAPSHOT.name}"
