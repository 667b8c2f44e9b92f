"""``store_runless_asset_events`` stores what Dagster's ``report_runless_asset_event`` stores, on Dagster's
sqlite storage and on dagster-postgres, and on the deployment's (dw_dagster/event_log): the same event rows, asset keys, asset records (the catalog's latest
materialization and observation), latest materializations and indexed tags. It reaches into Dagster's
private storage methods (dw_dagster/coalesce/runless_store.py), so this is the test that fails when they
change. Here rather than in tests/coalesce for the Postgres server this folder's tests share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.utils import RUNLESS_RUN_ID
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.test_utils import freeze_time, instance_for_test
from postgres_server import postgres_server
from storages import storage_instance

from dw_dagster.coalesce import runless_store
from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.coalesce.runless_store import batch_storage_kind, store_runless_asset_events
from dw_dagster.coalesce.sensor_builder import unreported_asset_events

DATA_VERSION = "dagster/data_version"  # the one tag Dagster indexes for unpartitioned assets


def tick_events(run_id: int, n: int = 40) -> list[dg.AssetMaterialization | dg.AssetObservation]:
    """A tick's events: materializations, a data version tag on some, and observations (failed nodes) of
    assets that are materialized in the same tick too."""
    meta = CoalesceRunMetadataSet(run_id=run_id, environment_id="2")
    events: list[dg.AssetMaterialization | dg.AssetObservation] = [
        dg.AssetMaterialization(
            asset_key=["stage", f"node_{i}"],
            metadata={**meta, "dagster/row_count": i},
            tags={DATA_VERSION: f"v{run_id}.{i}"} if i % 3 == 0 else None,
        )
        for i in range(n)
    ]
    events += [
        dg.AssetObservation(asset_key=["stage", f"node_{i}"], metadata={**meta, "coalesce/status": "failed"})
        for i in range(0, n, 7)
    ]
    return events


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@contextmanager
def two_instances(
    kind: str, postgres_url: str | None, home: Path, deployment: bool
) -> Iterator[tuple[dg.DagsterInstance, dg.DagsterInstance]]:
    url = postgres_url if kind == "postgres" else None
    with (
        storage_instance(home / "reported", url, deployment) as a,
        storage_instance(home / "batched", url, deployment) as b,
    ):
        yield a, b


def stored(instance: dg.DagsterInstance) -> dict:
    """Everything a reader of the asset catalog and the event log gets back, storage ids included."""
    keys = sorted(instance.get_asset_keys(), key=lambda k: k.to_string())
    storage = instance.event_log_storage
    return {
        "asset keys": keys,
        "asset records": [
            (
                r.asset_entry.asset_key,
                r.asset_entry.last_materialization_record,
                r.asset_entry.last_observation_record,
                r.asset_entry.last_run_id,
                r.asset_entry.last_event_storage_id,
            )
            for r in instance.get_asset_records(keys)
        ],  # fmt: skip
        "latest materializations": [instance.get_latest_materialization_event(k) for k in keys],
        "materializations": [instance.fetch_materializations(k, limit=100).records for k in keys],
        "observations": [instance.fetch_observations(k, limit=100).records for k in keys],
        "runless run's log": storage.get_records_for_run(RUNLESS_RUN_ID, limit=10_000).records,
        "tags": [storage.get_event_tags_for_asset(k) for k in keys],
        "tagged": [storage.get_event_tags_for_asset(k, filter_tags={DATA_VERSION: "v2.3"}) for k in keys],
    }


@pytest.mark.parametrize("deployment", [False, True], ids=["dagster", "deployment"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_batch_stores_what_report_runless_asset_event_stores(
    kind: str, deployment: bool, request, tmp_path, monkeypatch
) -> None:
    """On Dagster's storages, and on the deployment's (dw_dagster/event_log: subclasses that leave the
    methods runless_store uses alone). On postgres the asset rows go in upserts of 7 rows here, so that a
    tick's rows span several statements as a large tick's do."""
    url = request.getfixturevalue("postgres") if kind == "postgres" else None
    monkeypatch.setattr(runless_store, "UPSERT_ROWS", 7)
    with two_instances(kind, url, tmp_path, deployment) as (reported, batched):
        assert batch_storage_kind(reported) == batch_storage_kind(batched) == kind
        # Two ticks: the second's assets already have records (Dagster's update path, not the insert).
        for run_id, second in ((1, 1_700_000_000.0), (2, 1_700_000_100.0)):
            events = tick_events(run_id)
            with freeze_time(second):
                for event in events:
                    reported.report_runless_asset_event(event)
                assert store_runless_asset_events(batched, events)
        expected, actual = stored(reported), stored(batched)
        assert len(expected["runless run's log"]) == 2 * len(tick_events(0))
        assert any(expected["tagged"]) and all(r is not None for r in expected["latest materializations"])
        for what in expected:
            assert actual[what] == expected[what], what

        # A tick replayed after the batch was stored (the cursor not saved) finds nothing to report again.
        assert unreported_asset_events(batched, tick_events(2)) == []
        assert unreported_asset_events(batched, tick_events(3)) == tick_events(3)


def test_another_storage_is_left_to_the_daemon() -> None:
    with dg.DagsterInstance.ephemeral() as instance:  # the in-memory event log: not verified, not used
        assert batch_storage_kind(instance) is None
        assert not store_runless_asset_events(instance, tick_events(1))
        assert not instance.get_asset_keys()


class AssetRowsOfItsOwn(SqliteEventLogStorage):
    """A storage that writes asset rows its own way: the rows runless_store writes would not be its rows."""

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> AssetRowsOfItsOwn:
        return cls(inst_data=inst_data, **config_value)

    def _store_asset_event(self, conn, event, event_id) -> None:
        super()._store_asset_event(conn, event, event_id)


def test_a_storage_overriding_what_the_batch_calls_is_left_to_the_daemon(tmp_path) -> None:
    with instance_for_test(overrides={"event_log_storage": {
        "module": __name__, "class": "AssetRowsOfItsOwn", "config": {"base_dir": str(tmp_path / "events")}
    }}) as instance:  # fmt: skip
        assert type(instance.event_log_storage) is AssetRowsOfItsOwn
        assert batch_storage_kind(instance) is None
        assert not store_runless_asset_events(instance, tick_events(1))
        assert not instance.get_asset_keys()
