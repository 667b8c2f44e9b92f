"""CPU seconds per test file: where the suite's 2 cores go (a pytest plugin, benchmarks only).

    PYTHONPATH=benchmarks .venv/bin/pytest -n 3 --dist loadfile -p suite_cpu
    .venv/bin/python benchmarks/suite_cpu.py .pytest-cpu.jsonl     # the table, most CPU first

On a CPU-bound suite (3 workers on 2 cores) the wall time a file shows depends on what ran beside it; its CPU
does not. Each worker adds, per test, the CPU of its process tree (servers, commands, code servers, run
workers; read from /proc, Linux only), and writes one line per file to ``$DW_SUITE_CPU`` (default
``.pytest-cpu.jsonl``). The session's template builds are the controller's children: the line ``<templates>``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = Path(os.environ.get("DW_SUITE_CPU", ".pytest-cpu.jsonl"))


TICK = os.sysconf("SC_CLK_TCK")


def _cpu() -> float:
    """CPU seconds of this process's tree: each live descendant's own and its reaped children's (a dead
    process is counted once, in the live ancestor that reaped it; servers live under the fork server)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime
    me, total = os.getpid(), 0.0
    for pid, spent in times.items():
        p = pid
        while p > 1 and p != me:
            p = parents.get(p, 0)
        if p == me:
            total += spent
    return total


_files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu(), time.monotonic()
    yield
    spent = _files[item.location[0]]
    spent[0] += _cpu() - cpu
    spent[1] += time.monotonic() - wall


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's, which builds the templates
def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        _files["<templates>"] = [_cpu(), 0.0]  # the controller's own import and collection, subtracted below


def pytest_collection_finish(session):
    # The controller builds the templates in pytest_sessionstart (tests/conftest.py), before collection.
    if not hasattr(session.config, "workerinput") and "<templates>" in _files:
        _files["<templates>"][0] = _cpu() - _files["<templates>"][0]


def pytest_sessionfinish(session):
    with OUT.open("a") as out:
        for path, (cpu, wall) in _files.items():
            out.write(json.dumps({"file": path, "cpu": round(cpu, 1), "wall": round(wall, 1)}) + "\n")


def _table(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    total = sum(r["cpu"] for r in rows)
    print(f"{'CPU s':>8} {'share':>6} {'wall s':>8}  file")
    for r in sorted(rows, key=lambda r: -r["cpu"]):
        print(f"{r['cpu']:8.1f} {r['cpu'] / total:6.1%} {r['wall']:8.1f}  {r['file']}")
    print(f"{total:8.1f}  in all ({total / 2:.0f} s on 2 cores at best)")


if __name__ == "__main__":
    _table(Path(sys.argv[1] if len(sys.argv) > 1 else OUT))
