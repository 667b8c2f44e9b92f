"""The run sensor's requests survive a daemon killed at any point of its tick: Dagster's own sensor daemon
(one iteration per process, over a gRPC code server that outlives it, as in a deployment) is killed with
SIGKILL at each of its crash points, by its debug crash flags, then run again. Each Coalesce run ends with exactly one checks run, its events stored
once, and the cursor past it: the tick stores its run requests with the new cursor before it submits them,
and an interrupted tick is resumed (or re-evaluated from the old cursor) on the daemon's next iteration."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from deployment import Deployment

from dw_dagster.app.commands.ops import migrate_deployment
from dw_dagster.app.project import refresh_coalesce_state
from dw_dagster.coalesce.cursor import CoalesceRunSensorCursor
from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.tags import COALESCE_RUN_ID
from dw_local.daemon import dagster_home
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world
REPO = Path(__file__).resolve().parents[2]
RUN_SENSOR = "coalesce_run_sensor"
ITERATION = Path(__file__).with_name("sensor_iteration.py")


class Daemon:
    """Dagster's sensor daemon over the world, one iteration per process, against a code server of its own."""

    def __init__(self, lw, root: Path):
        self.lw = lw
        self.home = dagster_home(lw.root)
        os.environ.update(lw.env())
        migrate_deployment()
        self.deployment = Deployment(root, lw, home=self.home)
        self.env = self.deployment.env
        self.instance = self.deployment.instance
        refresh_coalesce_state(self.instance)
        self.clock = time.time()
        self.nights = 60  # the seeded world's history played nights 0-59

    def iterate(self, crash_at: str | None = None) -> int:
        # Each iteration a sensor interval later on the daemon's clock, so the sensor is due.
        self.clock += 120
        args = [sys.executable, str(ITERATION), str(self.home), str(self.deployment.workspace),
                "--sensor", RUN_SENSOR, "--at", str(self.clock)]  # fmt: skip
        if crash_at:
            args += ["--crash-at", crash_at]
        out = subprocess.run(args, env=self.env, cwd=REPO, capture_output=True, text=True, timeout=300)
        if crash_at is None:
            assert out.returncode == 0, out.stderr[-3000:]
        return out.returncode

    def checks_runs(self, coalesce_run_id: int) -> list[dg.DagsterRun]:
        return list(self.instance.get_runs(dg.RunsFilter(tags={COALESCE_RUN_ID: str(coalesce_run_id)})))

    def cursor(self) -> CoalesceRunSensorCursor:
        (state,) = [s for s in self.instance.all_instigator_state() if s.name == RUN_SENSOR]
        return CoalesceRunSensorCursor.parse(state.instigator_data.cursor)

    def stored_events(self, asset: str, coalesce_run_id: int) -> int:
        records = self.instance.fetch_materializations(dg.AssetKey.from_user_string(asset), limit=50).records
        return sum(
            1
            for r in records
            if CoalesceRunMetadataSet.extract(r.asset_event.metadata).run_id == coalesce_run_id
        )


@pytest.fixture(scope="module")
def daemon(seeded_world, tmp_path_factory) -> Iterator[Daemon]:
    d = Daemon(seeded_world, tmp_path_factory.mktemp("crash_points"))
    try:
        d.deployment.start("code-server")
        d.deployment.wait("the code server", d.deployment.code_server_up, timeout=300, every=1)
        yield d
    finally:
        d.deployment.stop()


@pytest.mark.parametrize("crash_at", ["RUN_IDS_RESERVED", "RUN_CREATED", "RUN_LAUNCHED"])
def test_a_daemon_killed_mid_tick_loses_no_checks_run_and_requests_none_twice(daemon: Daemon, crash_at: str):
    night = DistributorWorld().play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), daemon.nights)
    daemon.nights += 1
    assert night.run_id is not None and night.status == "completed"
    assert daemon.iterate(crash_at) == -9, f"the daemon was not killed at {crash_at}"
    daemon.iterate()
    daemon.iterate()  # a further tick requests nothing more
    (run,) = daemon.checks_runs(night.run_id)
    assert run.status == dg.DagsterRunStatus.QUEUED  # submitted to the queue, which this test does not run
    assert night.run_id not in daemon.cursor().environments["2"].pending
    assert daemon.cursor().environments["2"].high_water >= night.run_id
    assert daemon.stored_events("inventory/fct_inventory_position", night.run_id) == 1
