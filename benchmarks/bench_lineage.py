"""Lineage walk and blast radius on a synthetic 10,000-node graph (goal: under 1 s).

Builds the asset specs of the synthetic environment of bench_load_definitions (10 columns per node, column
lineage to 1-3 parents), then times what a diagnosis does on the graph: build the LineageGraph (asset and
column graphs), walk upstream from a deep node, find the path from a source, trace a column back to the
source, and take the downstream set (the blast radius's assets, before any warehouse query). Run:

    .venv/bin/python benchmarks/bench_lineage.py [--nodes 10000]
"""

from __future__ import annotations

import argparse
import time

from bench_load_definitions import synthetic_workspace

from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.context.lineage import LineageGraph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10_000)
    args = parser.parse_args()
    specs = load_coalesce_asset_specs(synthetic_workspace(args.nodes))
    t0 = time.perf_counter()
    graph = LineageGraph(specs)
    built = time.perf_counter() - t0

    keys = [s.key.to_user_string() for s in specs]
    deep, shallow = keys[-1], keys[args.nodes // 10 + 1]
    t0 = time.perf_counter()
    upstream = graph.upstream(deep)
    source = next(k for k in sorted(upstream) if graph.info(k).node_type == "Source")
    path = graph.path(source, deep)
    traced = graph.trace_column((deep, "COL_1"), source)
    downstream = graph.downstream(shallow)
    walk = time.perf_counter() - t0

    print(f"nodes: {args.nodes}; column edges: {graph.columns.number_of_edges():,}")
    print(f"build lineage graph (assets + columns): {built:.2f} s")
    print(
        f"walk (upstream {len(upstream):,} nodes, path of {len(path)}, column trace "
        f"{'found' if traced else 'none'}, downstream {len(downstream):,} nodes): {walk:.3f} s (goal < 1 s)"
    )
    print(
        f"walk + build: {built + walk:.2f} s; the graph is built once per code-location load, not per incident"
    )


if __name__ == "__main__":
    main()
