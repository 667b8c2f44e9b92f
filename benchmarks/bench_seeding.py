"""Seconds per night of seeding a world template (what the test suite builds before its tests).

Starts the local world (Snowflake, Coalesce simulator, Slack stand-in) in a temp dir and plays ``--nights``
history nights exactly as ``dw_local.seeding.seed_history`` does for the distributor world (or a world file
given by ``--world path/to/world.yaml``): each night's Coalesce job on the simulator,
then the local daemon's tick (run sensor, checks run, incident sensor). Prints each night's time split into
playing the night and watching it, the statements the seeding process sent, the mean and median per night
over nights 1.. (night 0 also pays the first imports and the first checks run's start-up) and each server's
CPU, its start included.

``--profile FILE`` writes a cProfile of the seeding process (``python -m pstats FILE``); the servers are
separate processes (``py-spy record -p PID`` on the one in ``ps``). Nothing is asserted. Run:

    .venv/bin/python benchmarks/bench_seeding.py [--nights 8] [--world FILE] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")
warnings.filterwarnings("ignore")

import snowflake.connector.cursor  # noqa: E402

from dw_local.daemon import LocalDaemon  # noqa: E402
from dw_local.world import LocalWorld  # noqa: E402

STATEMENTS = [0]
_execute = snowflake.connector.cursor.SnowflakeCursor.execute


def _counting_execute(self, *args, **kwargs):
    STATEMENTS[0] += 1
    return _execute(self, *args, **kwargs)


snowflake.connector.cursor.SnowflakeCursor.execute = _counting_execute
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nights", type=int, default=8)
    parser.add_argument("--world", type=Path, help="a world file (default: the distributor world)")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the seeding process here")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-seeding-")) / "world"
    if args.world:
        from dw_local.scenarios.worlds import FileScenarioWorld

        scenario_world = FileScenarioWorld(args.world)
        world, env, lw = scenario_world.world, scenario_world.env(), scenario_world.local_world(root)
        name = scenario_world.name
    else:
        from dw_local.worlds.distributor.generator import DistributorWorld

        world, env, lw, name = DistributorWorld(), {}, LocalWorld(root), "distributor"

    started = time.perf_counter()
    with lw:
        print(f"{name}: servers up in {time.perf_counter() - started:.1f} s", flush=True)
        profile = cProfile.Profile() if args.profile else None
        if profile:
            profile.enable()
        t = time.perf_counter()
        world.install(lw.snowflake)
        daemon = LocalDaemon(lw, env=env)
        daemon.tick()
        print(f"install + daemon start + first tick: {time.perf_counter() - t:.1f} s", flush=True)
        coalesce = lw.coalesce_client()
        per_night = []
        for night in range(args.nights):
            STATEMENTS[0] = 0
            t0 = time.perf_counter()
            result = world.play_night(lw.snowflake, coalesce, night)
            t1 = time.perf_counter()
            played_statements = STATEMENTS[0]
            outcome = daemon.tick(at=result.watched_at)
            t2 = time.perf_counter()
            ok = result.status == "completed" and outcome.runs_requested == 1 and not outcome.errored()
            per_night.append(t2 - t0)
            print(
                f"night {night}: {t2 - t0:5.2f} s (play {t1 - t0:4.2f} s, {played_statements} statements; "
                f"watch {t2 - t1:4.2f} s, {STATEMENTS[0] - played_statements} statements){'' if ok else ' NOT CLEAN'}",
                flush=True,
            )
        if profile:
            profile.disable()
            profile.dump_stats(str(args.profile))
        # Read before they stop: each server's CPU since it started (its start included).
        servers = {n: _cpu(p.pid) for n, p in lw._procs.items()}
    print("servers' CPU: " + ", ".join(f"{n} {s:.2f} s" for n, s in servers.items()))
    later = per_night[1:] or per_night
    print(
        f"{name}: {statistics.mean(later):.2f} s per night mean, {statistics.median(later):.2f} s median "
        f"(nights 1-{len(per_night) - 1}); load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
