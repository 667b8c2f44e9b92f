"""Warehouse statements when nothing happens, and per monitored table on an ordinary night (#14: goals 0 per
idle day, at most 1 per table per night).

On a private clone of the seeded distributor world, with every statement this process sends to Snowflake
recorded at the connector (``SnowflakeConnection.cmd_query``: what goes on the wire, session and query
tag):

1. one ordinary night: the Coalesce job runs, then one ``LocalDaemon.tick()`` (the run sensor, the
   checks-only run it requests, the incident and remediation sensors); the checks run's statements,
   measurement, history reads and writes and incidents included, divided by the tables its checks cover;
2. a simulated hour with nothing happening: every sensor the code location deploys is evaluated as the
   daemon would, once per its ``minimum_interval_seconds`` over 3,600 s (cursors carried from tick to
   tick, no sleeping), and its statements counted; times 24 for a day. Each sensor's first tick after the
   night (it acts on what the night's runs left) is printed apart and not counted.

Prints the breakdown, then as its last two lines the two figures. Nothing is asserted. Run:

    .venv/bin/python benchmarks/bench_idle_warehouse.py [--hour-seconds 3600]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import tempfile
import time
import types
import warnings
from collections import Counter
from pathlib import Path

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")
warnings.filterwarnings("ignore")
logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)

import dagster as dg  # noqa: E402
import phases  # noqa: E402
from phases import phase  # noqa: E402
from snowflake.connector.connection import SnowflakeConnection  # noqa: E402

from dw_local.daemon import LocalDaemon  # noqa: E402
from dw_local.seeding import clone_world, seeded_template  # noqa: E402
from dw_local.world import LocalWorld  # noqa: E402
from dw_local.worlds.distributor.generator import DistributorWorld  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DW_WORLD_CACHE", REPO / ".dw" / "cache"))

_sent: list[tuple[str, str]] = []
_original = SnowflakeConnection.cmd_query


def _recording(self, sql, *args, **kwargs):
    if phases.current is not None:
        _sent.append((phases.current, sql))
    return _original(self, sql, *args, **kwargs)


SnowflakeConnection.cmd_query = _recording  # type: ignore[method-assign]


class CountingDaemon(LocalDaemon):
    """LocalDaemon whose statements are attributed to the checks run or to the sensors."""

    def _execute_checks(self, request):
        with phase("checks run"):
            return super()._execute_checks(request)


def night(daemon: CountingDaemon) -> tuple[int, int]:
    lw = daemon.lw
    world = DistributorWorld()
    world.play_night(lw.snowflake, lw.coalesce_client(), world.last_played_night(lw.snowflake) + 1)
    start = len(_sent)
    with phase("night, outside the checks run"):
        outcome = daemon.tick()
    statements = _sent[start:]
    tables = {c.asset for c in outcome.checks}
    by_phase = Counter(p for p, _ in statements)
    print(
        f"ordinary night: {len(outcome.checks)} checks on {len(tables)} tables; statements: {dict(by_phase)}"
    )
    return by_phase["checks run"], len(tables)


def _evaluate(daemon: CountingDaemon, sensor: dg.SensorDefinition, cursors: dict[str, str | None]) -> int:
    """One tick as the daemon evaluates it (the cursor carried); returns the runs it requested."""
    with dg.build_sensor_context(
        instance=daemon.instance,
        repository_def=daemon.repo,
        resources=dict(daemon.defs.resources),
        cursor=cursors.get(sensor.name),
    ) as context:
        result = sensor(context)
        if isinstance(result, types.GeneratorType):
            result = list(result)  # a generator sensor does its work as it is iterated
        cursors[sensor.name] = (
            result.cursor if isinstance(result, dg.SensorResult) and result.cursor else context.cursor
        )
    if isinstance(result, dg.SensorResult):
        return len(result.run_requests or [])
    return sum(isinstance(r, dg.RunRequest) for r in result) if isinstance(result, list) else 0


def idle_hour(daemon: CountingDaemon, hour_seconds: int) -> Counter:
    cursors: dict[str, str | None] = {"coalesce_run_sensor": daemon.cursor}
    counts: Counter = Counter()
    requested = 0
    # Not idle: the deployed sensors' first tick after the night acts on what its runs left (the local
    # daemon keeps no cursor but the run sensor's); the hour is counted from the tick after it.
    polled = [s for s in daemon.defs.sensors or [] if not isinstance(s, dg.RunStatusSensorDefinition)]
    with phase("first tick after the night"):
        for sensor in polled:
            _evaluate(daemon, sensor, cursors)
    print(f"  first tick after the night: {sum(1 for p, _ in _sent if p == 'first tick after the night')} "
          "statements (not counted as idle)")  # fmt: skip
    for sensor in polled:  # a run-status sensor is evaluated on the event log's run-status events
        interval = sensor.minimum_interval_seconds or 30
        ticks = math.ceil(hour_seconds / interval)
        started = time.monotonic()
        with phase(sensor.name):
            for _ in range(ticks):
                requested += _evaluate(daemon, sensor, cursors)
        counts[sensor.name] = sum(1 for p, _ in _sent if p == sensor.name)
        print(
            f"  {sensor.name:<26} every {interval:>3} s: {ticks:>4} ticks, {counts[sensor.name]:>6} statements "
            f"({time.monotonic() - started:.0f} s)"
        )
    if requested:
        print(f"  (warning: the idle hour requested {requested} runs)")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hour-seconds", type=int, default=3600, help="the simulated span (default an hour)")
    args = parser.parse_args()
    template = seeded_template(CACHE)
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        root = clone_world(template, Path(tmp) / "world")
        with LocalWorld(root) as lw:
            daemon = CountingDaemon(lw)
            daemon.tick()  # catch up: the sensors' first ticks after the clone
            checks_statements, tables = night(daemon)
            print(f"idle: the deployed sensors over a simulated {args.hour_seconds} s, nothing happening")
            hour = idle_hour(daemon, args.hour_seconds)
    per_day = sum(hour.values()) * 86400 / args.hour_seconds
    print(f"statements per monitored table per night, history included: {checks_statements / tables:.2f}")
    print(f"statements per idle day: {per_day:.0f}")


if __name__ == "__main__":
    main()
