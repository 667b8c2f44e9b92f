"""Time to load the code location's definitions for a synthetic Coalesce environment of N nodes.

Writes a workspace state of N nodes (10 columns each, column lineage to 1-3 parents, a join per node, 20 jobs
with location selectors), then times what a code server does at start: read and validate the state,
translate every node, build the repository (the asset graph). With ``--gc-compare`` it also times the same load with Python's
cyclic garbage collector paused, and prints the ratio (how much of the load is the collector walking the
objects the load allocates). With ``--schedules`` a metrics file gives each job a daily schedule, so every
node gets the freshness policy of the job that builds it. Run:

    .venv/bin/python benchmarks/bench_load_definitions.py [--nodes 10000] [--gc-compare] [--schedules]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import yaml
from dagster._core.storage.defs_state.base import set_defs_state_storage

from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceJob, CoalesceNode

LOCATIONS = [f"LOC_{i:02d}" for i in range(20)]


def synthetic_workspace(n: int, seed: int = 1) -> CoalesceWorkspaceData:
    rng = random.Random(seed)
    nodes: list[dict] = []
    for i in range(n):
        loc = LOCATIONS[i % len(LOCATIONS)]
        name = f"NODE_{i:05d}"
        is_source = i < n // 10
        parents = (
            [] if is_source else rng.sample(nodes[: max(1, i)], k=min(len(nodes[:i]), rng.randint(1, 3)))
        )
        columns = []
        for c in range(10):
            refs = [
                {"nodeID": p["id"], "columnID": p["metadata"]["columns"][c]["columnID"]} for p in parents[:2]
            ]
            columns.append(
                {
                    "columnID": f"{i}-{c}",
                    "name": f"COL_{c}",
                    "dataType": "NUMBER(38,0)",
                    "nullable": c != 0,
                    "appliedColumnTests": {"unique": True, "notNull": True} if c == 0 else {},
                    "sources": [{"transform": "", "columnReferences": refs}] if refs else [],
                }
            )
        join = "\n".join(
            [f"FROM {{{{ ref('{parents[0]['locationName']}', '{parents[0]['name']}') }}}} \"P0\""]
            + [
                f"LEFT JOIN {{{{ ref('{p['locationName']}', '{p['name']}') }}}} \"P{k}\" ON \"P0\".\"COL_0\" = \"P{k}\".\"COL_0\""
                for k, p in enumerate(parents[1:], start=1)
            ]
        ) if parents else ""  # fmt: skip
        nodes.append(
            {
                "id": f"node-{i}",
                "name": name,
                "nodeType": "Source" if is_source else rng.choice(["Stage", "Dimension", "Fact", "View"]),
                "database": "DW",
                "schema": loc,
                "locationName": loc,
                "description": f"synthetic node {i}",
                "materializationType": "table",
                "metadata": {
                    "columns": columns,
                    "sourceMapping": [
                        {
                            "name": name,
                            "dependencies": [
                                {"locationName": p["locationName"], "nodeName": p["name"]} for p in parents
                            ],
                            "join": {"joinCondition": join},
                        }
                    ],
                    "appliedNodeTests": [],
                },
            }
        )
    jobs = [
        CoalesceJob(id=str(j + 1), name=f"job_{j}", include_selector=f"{{location: {LOCATIONS[j]}}}")
        for j in range(len(LOCATIONS))
    ]
    env = CoalesceEnvironment(id="2", name="PROD")
    return CoalesceWorkspaceData(
        base_url="https://app.coalescesoftware.io",
        fetched_at=datetime.now(UTC),
        environments=[
            CoalesceEnvironmentData(
                environment=env, nodes=[CoalesceNode.model_validate(n) for n in nodes], jobs=jobs
            )
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--gc-compare", action="store_true", help="also time the load with the cyclic GC paused"
    )
    parser.add_argument(
        "--schedules", action="store_true", help="a metrics file scheduling every job (freshness policies)"
    )
    args = parser.parse_args()

    from dw_dagster.app.definitions import build_definitions
    from dw_dagster.app.project import coalesce_components

    with tempfile.TemporaryDirectory() as tmp:
        data = synthetic_workspace(args.nodes)
        state = Path(tmp) / "state"
        state.write_text(data.serialize())
        size_mb = state.stat().st_size / 1e6
        for name in ("DW_CONTEXT_FILE", "DW_METRICS_FILE", "COALESCE_BASE_URL", "SNOWFLAKE_DATABASE"):
            os.environ.pop(name, None)
        os.environ["COALESCE_ENVIRONMENT_IDS"] = "2"
        if args.schedules:
            metrics = Path(tmp) / "metrics.yaml"
            schedules = {
                f"job_{j}": {"cron": f"0 {j % 24} * * *", "timezone": "America/Chicago", "grace_minutes": 60}
                for j in range(len(LOCATIONS))
            }
            metrics.write_text(yaml.safe_dump({"freshness": {"schedules": schedules}}))
            os.environ["DW_METRICS_FILE"] = str(metrics)
        # The state where `dw-dagster coalesce refresh` keeps it: the instance's definitions state.
        instance = dg.DagsterInstance.local_temp(tmp)
        storage = instance.defs_state_storage
        (component,) = coalesce_components()
        storage.upload_state_from_path(component.defs_state_config.key, "bench", state)

        def build_definitions_():
            with set_defs_state_storage(storage):
                return build_definitions()

        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            repo = build_definitions_().get_repository_def()
            assert len(repo.asset_graph.get_all_asset_keys()) >= args.nodes
            times.append(time.perf_counter() - t0)
        best = min(times)
        # Memory in a separate run: tracing allocations slows Python several times over.
        tracemalloc.start()
        build_definitions_().get_repository_def()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        scheduled = f", {len(LOCATIONS)} jobs scheduled (freshness policies)" if args.schedules else ""
        print(f"nodes: {args.nodes}, state file: {size_mb:.1f} MB{scheduled}")
        print(
            f"load definitions (read + validate state, translate, build asset graph): best {best:.2f} s, "
            f"median {sorted(times)[len(times) // 2]:.2f} s over {args.repeat} runs (goal < 5 s)"
        )
        print(f"per node: {1000 * best / args.nodes:.3f} ms; peak traced memory {peak / 1e6:.0f} MB")
        if args.gc_compare:
            paused = []
            for _ in range(args.repeat):
                gc.collect()
                gc.disable()
                try:
                    t0 = time.perf_counter()
                    build_definitions_().get_repository_def()
                    paused.append(time.perf_counter() - t0)
                finally:
                    gc.enable()
            print(
                f"with the cyclic GC paused during the load: best {min(paused):.2f} s "
                f"({best / min(paused):.1f}x faster; the collector's share of the load is about "
                f"{100 * (1 - min(paused) / best):.0f}%)"
            )


if __name__ == "__main__":
    main()
