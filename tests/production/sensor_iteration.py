"""One iteration of Dagster's own sensor daemon over the code location of ``workspace.yaml``, in a process of
its own, killed with SIGKILL where Dagster's debug crash flags say (``--crash-at RUN_IDS_RESERVED``): what a
daemon killed at that point of the run sensor's tick leaves behind. Run by test_sensor_crash_points.py."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path

import dagster as dg
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster._daemon.sensor import execute_sensor_iteration


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("home")
    parser.add_argument("workspace")
    parser.add_argument("--sensor", required=True)
    parser.add_argument("--crash-at")
    parser.add_argument("--at", type=float, required=True, help="the daemon's clock, as a POSIX timestamp")
    args = parser.parse_args()
    flags = {args.sensor: {args.crash_at: signal.SIGKILL}} if args.crash_at else None
    with dg.DagsterInstance.from_config(args.home) as instance, freeze_time(args.at):
        target = WorkspaceFileTarget([str(Path(args.workspace))])
        with create_test_daemon_workspace_context(target, instance) as workspace:
            logger = logging.getLogger("SensorDaemon")
            for _ in execute_sensor_iteration(workspace, logger, None, None, debug_crash_flags=flags):
                pass


if __name__ == "__main__":
    main()
