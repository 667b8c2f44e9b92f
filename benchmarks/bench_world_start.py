"""Seconds to start and stop a local world's three servers, forked from the fork server
(``local/dw_local/forkserver.py``) or each started as a new Python process (``DW_LOCAL_FORK_SERVER=0``), and the
CPU the servers spent doing it.

Starts ``--worlds`` empty worlds one after another in this process each way (the first forked world also
starts the fork server, printed apart), then prints the median start and stop, the servers' CPU per world
(read from ``/proc`` before they stop) and the ratio. Nothing is asserted. Run:

    .venv/bin/python benchmarks/bench_world_start.py [--worlds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")

from dw_local.world import LocalWorld  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def one_world(root: Path) -> tuple[float, float, float]:
    started = time.perf_counter()
    lw = LocalWorld(root).start()
    up = time.perf_counter() - started
    cpu = sum(_cpu(p.pid) for p in lw._procs.values())
    stopping = time.perf_counter()
    lw.stop()
    return up, time.perf_counter() - stopping, cpu


def measure(label: str, worlds: int, tmp: Path) -> list[tuple[float, float, float]]:
    runs = [one_world(tmp / f"{label}-{i}") for i in range(worlds)]
    for i, (up, down, cpu) in enumerate(runs):
        print(f"{label} world {i}: up {up:.2f} s, stop {down:.2f} s, servers' CPU {cpu:.2f} s")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worlds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-world-start-"))
    print(f"load average {os.getloadavg()[0]:.2f}")
    os.environ["DW_LOCAL_FORK_SERVER"] = "0"
    popen = measure("new processes", args.worlds, tmp)
    os.environ["DW_LOCAL_FORK_SERVER"] = "1"
    forked = measure("forked", args.worlds + 1, tmp)[1:]  # the first also started the fork server

    def med(runs, i):
        return statistics.median(r[i] for r in runs)

    for name, i in (("start", 0), ("stop", 1), ("servers' CPU", 2)):
        before, after = med(popen, i), med(forked, i)
        print(f"median {name}: new processes {before:.2f} s, forked {after:.2f} s ({before / after:.1f}x)")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
