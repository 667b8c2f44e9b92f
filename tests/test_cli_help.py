"""``dw-dagster --help`` lists every command with its summary and imports none of them: no dagster, no
pandas, no local world (its figure is benchmarks/bench_cli_startup.py's, not asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys

from dw_dagster.app.cli import PRODUCT_COMMANDS

PROBE = """
import contextlib, io, json, sys
before = set(sys.modules)  # what the interpreter's start-up (site, .pth files) loaded
from dw_dagster.app.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["--help"])
    except SystemExit:
        pass
print(json.dumps({"help": out.getvalue(), "modules": sorted(set(sys.modules) - before)}))
"""


def test_help_lists_every_command_and_imports_none() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    listing = probe["help"].split("Commands:")[1]
    rows = dict(line.split(None, 1) for line in listing.strip().splitlines())
    # Each command with a summary read from its module's source, the local world's entry points included.
    for name in [*PRODUCT_COMMANDS, "coalesce", "world", "scenario"]:
        assert rows.get(name, "").strip(), f"{name} missing or without a summary in:\n{listing}"
    heavy = {"dagster", "pandas", "numpy", "pydantic", "snowflake", "httpx", "sqlglot", "networkx"}
    loaded = {m.split(".")[0] for m in probe["modules"]}
    assert not heavy & loaded, sorted(heavy & loaded)
    # Not even the packages of the commands (a package's __init__ may import dagster), but the command's own.
    commands = {target.partition(":")[0] for target in PRODUCT_COMMANDS.values()}
    parents = {m.rpartition(".")[0] for m in commands}
    assert not (commands | parents | {"dw_local"}) & set(probe["modules"]) - {"dw_dagster", "dw_dagster.app"}
