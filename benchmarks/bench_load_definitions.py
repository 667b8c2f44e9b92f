"""Loading the code location's definitions for a synthetic Coalesce environment of N nodes, side by side
with bare Dagster building the same specs from the same nodes.

Writes a workspace state of N nodes (10 columns each, column lineage to 1-3 parents, a join per node, 20 jobs
with location selectors) into a Dagster instance's definitions state, as ``dw-dagster coalesce refresh``
keeps it. Then, round after round, each in a fresh process (as a code server or a run worker starts):

- **bare**: what bare Dagster needs to load the same nodes: the state read and validated into the same
  node records, one plain ``dg.AssetSpec`` per node with the same key, deps, description, group, kinds,
  table name, column schema and column lineage (no ``coalesce/*`` metadata, no components, no product
  layer), then the repository built (``Definitions.get_repository_def``, the asset graph). It pauses the
  cyclic collector while it reads the state and makes the specs, as the product's loader does, so the two
  compare work, not the collector (which, left on, takes most of a load this size).
- **components**: Dagster's floor for a component: the same plain specs from the same state, made by the
  smallest ``StateBackedComponent`` a ``defs.yaml`` declares (in a project of its own) and loaded by
  Dagster's own component tree, then the repository. What it costs beyond **bare** is what Dagster's
  components add by themselves (the ``defs.yaml`` code references and component origin copied onto every
  asset, the component library's JSON, the tree), which the product, declared as the brief requires, pays
  too; the product's own cost is its ratio to this floor.
- **product**: the code server's load: Dagster's own initial load of ``dw_dagster.definitions`` (the
  component tree, the Coalesce state from the instance's storage, every layer) up to the repository.
- with ``--run-worker``, **worker**: what a run worker does before its first step, with the load data the
  code server's load recorded (the state versions it pinned): the checks run's job, its subset and its
  execution plan (``dagster api execute_run``: ``core_execute_run`` and ``execute_run_iterator``). This
  needs jobs and checks, so ``--run-worker`` loads the production shape: a warehouse database, a metrics
  file with the volume check on one location's nodes and every job scheduled, and a context file whose
  owner rules give every node its owning team (one location's its own) and whose system feeds a node.

Each process imports its modules before the clock starts; the figures are the load alone. Rounds
alternate the loads so that each round's ratio compares loads made under the same machine load; the
summary gives each load's median and the median of the rounds' ratios, and the load average. Each load's
CPU time is given beside its wall time, and the ratio of CPU times beside the wall ratio: on a machine shared
with other work the wall time stretches with the load average, the CPU time much less.
``--profile`` prints the product load's profile (cProfile, cumulative) instead; with ``--run-worker``, the
run worker's. Run:

    .venv/bin/python benchmarks/bench_load_definitions.py [--nodes 10000] [--rounds 3] [--schedules]
        [--run-worker] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import yaml
from dagster.components.utils.defs_state import DefsStateConfig, DefsStateConfigArgs

from dw_dagster.app.checks import CHECKS_JOB
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceJob, CoalesceNode

LOCATIONS = [f"LOC_{i:02d}" for i in range(20)]
ENTRY_MODULE = "dw_dagster.definitions"
# The production shape's context file: a team owns one location, another every other node, as a deployment's
# catch-all owner rule does; a replication feeds the first source node.
CONTEXT = """
teams:
  analytics: {name: Analytics, slack_channel: "#analytics"}
  platform: {name: Data platform, slack_channel: "#platform"}
systems:
  - {key: crm/accounts_export, name: CRM accounts export, kind: replication, owners: [platform],
     feeds: [loc_00/node_00000]}
coalesce_owners:
  - {match: "loc_00/*", owners: [platform]}
  - {match: "*", owners: [analytics]}
