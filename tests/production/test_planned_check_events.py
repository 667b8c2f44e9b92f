"""The deployment's event log storages (dw_dagster/event_log) store a run's planned check events exactly as
Dagster's own path does, on Dagster's sqlite storage and on dagster-postgres: the runs' event logs, the
checks' execution records (every column but the database's own insert time), what the UI reads of them (the
check "in progress", its history, its summary), and after the runs the same records completed by the
evaluations. With ``DAGSTER_EVENT_BATCH_SIZE`` set they write a checks run's planned events as one batch,
which Dagster stores one at a time; a batch of other events is Dagster's. They reach into Dagster's private
row builders, so this is the test that fails when Dagster's internals change."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.events import DagsterEventType
from dagster._core.execution.api import execute_run
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from dagster._core.test_utils import freeze_time, instance_for_test
from postgres_server import postgres_server
from storages import storage_instance

from dw_local.instance_storage import deployment_storage

PLANNED = DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED
DAYS = dg.StaticPartitionsDefinition(["2026-11-30", "2026-12-01", "2026-12-02"])
NODES = [dg.AssetSpec(["stage", f"node_{i}"]) for i in range(12)]


@dg.multi_asset_check(specs=[dg.AssetCheckSpec("volume", asset=n.key) for n in NODES], can_subset=True)
def volume(context):
    for key in sorted(context.selected_asset_check_keys):
        # node_3 fails: the records end both SUCCEEDED and FAILED.
        passed = key.asset_key.path[-1] != "node_3"
        yield dg.AssetCheckResult(
            asset_key=key.asset_key, check_name=key.name, passed=passed, metadata={"n": 1}
        )


@dg.asset(partitions_def=DAYS)
def daily() -> int:
    return 1


@dg.multi_asset_check(
    specs=[dg.AssetCheckSpec(name, asset=daily, partitions_def=DAYS) for name in ("rows", "freshness")],
    can_subset=True,
)
def daily_checks(context):
    for key in sorted(context.selected_asset_check_keys):
        yield dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=True)


JOB = (
    dg.Definitions(
        assets=[*NODES, daily], asset_checks=[volume, daily_checks], executor=dg.in_process_executor
    )
    .get_repository_def()
    .get_implicit_global_asset_job_def()
)
CHECK_KEYS = sorted(JOB.asset_layer.asset_graph.asset_check_keys)
# (run id, assets, checks, tags): a checks-only run (one batch of planned check events), the same over a range
# of partitions (an execution record per partition), and an asset with its checks (a batch of two event
# types, which the deployment's storage leaves to Dagster).
RUNS = [
    ("00000000-0000-0000-0000-000000000001", set(), set(volume.check_keys), {}),
    ("00000000-0000-0000-0000-000000000002", set(), set(daily_checks.check_keys),
     {ASSET_PARTITION_RANGE_START_TAG: "2026-11-30", ASSET_PARTITION_RANGE_END_TAG: "2026-12-01"}),
    ("00000000-0000-0000-0000-000000000003", {daily.key}, set(daily_checks.check_keys),
     {"dagster/partition": "2026-12-02"}),
]  # fmt: skip


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def dagster_event_types_stored_one_at_a_time(monkeypatch: pytest.MonkeyPatch, storage) -> list:
    """Records the type of each event Dagster's own ``store_event`` stores on ``storage`` from now on."""
    dagster_class = next(c for c in type(storage).__mro__ if c.__module__.startswith(("dagster.", "dagster_postgres.")))  # fmt: skip
    store_event, stored = dagster_class.store_event, []

    def recorded(self, event) -> None:
        stored.append(event.dagster_event_type)
        store_event(self, event)

    monkeypatch.setattr(dagster_class, "store_event", recorded)
    return stored


def without_insert_time(record):
    return record._replace(create_timestamp=None)


