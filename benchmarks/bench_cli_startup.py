"""How long ``dw-dagster --help`` takes, and what it imports (goal: at most 1 s on an idle machine).

Runs the installed command N times as a fresh process and prints the best and median wall time, beside a
bare ``python -c pass`` (the interpreter's own start-up) and the ratio of the two; then lists the heavy
packages the help imports (none expected: dagster, pandas, numpy, pydantic, the local world). Run:

    .venv/bin/python benchmarks/bench_cli_startup.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND = Path(sys.executable).parent / "dw-dagster"
HEAVY = ("dagster", "pandas", "numpy", "pydantic", "snowflake", "httpx", "yaml", "sqlglot", "networkx")


def timed(argv: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))\n"
    return set(
        subprocess.run(
            [sys.executable, "-c", probe], check=True, capture_output=True, text=True
        ).stdout.split()
    )


HELP = """
import contextlib, io
from dw_dagster.app.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(['--help'])
    except SystemExit:
        pass
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    subprocess.run([str(COMMAND), "--help"], check=True, capture_output=True)  # warm the file cache
    cli = timed([str(COMMAND), "--help"], args.repeat)
    bare = timed([sys.executable, "-c", "pass"], args.repeat)
    print(f"dw-dagster --help: best {min(cli):.3f} s, median {statistics.median(cli):.3f} s over {args.repeat} runs "
          "(goal <= 1 s)")  # fmt: skip
    print(f"python -c pass:    best {min(bare):.3f} s, median {statistics.median(bare):.3f} s")
    print(
        f"ratio (median):    {statistics.median(cli) / statistics.median(bare):.1f}x the interpreter's start-up"
    )
    # What --help imports beyond what the interpreter itself starts with.
    extra = modules_after(HELP) - modules_after("pass")
    heavy = sorted({m.split(".")[0] for m in extra} & set(HEAVY) - {"dw_local"})
    local = sorted(m for m in extra if m.split(".")[0] == "dw_local")
    print(f"modules --help imports beyond the interpreter's: {len(extra)}; heavy packages among them: "
          f"{', '.join(heavy) or 'none'}; local-world modules: {', '.join(local) or 'none'}")  # fmt: skip


if __name__ == "__main__":
    main()