"""


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


# -- bare Dagster ------------------------------------------------------------------------------------------


def bare_dagster_definitions(data: CoalesceWorkspaceData) -> dg.Definitions:
    """One plain ``AssetSpec`` per node, as bare Dagster would declare the same tables: the key, deps,
    description, group and kinds the translator gives, the table name, the column schema (constraints from
    the column tests) and the column lineage; nothing else."""
    specs = []
    for env in data.environments:
        by_name = {(n.location_name or "", n.name): n for n in env.nodes}
        by_id = {n.id: n for n in env.nodes}
        column_names = {c.column_id: c.name for n in env.nodes for c in n.metadata.columns}
        keys = {
            n.id: dg.AssetKey([(n.location_name or "coalesce").lower(), n.name.lower()]) for n in env.nodes
        }
        for node in env.nodes:
            parents = {
                p.id: p
                for m in node.metadata.source_mapping
                for d in m.dependencies
                if (p := by_name.get((d.location_name, d.node_name))) is not None
            }
            lineage = {
                column.name: [
                    dg.TableColumnDep(asset_key=keys[r.node_id], column_name=column_names[r.column_id])
                    for s in column.sources
                    for r in s.column_references
                    if r.node_id in by_id and r.column_id in column_names
                ]
                for column in node.metadata.columns
            }
            lineage = {c: deps for c, deps in lineage.items() if deps}
            schema = dg.TableSchema(
                columns=[
                    dg.TableColumn(
                        name=c.name,
                        type=c.data_type,
                        description=c.description,
                        constraints=dg.TableColumnConstraints(
                            nullable=c.nullable and "notNull" not in node.metadata.column_tests(c),
                            unique=c.unique_key or c.primary_key or "unique" in node.metadata.column_tests(c),
                        ),
                    )
                    for c in node.metadata.columns
                ]
            )
            metadata = {
                "dagster/table_name": ".".join(p for p in (node.database, node.schema_name, node.name) if p),
                "dagster/column_schema": schema,
            }
            if lineage:
                metadata["dagster/column_lineage"] = dg.TableColumnLineage(deps_by_column=lineage)
            specs.append(
                dg.AssetSpec(
                    key=keys[node.id],
                    deps=[keys[p] for p in parents],
                    description=node.description or f"Coalesce {node.node_type} node {node.name}",
                    group_name=(node.location_name or "coalesce").lower(),
                    kinds={"coalesce", "snowflake"},
                    metadata=metadata,
                )
            )
    return dg.Definitions(assets=specs)


def bare_from_state(state: Path) -> dg.Definitions:
    collecting = gc.isenabled()
    gc.disable()
    try:
        return bare_dagster_definitions(CoalesceWorkspaceData.parse(state.read_text(), str(state)))
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def load_bare(state: Path) -> dg.RepositoryDefinition:
    return bare_from_state(state).get_repository_def()


# -- Dagster's components, with nothing of the product --------------------------------------------------

FLOOR_KEY = "PlainNodesComponent"
FLOOR_MODULE = "bench_components_floor"


class PlainNodesComponent(dg.StateBackedComponent, dg.Model, dg.Resolvable):
    """The bare specs as the smallest state-backed component makes them, the state from the instance's
    storage as the product's is. Given the product's two savings, so that the floor is Dagster's and not a
    naive component's: the specs as one assets definition (Dagster's components copy each loose spec again
    to add their metadata), and no cyclic collection while the tree builds (:func:`load_components_floor`)."""

    @property
    def defs_state_config(self) -> DefsStateConfig:
        return DefsStateConfig.from_args(DefsStateConfigArgs.versioned_state_storage(), default_key=FLOOR_KEY)

    def write_state_to_path(self, state_path: Path) -> None:
        raise NotImplementedError("the benchmark stores the state itself")

    def build_defs_from_state(
        self, context: dg.ComponentLoadContext, state_path: Path | None
    ) -> dg.Definitions:
        if state_path is None:
            raise RuntimeError(f"no state stored under {FLOOR_KEY}")
        specs = [s for s in bare_from_state(state_path).assets or [] if isinstance(s, dg.AssetSpec)]
        return dg.Definitions(assets=[dg.AssetsDefinition(specs=specs)])


def write_floor_project(root: Path) -> Path:
    """A project of one ``defs.yaml`` declaring :class:`PlainNodesComponent` (imported from this file)."""
    package = root / FLOOR_MODULE
    (package / "defs" / "nodes").mkdir(parents=True)
    (root / "dg.toml").write_text(
        f'directory_type = "project"\n\n[project]\nroot_module = "{FLOOR_MODULE}"\n'
        f'defs_module = "{FLOOR_MODULE}.defs"\n'
    )
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "defs" / "nodes" / "defs.yaml").write_text(
        f"type: {Path(__file__).stem}.{PlainNodesComponent.__name__}\n"
    )
    return root


def load_components_floor(instance: dg.DagsterInstance, project: Path) -> dg.RepositoryDefinition:
    from dagster._core.storage.defs_state.base import set_defs_state_storage
    from dagster.components.core.component_tree import ComponentTree

    collecting = gc.isenabled()
    gc.disable()
    try:
        with set_defs_state_storage(instance.defs_state_storage):
            defs = ComponentTree.for_project(project).build_defs()
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    return defs.get_repository_def()


# -- the product, as Dagster's processes load it ----------------------------------------------------------


def _pointer():
    from dagster._core.code_pointer import ModuleCodePointer

    return ModuleCodePointer(ENTRY_MODULE, "defs", os.getcwd())


def load_product(instance: dg.DagsterInstance):
    """The code server's initial load (``dagster api grpc -m dw_dagster.definitions``): the instance's
    defs-state storage current, Dagster's own loader from the module."""
    from dagster._core.definitions.reconstruct import initialize_repository_def_from_pointer
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(instance.defs_state_storage):
        return initialize_repository_def_from_pointer(_pointer())