def what_readers_see(instance: dg.DagsterInstance, executed: bool) -> dict:
    """What the UI and Dagster's daemons read of the checks; of the runs' logs, once ``executed``, the
    storage id and type of each event (their engine events carry measured durations)."""
    storage = instance.event_log_storage
    table = AssetCheckExecutionsTable
    with storage.index_connection() as conn:
        rows = conn.execute(sa.select(table).order_by(table.c.id)).fetchall()
    summaries = storage.get_asset_check_summary_records(CHECK_KEYS)
    return {
        # create_timestamp is the database's clock at insert, not the event's.
        "execution records": [{k: v for k, v in r._mapping.items() if k != "create_timestamp"} for r in rows],
        "history": [
            [without_insert_time(r) for r in storage.get_asset_check_execution_history(k, limit=10)]
            for k in CHECK_KEYS
        ],
        "latest": {
            k: without_insert_time(r)
            for k, r in storage.get_latest_asset_check_execution_by_key(CHECK_KEYS).items()
        },
        "summaries": {
            k: (without_insert_time(s.last_check_execution_record), s.last_run_id)
            for k, s in summaries.items()
            if s.last_check_execution_record
        },
        # In no set order across runs on sqlite (each run's log is a file of its own).
        "planned events": sorted(
            storage.get_event_records(dg.EventRecordsFilter(event_type=PLANNED), limit=1000),
            key=lambda r: (r.run_id, r.storage_id),
        ),
        "run logs": [
            [(r.storage_id, r.event_log_entry.dagster_event_type) if executed else r for r in records]
            for records in (storage.get_records_for_run(run_id, limit=10_000).records for run_id, *_ in RUNS)
        ],
    }


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_planned_check_events_are_stored_as_dagster_stores_them(kind, request, tmp_path, monkeypatch) -> None:
    url = request.getfixturevalue("postgres") if kind == "postgres" else None
    seen, one_at_a_time = {}, {}
    for deployment in (False, True):
        home = tmp_path / ("deployment" if deployment else "dagster")
        with storage_instance(home, url, deployment) as instance, freeze_time(1_764_633_600.0):
            if deployment:
                assert type(instance.event_log_storage).__module__ == f"dw_dagster.event_log.{kind}"
                monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
            stored = dagster_event_types_stored_one_at_a_time(monkeypatch, instance.event_log_storage)
            for run_id, assets, checks, tags in RUNS:
                job = JOB.get_subset(asset_selection=assets, asset_check_selection=checks)
                instance.create_run_for_job(job, run_id=run_id, tags=tags)
            one_at_a_time[deployment] = stored.count(PLANNED)
            planned = what_readers_see(instance, executed=False)
            for run_id, assets, checks, _ in RUNS:
                job = JOB.get_subset(asset_selection=assets, asset_check_selection=checks)
                execute_run(InMemoryJob(job), instance.get_run_by_id(run_id), instance)
            seen[deployment] = {"planned": planned, "evaluated": what_readers_see(instance, executed=True)}
            monkeypatch.undo()

    # Dagster stores each planned check event one at a time; the deployment's storage only the two of the
    # run with an asset (a batch of several event types).
    assert one_at_a_time == {False: 12 + 2 + 2, True: 2}
    dagster, deployment = seen[False], seen[True]
    records = dagster["planned"]["execution records"]
    assert len(records) == 12 + 2 * 2 + 2 and {r["execution_status"] for r in records} == {"PLANNED"}
    assert {r["execution_status"] for r in dagster["evaluated"]["execution records"]} >= {
        "SUCCEEDED",
        "FAILED",
    }
    assert len(dagster["planned"]["planned events"]) == 12 + 2 + 2
    for stage in ("planned", "evaluated"):
        for what in dagster[stage]:
            assert deployment[stage][what] == dagster[stage][what], (stage, what)


def test_without_the_setting_the_deployments_storage_leaves_the_planned_events_to_dagster(
    tmp_path, monkeypatch
):
    """``batch_planned_check_events`` is off unless the instance configures it: the deployment's sqlite
    storage then stores a checks run's planned events as Dagster does, one at a time."""
    overrides = deployment_storage(tmp_path)
    del overrides["event_log_storage"]["config"]["batch_planned_check_events"]
    with instance_for_test(overrides=overrides, temp_dir=str(tmp_path)) as instance:
        assert type(instance.event_log_storage).__name__ == "BatchedSqliteEventLogStorage"
        assert not instance.event_log_storage.batch_planned_check_events
        monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
        stored = dagster_event_types_stored_one_at_a_time(monkeypatch, instance.event_log_storage)
        run_id, assets, checks, tags = RUNS[0]
        job = JOB.get_subset(asset_selection=assets, asset_check_selection=checks)
        instance.create_run_for_job(job, run_id=run_id, tags=tags)
        assert stored.count(PLANNED) == 12
