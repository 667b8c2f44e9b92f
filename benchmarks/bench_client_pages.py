"""The Coalesce client's pages per second against the local Coalesce simulator.

Writes a synthetic Coalesce project file (format: docs/project-file.md) of N nodes (default 2,000: a tenth
Source nodes, the rest reading 1-3 parents through a join, 10 columns each with column lineage, a unique +
not-null test on the key, 20 storage locations and 20 jobs), starts the local Snowflake and the simulator
in a temp dir (``LocalWorld(..., services=("snowflake", "coalesce"))``, loopback ports), then times

- ``CoalesceClient.list_nodes(env, detail=False|True, limit=...)`` at a few page sizes, every page followed,
  next to a bare httpx loop over the same pages (JSON decode only) to show what the client's validation
  adds;
- ``CoalesceClient.iter_runs(...)`` over R runs (deploy runs, which cost the simulator no warehouse work)
  at a few page sizes.

It prints pages/s and nodes (or runs)/s, the best of ``--repeat`` passes. Nothing is asserted. Run:

    .venv/bin/python benchmarks/bench_client_pages.py [--nodes 2000] [--runs 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import tempfile
import time
from pathlib import Path

import httpx
import yaml

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")

from dw_local.world import LOCAL_COALESCE_TOKEN, LocalWorld  # noqa: E402

ENV_ID = "2"
DATABASE = "BENCH_DB"
LOCATIONS = [f"LOC_{i:02d}" for i in range(20)]
COLUMNS = 10


def synthetic_project(n: int, seed: int = 1) -> dict:
    """A project file's content: n nodes, a tenth of them Sources, each other node joining 1-3 parents."""
    rng = random.Random(seed)
    nodes: list[dict] = []
    for i in range(n):
        loc = LOCATIONS[i % len(LOCATIONS)]
        name = f"NODE_{i:05d}"
        if i < max(1, n // 10):
            nodes.append(
                {
                    "name": name,
                    "nodeType": "Source",
                    "locationName": loc,
                    "description": f"synthetic source {i}",
                    "columns": [
                        {"name": f"COL_{c}", "dataType": "NUMBER(38,0)", "nullable": c != 0}
                        for c in range(COLUMNS)
                    ],
                }
            )
            continue
        parents = rng.sample(nodes, k=min(len(nodes), rng.randint(1, 3)))
        p0 = parents[0]
        join = "\n".join(
            [f"FROM {{{{ ref('{p0['locationName']}', '{p0['name']}') }}}} \"P0\""]
            + [
                f"LEFT JOIN {{{{ ref('{p['locationName']}', '{p['name']}') }}}} \"P{k}\""
                f' ON "P0"."COL_0" = "P{k}"."COL_0"'
                for k, p in enumerate(parents[1:], start=1)
            ]
        )
        columns = []
        for c in range(COLUMNS):
            sources = [f"{p['locationName']}.{p['name']}.COL_{c}" for p in parents[:2]]
            column = {"name": f"COL_{c}", "dataType": "NUMBER(38,0)", "sources": sources}
            if len(sources) > 1:
                column["transform"] = f'COALESCE("P0"."COL_{c}", "P1"."COL_{c}")'
            if c == 0:
                column["tests"] = ["unique", "notNull"]
                column["isBusinessKey"] = True
            columns.append(column)
        nodes.append(
            {
                "name": name,
                "nodeType": rng.choice(["Stage", "Dimension", "Fact", "View"]),
                "locationName": loc,
                "description": f"synthetic node {i}",
                "join": join,
                "columns": columns,
            }
        )
    return {
        "project": {"id": "1", "name": f"Synthetic project of {n} nodes"},
        "environments": [
            {
                "id": ENV_ID,
                "name": "PROD",
                "storageMappings": {loc: {"database": DATABASE, "schema": loc} for loc in LOCATIONS},
            }
        ],
        "nodes": nodes,
        "jobs": [
            {"id": str(j + 1), "name": f"job_{j}", "includeSelector": f"{{location: {loc}}}"}
            for j, loc in enumerate(LOCATIONS)
        ],
    }


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def raw_pages(base_url: str, path: str, params: dict) -> int:
    """The same pages with a bare httpx client (JSON decode only, no models): the floor for the client."""
    items = 0
    headers = {"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
        params = dict(params)
        while True:
            body = http.get(path, params=params).raise_for_status().json()
            items += len(body["data"])
            if body["next"] is None:
                return items
            params["startingFrom"] = body["next"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1000, help="deploy runs to list with iter_runs (0: skip)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        root = Path(tmp)
        project_file = root / "project.yaml"
        t0 = time.perf_counter()
        project_file.write_text(yaml.safe_dump(synthetic_project(args.nodes), sort_keys=False, width=200))
        print(f"project file: {args.nodes} nodes, {project_file.stat().st_size / 1e6:.1f} MB "
              f"(written in {time.perf_counter() - t0:.1f} s)")  # fmt: skip

        lw = LocalWorld(root / "world", project_file=project_file, services=("snowflake", "coalesce"))
        t0 = time.perf_counter()
        with lw:
            print(f"local Snowflake + simulator up in {time.perf_counter() - t0:.1f} s")
            client = lw.coalesce_client()
            client.list_nodes(ENV_ID, detail=False, limit=500)  # warm-up: connection, first parse
            nodes_path = f"/api/v1/environments/{ENV_ID}/nodes"

            print(f"\nlist_nodes, every page followed (best of {args.repeat}):")
            print(f"  {'detail':>6} {'limit':>5} {'pages':>5} {'seconds':>8} {'pages/s':>8} {'nodes/s':>8}"
                  f" {'ms/page':>8} {'raw httpx s':>11} {'client/raw':>10}")  # fmt: skip
            for detail, limit in [(False, 100), (False, 500), (True, 50), (True, 100), (True, 500)]:
                seconds, nodes = best_of(
                    args.repeat, lambda: client.list_nodes(ENV_ID, detail=detail, limit=limit)
                )
                assert len(nodes) == args.nodes  # type: ignore[arg-type]
                pages = math.ceil(args.nodes / limit)
                params = {"detail": str(detail).lower(), "limit": limit, "orderBy": "id"}
                raw, _ = best_of(args.repeat, lambda: raw_pages(lw.coalesce_url, nodes_path, params))
                print(f"  {str(detail):>6} {limit:>5} {pages:>5} {seconds:>8.2f} {pages / seconds:>8.1f}"
                      f" {args.nodes / seconds:>8.0f} {1000 * seconds / pages:>8.1f} {raw:>11.2f}"
                      f" {seconds / raw:>9.2f}x")  # fmt: skip

            if args.runs:
                t0 = time.perf_counter()
                headers = {"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
                with httpx.Client(base_url=lw.coalesce_url, headers=headers, timeout=30) as http:
                    for _ in range(args.runs):
                        http.post("/_sim/deploy", json={"environmentID": ENV_ID}).raise_for_status()
                made = time.perf_counter() - t0
                print(f"\niter_runs over {args.runs} runs (deploy runs, created in {made:.1f} s; "
                      f"best of {args.repeat}):")  # fmt: skip
                print(
                    f"  {'limit':>5} {'pages':>5} {'seconds':>8} {'pages/s':>8} {'runs/s':>8} {'ms/page':>8}"
                )
                for limit in [25, 100, 1000]:
                    seconds, runs = best_of(
                        args.repeat,
                        lambda: list(
                            client.iter_runs(
                                environment_id=ENV_ID, order_by="id", order_by_direction="asc", limit=limit
                            )
                        ),  # fmt: skip
                    )
                    assert len(runs) == args.runs  # type: ignore[arg-type]
                    pages = math.ceil(args.runs / limit)
                    print(f"  {limit:>5} {pages:>5} {seconds:>8.2f} {pages / seconds:>8.1f}"
                          f" {args.runs / seconds:>8.0f} {1000 * seconds / pages:>8.1f}")  # fmt: skip
            client.close()


if __name__ == "__main__":
    main()
