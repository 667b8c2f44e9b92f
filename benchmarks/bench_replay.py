"""The reference night end to end (``dw-dagster demo replay``), timed phase by phase in wall-clock seconds.

Plays the replay on a fresh copy of the seeded distributor world and prints, for each timeline event, the
seconds since the replay started and since the previous event: detection and diagnosis, the proposal and the
held run, each approval through the `dw-dagster approve` program, the engineer's deploy, then the remediation
run (reference row, scoped rerun, verification, receipt). Run:

    .venv/bin/python benchmarks/bench_replay.py
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DW_WORLD_CACHE", REPO / ".dw" / "cache"))


def main() -> None:
    from dw_local.demo import replay
    from dw_local.seeding import seeded_template

    warnings.simplefilter("ignore")
    template = seeded_template(CACHE)
    marks: list[tuple[float, str]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        events = replay(
            Path(tmp) / "world", template, echo=lambda line: marks.append((time.perf_counter(), line))
        )
    total = time.perf_counter() - start
    previous = start
    print(f"{'since start':>11} {'step':>7}  event")
    for at, line in marks:
        what = line.split("  ", 1)[-1].strip()
        print(f"{at - start:10.1f}s {at - previous:6.1f}s  {what[:110]}")
        previous = at
    receipt = events[-1].get("receipt", {})
    print(f"\nreplay: {total:.1f} s wall for {len(events)} events; verified: {receipt.get('verified')}")


if __name__ == "__main__":
    main()
