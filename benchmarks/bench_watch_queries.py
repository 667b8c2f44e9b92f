"""Warehouse queries per monitored table per night, for volume and freshness together (goal: at most 1, and
zero table scans in production mode).

On a private clone of the seeded distributor world (``seeded_template`` + ``clone_world``; the template is
built once per content hash under ``.dw/cache``, about 3 minutes the first time), it plays one
ordinary night through the Coalesce simulator and runs one ``LocalDaemon.tick()`` (the run sensor, the
checks-only run it requests, executed in this process, then the incident sensor), with
``snowflake.connector.cursor.SnowflakeCursor.execute`` wrapped so that every statement this process sends
is recorded with the query tag of its connection (``QUERY_TAG`` session parameter) and the phase it came
from. It does that twice on the same world:

- night 60 with the metrics file as shipped: ``volume.row_counts: count`` (the local default);
- night 61 with an edited copy of it: ``volume.row_counts: metadata`` (production mode), through
  ``LocalDaemon(lw, env={"DW_METRICS_FILE": ...})``.

Statements are classified by SQL text: INFORMATION_SCHEMA (metadata), COUNT(*) or SUM (a table scan),
MAX (answered from micro-partition metadata in Snowflake, a scan on the local server), reads and writes of
the ops schema (history, incidents), and the ops schema's CREATE ... IF NOT EXISTS. It prints, per mode:
queries per monitored table for volume + freshness (measurement only, then with their history reads and
writes), how many are scans, and the totals of the checks run including recorded totals. Nothing is
asserted. Run:

    .venv/bin/python benchmarks/bench_watch_queries.py [--show-sql]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import yaml

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")
warnings.filterwarnings("ignore")
# The sqlite pool of the in-process instance logs harmless "Exception during reset" noise at exit.
logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)

import phases  # noqa: E402
from phases import phase  # noqa: E402
from snowflake.connector.cursor import SnowflakeCursor  # noqa: E402

from dw_local.daemon import LocalDaemon  # noqa: E402
from dw_local.seeding import clone_world, seeded_template  # noqa: E402
from dw_local.world import DISTRIBUTOR_DIR, LocalWorld  # noqa: E402
from dw_local.worlds.distributor.generator import DistributorWorld  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DW_WORLD_CACHE", REPO / ".dw" / "cache"))

# -- recording every statement ----------------------------------------------------------------------

_log: list[dict] = []
_original_execute = SnowflakeCursor.execute


def _recording_execute(self, command, *args, **kwargs):
    if phases.current is not None:
        params = getattr(self.connection, "_session_parameters", None) or {}
        try:
            tag = json.loads(params.get("QUERY_TAG") or "{}")
        except ValueError:
            tag = {"raw": params.get("QUERY_TAG")}
        _log.append({"phase": phases.current, "sql": command, "tag": tag, "connection": id(self.connection)})
    return _original_execute(self, command, *args, **kwargs)


SnowflakeCursor.execute = _recording_execute  # type: ignore[method-assign]


class CountingDaemon(LocalDaemon):
    """LocalDaemon whose statements are attributed to the sensor tick or to the checks run."""

    def _tick_run_sensor(self):
        with phase("run sensor"):
            return super()._tick_run_sensor()

    def _execute_checks(self, request):
        with phase("checks run"):
            return super()._execute_checks(request)

    def _tick_incident_sensor(self):
        with phase("incident sensor"):
            return super()._tick_incident_sensor()


def classify(sql: str) -> str:
    s = re.sub(r"\s+", " ", sql).strip().upper()
    if "INFORMATION_SCHEMA" in s:
        return "metadata"
    if re.match(r"CREATE (SCHEMA|TABLE) IF NOT EXISTS", s):
        return "ops ddl"
    if '"DW_OPS"' in s:
        return "ops read" if s.startswith("SELECT") else "ops write"
    if "COUNT(*)" in s or "SUM(" in s:
        return "scan"
    if "MAX(" in s:
        return "max"
    return "other"


# -- one night, one mode ----------------------------------------------------------------------------


def play_and_watch(daemon: CountingDaemon, night: int) -> tuple[list[dict], object]:
    lw = daemon.lw
    DistributorWorld().play_night(lw.snowflake, lw.coalesce_client(), night)
    start = len(_log)
    outcome = daemon.tick()
    return _log[start:], outcome


def report(mode: str, night: int, statements: list[dict], outcome, show_sql: bool) -> dict:
    checks = [s for s in statements if s["phase"] == "checks run"]
    volume_assets = {c.asset for c in outcome.checks if c.check == "volume"}
    fresh_assets = {c.asset for c in outcome.checks if c.check == "input_freshness"}
    monitored = volume_assets | fresh_assets
    watch = [
        s
        for s in checks
        if str(s["tag"].get("purpose", "")).startswith(("check.volume", "check.input_freshness"))
    ]
    measure = [s for s in watch if classify(s["sql"]) in ("metadata", "scan", "max", "other")]
    history = [s for s in watch if classify(s["sql"]) in ("ops read", "ops write")]
    ddl = [s for s in watch if classify(s["sql"]) == "ops ddl"]
    kinds = Counter(classify(s["sql"]) for s in measure)
    totals = [s for s in checks if str(s["tag"].get("purpose", "")).startswith("check.recorded_total")]
    by_class = Counter(classify(s["sql"]) for s in checks)
    per = len(monitored) or 1
    sources = sorted({str(c.metadata.get("row_count_source")) for c in outcome.checks if c.check == "volume"})
    not_passed = [f"{c.check}@{c.asset}" for c in outcome.checks if c.passed is not True]

    print(f"\n== volume.row_counts: {mode}  (night {night}; {len(outcome.checks)} checks, "
          f"{outcome.runs_requested} checks run; not passed: {not_passed or 'none'})")  # fmt: skip
    print(f"monitored tables: {len(monitored)} ({len(volume_assets)} volume, {len(fresh_assets)} input freshness); "
          f"row counts from {', '.join(sources)}")  # fmt: skip
    print(f"  volume + freshness, measurement queries: {len(measure)} = {len(measure) / per:.2f} per monitored table"
          f" (goal <= 1); table scans {kinds['scan']}, MAX {kinds['max']}, INFORMATION_SCHEMA {kinds['metadata']}")  # fmt: skip
    print(f"  ... with their history reads + writes:   {len(measure) + len(history)} = "
          f"{(len(measure) + len(history)) / per:.2f} per monitored table"
          f" ({sum(classify(s['sql']) == 'ops read' for s in history)} reads, "
          f"{sum(classify(s['sql']) == 'ops write' for s in history)} writes); plus {len(ddl)} CREATE ... IF NOT EXISTS")  # fmt: skip
    print(f"  recorded totals: {sum(classify(s['sql']) not in ('ops read', 'ops write', 'ops ddl') for s in totals)} "
          f"aggregate queries, {sum(classify(s['sql']) in ('ops read', 'ops write') for s in totals)} history reads/writes")  # fmt: skip
    print(
        f"  whole checks run: {len(checks)} statements on {len({s['connection'] for s in checks})} connections: "
        + ", ".join(f"{k} {v}" for k, v in sorted(by_class.items()))
    )
    for ph in ("run sensor", "incident sensor"):
        others = [s for s in statements if s["phase"] == ph]
        print(f"  {ph}: {len(others)} statements")
    purposes = Counter(str(s["tag"].get("purpose")) for s in checks)
    print("  by query tag purpose: " + ", ".join(f"{k} {v}" for k, v in sorted(purposes.items())))
    if show_sql:
        for s in checks:
            one_line = re.sub(r"\s+", " ", s["sql"]).strip()
            print(f"    [{classify(s['sql']):9}] {s['tag'].get('purpose')}: {one_line[:150]}")
    return {"per_table": len(measure) / per, "scans": kinds["scan"], "with_history": (len(measure) + len(history)) / per,
            "checks_total": len(checks)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--show-sql", action="store_true", help="print every statement of the checks runs")
    args = parser.parse_args()

    template = seeded_template(CACHE)
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        root = clone_world(template, Path(tmp) / "local")
        metrics = yaml.safe_load((DISTRIBUTOR_DIR / "metrics.yaml").read_text())
        metrics["volume"]["row_counts"] = "metadata"
        metadata_file = Path(tmp) / "metrics-metadata.yaml"
        metadata_file.write_text(yaml.safe_dump(metrics))
        with LocalWorld(root) as lw:
            count = CountingDaemon(lw)
            played = json.loads((root / "seeded.json").read_text())["nights_played"]
            statements, outcome = play_and_watch(count, played)
            counted = report("count", played, statements, outcome, args.show_sql)

            meta = CountingDaemon(lw, env={"DW_METRICS_FILE": str(metadata_file)})
            meta.instance = count.instance  # one instance per storage folder
            statements, outcome = play_and_watch(meta, played + 1)
            metad = report("metadata", played + 1, statements, outcome, args.show_sql)

    print(f"\nsummary: volume + freshness queries per monitored table: count mode {counted['per_table']:.2f} "
          f"({counted['scans']} scans), metadata mode {metad['per_table']:.2f} ({metad['scans']} scans); with history "
          f"reads/writes {counted['with_history']:.2f} and {metad['with_history']:.2f}; whole checks run "
          f"{counted['checks_total']} and {metad['checks_total']} statements")  # fmt: skip


if __name__ == "__main__":
    main()
