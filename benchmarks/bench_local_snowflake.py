"""The local Snowflake's CPU with each statement text rewritten once (``local/dw_local/snowflake_statements.py``)
against fakesnow's own path, which parses and rewrites every statement it runs (``DW_LOCAL_SNOWFLAKE_REUSE=0``).

Seeds ``--nights`` history nights of a world on a fresh local world each way, one after the other, through
``bench_seeding.py`` (the same nights, statements and checks both times), and prints each run's Snowflake
server CPU (its start included), seconds per night, and the ratios. Nothing is asserted. Run:

    .venv/bin/python benchmarks/bench_local_snowflake.py [--nights 10] [--world FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ECOMMERCE = HERE.parent / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce" / "world.yaml"


def seed(nights: int, world: Path, reuse: bool) -> tuple[float, float]:
    env = {**os.environ, "DW_LOCAL_SNOWFLAKE_REUSE": "1" if reuse else "0"}
    out = subprocess.run(
        [sys.executable, str(HERE / "bench_seeding.py"), "--nights", str(nights), "--world", str(world)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cpu = float(re.search(r"snowflake ([\d.]+) s", out)[1])
    per_night = float(re.search(r"([\d.]+) s per night mean", out)[1])
    label = "reused rewrites" if reuse else "fakesnow's own"
    print(f"{label:>16}: Snowflake server CPU {cpu:6.2f} s, {per_night:.2f} s per night", flush=True)
    return cpu, per_night


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nights", type=int, default=10)
    parser.add_argument("--world", type=Path, default=ECOMMERCE)
    args = parser.parse_args()
    before_cpu, before_night = seed(args.nights, args.world, reuse=False)
    after_cpu, after_night = seed(args.nights, args.world, reuse=True)
    print(f"server CPU ratio (fakesnow's own / reused): {before_cpu / after_cpu:.2f}x")
    print(f"seconds per night ratio: {before_night / after_night:.2f}x")


if __name__ == "__main__":
    main()
