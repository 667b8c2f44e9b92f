"""What creating a checks run costs by the number of its checks: Dagster's ``create_run`` logs one planned
event per check (issue 14, deliverable 2).

Builds a code location of N assets with one volume check each, in one multi-asset check as the product's
volume checks are, and creates the checks-only run of all N checks (``create_run_for_job``, as the daemon
creates a sensor's run request) on a fresh instance, three ways:

- Dagster's own event log storage: the planned events stored one at a time;
- the deployment's (dw_dagster/event_log) with ``DAGSTER_EVENT_BATCH_SIZE`` at the deployment's value (1000);
- the same with one batch for the whole run (``--batch`` to change it).

It prints the time of each and checks that every check has its planned execution record. Usage::

    .venv/bin/python benchmarks/bench_planned_check_events.py [--checks 2001] [--storage sqlite|postgres]
        [--batch 5000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import dagster as dg
from bench_sensor_tick import instance_storage, storage_config
from dagster._core.test_utils import instance_for_test

from dw_local.instance_storage import EVENT_BATCH_SIZE


def checks_job(n: int) -> dg.JobDefinition:
    """The checks-only job of ``n`` volume checks on ``n`` assets (one multi-asset check)."""
    specs = [dg.AssetSpec([f"L{i % 10:02d}", f"node_{i:05d}"]) for i in range(n)]

    @dg.multi_asset_check(specs=[dg.AssetCheckSpec("volume", asset=s.key) for s in specs], can_subset=True)
    def volume(context):
        for key in context.selected_asset_check_keys:
            yield dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=True)

    job = (
        dg.Definitions(assets=specs, asset_checks=[volume])
        .get_repository_def()
        .get_implicit_global_asset_job_def()
    )
    return job.get_subset(asset_selection=set(), asset_check_selection=set(volume.check_keys))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checks", type=int, default=2001)
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--batch", default="5000", help="the batch size of the third way")
    args = parser.parse_args()
    job = checks_job(args.checks)
    keys = sorted(job.asset_layer.asset_graph.asset_check_keys)
    ways = [("Dagster's storage, one at a time", False, None),
            (f"deployment's storage, batches of {EVENT_BATCH_SIZE}", True, EVENT_BATCH_SIZE),
            (f"deployment's storage, batches of {args.batch}", True, args.batch)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-planned-") as tmp, storage_config(args.storage) as storage:
        for i, (label, deployment, batch) in enumerate(ways):
            home = Path(tmp) / f"home_{i}"
            home.mkdir()
            os.environ.pop("DAGSTER_EVENT_BATCH_SIZE", None)
            if batch:
                os.environ["DAGSTER_EVENT_BATCH_SIZE"] = batch
            overrides = instance_storage(storage, home, deployment)
            with instance_for_test(overrides=overrides, temp_dir=str(home)) as instance:
                t0 = time.perf_counter()
                run = instance.create_run_for_job(job)
                took = time.perf_counter() - t0
                latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
                planned = sum(r.run_id == run.run_id and r.status.value == "PLANNED" for r in latest.values())
            print(f"{label:<44} create_run {took:6.2f} s; {planned} of {len(keys)} checks planned "
                  f"({type(instance.event_log_storage).__name__}, {args.storage})")  # fmt: skip


if __name__ == "__main__":
    main()