def run_worker_plan(instance: dg.DagsterInstance, load_data, job_name: str, checks) -> int:
    """What ``dagster api execute_run`` does before the first step of a checks run: the job with the code
    server's load data, then its subset and the execution plan (``core_execute_run``,
    ``execute_run_iterator``). Returns the plan's step count."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.execution.api import create_execution_plan
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(instance.defs_state_storage):
        repo = ReconstructableRepository(_pointer()).with_repository_load_data(load_data)
        recon_job = repo.get_reconstructable_job(job_name)
        recon_job.get_definition()
        subset = recon_job.get_subset(asset_selection=set(), asset_check_selection=set(checks))
        plan = create_execution_plan(subset, repository_load_data=load_data)
    return len(plan.step_keys_to_execute)


# -- one measurement per process ---------------------------------------------------------------------------


def child(kind: str, home: Path, state: Path, profile: bool) -> dict:
    # Every module the load uses, imported before the clock starts: Dagster's components import jinja2 (the
    # defs.yaml templates) and tomlkit (the project's dg.toml) on first use, inside the product's load.
    import jinja2  # noqa: F401
    import tomlkit  # noqa: F401
    from dagster_shared.serdes import deserialize_value, serialize_value

    import dw_dagster.app.components  # noqa: F401
    import dw_dagster.definitions  # noqa: F401

    instance = dg.DagsterInstance.get()
    if kind == "bare":
        t0, c0 = time.perf_counter(), time.process_time()
        repo = load_bare(state)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"seconds": elapsed, "cpu": cpu, "assets": len(repo.asset_graph.get_all_asset_keys())}
    if kind == "components":
        sys.path.insert(0, str(home / "floor"))
        # The defs.yaml names the component by this file's module name, which this process runs as __main__:
        # imported once more, before the clock, as every other module the load uses.
        importlib.import_module(Path(__file__).stem)
        t0, c0 = time.perf_counter(), time.process_time()
        repo = load_components_floor(instance, home / "floor")
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"seconds": elapsed, "cpu": cpu, "assets": len(repo.asset_graph.get_all_asset_keys())}
    if kind == "product":
        if profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.enable()
            load_product(instance)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
            return {}
        t0, c0 = time.perf_counter(), time.process_time()
        repo = load_product(instance)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        checks = sorted(repo.asset_graph.asset_check_keys)
        (home / "load_data").write_text(serialize_value(repo.repository_load_data))
        (home / "checks").write_text(serialize_value(checks))
        return {
            "seconds": elapsed,
            "cpu": cpu,
            "assets": len(repo.asset_graph.get_all_asset_keys()),
            "checks": len(checks),
        }
    load_data = deserialize_value((home / "load_data").read_text())
    checks = deserialize_value((home / "checks").read_text())
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        run_worker_plan(instance, load_data, CHECKS_JOB, checks)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
        return {}
    t0, c0 = time.perf_counter(), time.process_time()
    steps = run_worker_plan(instance, load_data, CHECKS_JOB, checks)
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "steps": steps}


def run_child(kind: str, home: Path, state: Path, env: dict[str, str], profile: bool = False) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--home", str(home), "--state", str(state)]
        + (["--profile"] if profile else []),
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{kind} load failed:\n{out.stderr[-4000:]}")
    if profile:
        print(out.stdout)
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--schedules", action="store_true", help="a metrics file scheduling every job (freshness policies)"
    )
    parser.add_argument(
        "--run-worker",
        action="store_true",
        help="the production shape (warehouse, checks, schedules), and a run worker's load of the checks run",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print the product load's profile (the worker's with --run-worker)",
    )
    parser.add_argument(
        "--child", choices=["bare", "components", "product", "worker"], help=argparse.SUPPRESS
    )
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.home, args.state, args.profile)))
        return

    from dw_dagster.app.project import coalesce_components

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        state = Path(tmp) / "state"
        state.write_text(synthetic_workspace(args.nodes).serialize())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DW_", "COALESCE_", "SNOWFLAKE_"))}
        env.update(DAGSTER_HOME=str(home), COALESCE_ENVIRONMENT_IDS="2")
        metrics: dict = {}
        if args.schedules or args.run_worker:
            schedules = {
                f"job_{j}": {"cron": f"0 {j % 24} * * *", "timezone": "America/Chicago", "grace_minutes": 60}
                for j in range(len(LOCATIONS))
            }
            metrics["freshness"] = {"schedules": schedules}
        if args.run_worker:
            metrics["volume"] = {"assets": [f"{LOCATIONS[0].lower()}/*"]}
            (Path(tmp) / "context.yaml").write_text(CONTEXT)
            env["DW_CONTEXT_FILE"] = str(Path(tmp) / "context.yaml")
            env.update(
                SNOWFLAKE_DATABASE="DW",
                SNOWFLAKE_ACCOUNT="bench",
                SNOWFLAKE_USER="bench",
                SNOWFLAKE_PASSWORD="bench",
            )
        if metrics:
            (Path(tmp) / "metrics.yaml").write_text(yaml.safe_dump(metrics))
            env["DW_METRICS_FILE"] = str(Path(tmp) / "metrics.yaml")
        os.environ.update(env)
        # The state where `dw-dagster coalesce refresh` keeps it: the instance's definitions state.
        with dg.DagsterInstance.get() as instance:
            (component,) = coalesce_components()
            for key in (component.defs_state_config.key, FLOOR_KEY):
                instance.defs_state_storage.upload_state_from_path(key, "bench", state)
        write_floor_project(home / "floor")
        if args.profile:
            if args.run_worker:  # the code server's load first: the worker reads the load data it wrote
                run_child("product", home, state, env)
            run_child("worker" if args.run_worker else "product", home, state, env, profile=True)
            return
        kinds = ["bare", "components", "product", *(["worker"] if args.run_worker else [])]
        figures: dict[str, list[dict]] = {k: [] for k in kinds}
        loads = []
        for r in range(args.rounds):
            for kind in kinds if r % 2 == 0 else [kinds[2], kinds[1], kinds[0], *kinds[3:]]:
                figures[kind].append(run_child(kind, home, state, env))
            loads.append(os.getloadavg()[0])
            line = ", ".join(
                f"{k} {figures[k][-1]['seconds']:.2f} s (CPU {figures[k][-1]['cpu']:.2f} s)" for k in kinds
            )
            wall, cpu, floor = (
                figures[a][-1][m] / figures[b][-1][m]
                for a, b, m in (
                    ("product", "bare", "seconds"),
                    ("product", "bare", "cpu"),
                    ("components", "bare", "seconds"),
                )
            )
            print(
                f"round {r + 1}: {line}; product/bare {wall:.2f}x, CPU {cpu:.2f}x, components/bare {floor:.2f}x "
                f"(load {loads[-1]:.1f})"
            )
        product = figures["product"][-1]
        shape = (
            f", {product['checks']} checks, every job scheduled, every node owned, a warehouse"
            if args.run_worker
            else (f", {len(LOCATIONS)} jobs scheduled" if args.schedules else "")
        )
        print(
            f"nodes: {args.nodes}, state file: {state.stat().st_size / 1e6:.1f} MB{shape}; {product['assets']} assets"
        )
        median = {k: statistics.median(f["seconds"] for f in figures[k]) for k in kinds}
        median_cpu = {k: statistics.median(f["cpu"] for f in figures[k]) for k in kinds}

        def of_rounds(a: str, b: str, measure: str) -> list[float]:
            return [x[measure] / y[measure] for x, y in zip(figures[a], figures[b], strict=True)]

        def said(rs: list[float]) -> str:
            return f"median {statistics.median(rs):.2f}x (rounds: {', '.join(f'{r:.2f}x' for r in rs)})"

        print(
            f"bare Dagster (same nodes, plain specs, repository): median {median['bare']:.2f} s "
            f"(CPU {median_cpu['bare']:.2f} s)"
        )
        print(
            f"Dagster's components floor (the same specs from a state-backed component in a defs.yaml): median "
            f"{median['components']:.2f} s (CPU {median_cpu['components']:.2f} s)"
        )
        print(
            f"dw-dagster code server load: median {median['product']:.2f} s (CPU {median_cpu['product']:.2f} s)"
        )
        # On a machine shared with other work the wall time stretches with the load; a load's CPU time
        # much less so (only its own work counts), which makes the CPU ratio the steadier of the two. Each
        # ratio is the median of the rounds' own ratios (loads made under the same machine load).
        for a, b, what in (
            ("product", "bare", "dw-dagster to the bare-Dagster floor (goal <= 1.2x)"),
            ("components", "bare", "Dagster's components floor to bare Dagster"),
            ("product", "components", "dw-dagster to Dagster's components floor"),
        ):
            print(f"{what}: wall {said(of_rounds(a, b, 'seconds'))}; CPU {said(of_rounds(a, b, 'cpu'))}")
        if args.run_worker:
            print(
                f"run worker, checks run up to its plan ({figures['worker'][-1]['steps']} steps): median "
                f"{median['worker']:.2f} s, CPU {median_cpu['worker']:.2f} s "
                f"({median['worker'] / median['product']:.2f}x the code server's load)"
            )
        print(f"load average during the rounds: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
