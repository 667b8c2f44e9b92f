"""What the commands a person types during an incident cost: ``incidents list``, ``incidents show``,
``proposals`` as fresh processes, beside the floor every such command pays (the interpreter, dagster and the
Snowflake connector, which imports pandas and pyarrow when they are installed).

Prints each command's median wall time and CPU time (user + system of the process) over N runs, the floor's,
and each command's CPU over the floor's. CPU is the figure to compare across machines: wall time on a
shared machine counts the other processes' turns too. Run against a running local world (the commands
read its warehouse):

    dw-dagster world up --no-ui        # or with the UI, in another shell
    set -a; . .dw/local/world.env; set +a
    .venv/bin/python benchmarks/bench_cli_commands.py [--repeat 5] [--incident INC-...]

Recorded (issue 27; 2 cores shared with other work, load 6-8; medians of 3; the reference night's incident
on a local world):

| command | before: wall / cpu | after: wall / cpu |
|---|---|---|
| floor (`import dagster, snowflake.connector`) | 5.2 s / 1.67 s | 5.3 s / 1.63 s |
| `incidents list` | 9.4 s / 2.95 s | 6.2 s / 2.01 s |
| `incidents show INC` | 11.5 s / 3.20 s | 6.3 s / 2.07 s |
| `proposals INC` | 10.6 s / 3.13 s | 6.5 s / 2.14 s |

Before: the commands loaded the whole code location to read their settings (``app/settings.py``), made
Slack's client for reading, and imported every notifications module. What is left above the floor is the
commands' own work (their queries) and, on the local world, its clock's start-up hook.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND = Path(sys.executable).parent / "dw-dagster"
FLOOR = "import dagster, snowflake.connector"


def timed(argv: list[str], repeat: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return walls, cpus


def first_incident() -> str | None:
    out = subprocess.run([str(COMMAND), "incidents", "list"], capture_output=True, text=True, timeout=300)
    first = out.stdout.split()[:1]
    return first[0] if first and first[0].startswith("INC-") else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--incident", default=None, help="An incident id (default: the first listed).")
    args = parser.parse_args()
    if not os.environ.get("SNOWFLAKE_DATABASE"):
        raise SystemExit("set the world's environment first: set -a; . .dw/local/world.env; set +a")
    incident = args.incident or first_incident()
    commands = [["incidents", "list"]]
    if incident:
        commands += [["incidents", "show", incident], ["proposals", incident]]
    floor_wall, floor_cpu = timed([sys.executable, "-c", FLOOR], args.repeat)
    print(
        f"{'floor: ' + FLOOR:<44} wall {statistics.median(floor_wall):6.2f} s  cpu {statistics.median(floor_cpu):5.2f} s"
    )
    for argv in commands:
        wall, cpu = timed([str(COMMAND), *argv], args.repeat)
        ratio = statistics.median(cpu) / statistics.median(floor_cpu)
        print(f"{'dw-dagster ' + ' '.join(argv):<44} wall {statistics.median(wall):6.2f} s  "
              f"cpu {statistics.median(cpu):5.2f} s  ({ratio:.2f}x the floor's cpu)")  # fmt: skip


if __name__ == "__main__":
    main()
