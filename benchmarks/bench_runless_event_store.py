"""What storing a tick's runless asset events costs, by each path Dagster offers (issue 14, deliverable 2).

Stores N materializations of N distinct assets four ways and prints the time of each and whether every
asset's record (Dagster's asset table: the catalog's latest materialization) is right afterwards:

- ``report_runless_asset_event`` one at a time, as the sensor daemon stores a tick's ``asset_events``;
- ``store_event_batch`` of the ``EventLogEntry`` that call builds (one INSERT on dagster-postgres);
- ``store_event_batch`` followed by ``store_asset_event`` per event (the asset table row by row);
- ``store_runless_asset_events`` (dw_dagster/coalesce/runless_store.py): the rows and every asset row in one
  transaction (on sqlite one per shard), through Dagster's private ``_store_asset_event``.

Usage::

    .venv/bin/python benchmarks/bench_runless_event_store.py [--events 2000] [--storage sqlite|postgres]
"""

from __future__ import annotations

import argparse
import time

import dagster as dg
from bench_sensor_tick import storage_config
from dagster._core.event_api import EventLogCursor
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.utils import RUNLESS_RUN_ID
from dagster._core.test_utils import instance_for_test

from dw_dagster.coalesce.runless_store import runless_entry, store_runless_asset_events


def entry(key: str) -> EventLogEntry:
    return runless_entry(dg.AssetMaterialization(asset_key=key))


def asset_records_complete(instance: dg.DagsterInstance, keys: list[str]) -> str:
    records = instance.get_asset_records([dg.AssetKey(k) for k in keys])
    with_latest = sum(r.asset_entry.last_materialization_record is not None for r in records)
    return f"{with_latest} of {len(keys)} assets have their latest materialization"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    n = args.events
    with storage_config(args.storage) as overrides, instance_for_test(overrides=overrides) as instance:
        storage = instance.event_log_storage
        keys = [f"one_{i}" for i in range(n)]
        t0 = time.perf_counter()
        for key in keys:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key))
        print(
            f"one at a time:            {time.perf_counter() - t0:6.2f} s; {asset_records_complete(instance, keys)}"
        )

        keys = [f"batch_{i}" for i in range(n)]
        t0 = time.perf_counter()
        storage.store_event_batch([entry(k) for k in keys])
        print(
            f"store_event_batch:        {time.perf_counter() - t0:6.2f} s; {asset_records_complete(instance, keys)}"
        )

        keys = [f"rows_{i}" for i in range(n)]
        before = EventLogCursor.from_storage_id(storage.get_maximum_record_id() or 0).to_string()
        t0 = time.perf_counter()
        storage.store_event_batch([entry(k) for k in keys])
        for record in storage.get_records_for_run(RUNLESS_RUN_ID, cursor=before, limit=n).records:
            storage.store_asset_event(record.event_log_entry, record.storage_id)
        print(
            f"batch + asset table rows: {time.perf_counter() - t0:6.2f} s; {asset_records_complete(instance, keys)}"
        )

        keys = [f"txn_{i}" for i in range(n)]
        t0 = time.perf_counter()
        assert store_runless_asset_events(instance, [dg.AssetMaterialization(asset_key=k) for k in keys])
        print(
            f"runless_store (one transaction): {time.perf_counter() - t0:6.2f} s; "
            f"{asset_records_complete(instance, keys)}"
        )


if __name__ == "__main__":
    main()
