"""The checks run's warehouse statements on the distributor and e-commerce worlds, counted at the connector:
an ordinary night is three statements whatever the number of checks and tables (one read of the history and
context, one measurement, one write), every check is evaluated on what its table holds, and a table that
cannot be counted errors its own check only, named."""

from __future__ import annotations

import os
import re
from pathlib import Path

import dagster as dg
import pytest
import yaml
from warehouse_statements import bound_statements
from world_cache import WORLD_CACHE

from dw_dagster.checks import load_metrics_file
from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.sql import table_reference
from dw_local.daemon import LocalDaemon, TickOutcome
from dw_local.scenarios.model import load_scenario
from dw_local.scenarios.suite import SUITE_DIR
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]

ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce"


class ChecksRunDaemon(LocalDaemon):
    """The local daemon, keeping the statements its last checks run sent (as bench_idle_warehouse counts) and
    the values bound to each."""

    checks_run: list[tuple[str, list[str | None]]]

    def _execute_checks(self, *args):
        with bound_statements() as self.checks_run:
            return super()._execute_checks(*args)


@pytest.fixture(scope="module")
def daemon(seeded_world):
    return ChecksRunDaemon(seeded_world)


def assert_three_statements(sent: list[tuple[str, list[str | None]]], outcome: TickOutcome) -> None:
    """One read (levels, incident days, fixes and every series' history), one measurement (every part of
    the night), one write (every series of the night), each series a value bound to the read and the write,
    never in their text."""
    assert len(sent) == 3, sent
    (read, read_values), (measured, _), (written, written_values) = sent
    assert "BASELINE_LEVELS" in read and "'history'" in read and "METRIC_HISTORY" in read
    assert measured.startswith('SELECT 0 AS "PART"') and "DW_OPS" not in measured
    assert re.match(r'MERGE INTO "\w+"\."DW_OPS"\."METRIC_HISTORY" ', written)
    for check in outcome.checks:
        series = check.check.removeprefix("total_") if check.check.startswith("total_") else None
        if check.check == "volume":
            series = f"volume:{check.asset}"
        if series:
            assert series in read_values and series in written_values, series
            assert series not in read and series not in written, series


def assert_measured_as_the_tables_hold(
    lw, database: str, metrics_file: str, outcome: TickOutcome, specs
) -> None:
    """Each volume check's row count, each business key's rows and distinct keys and each total's value are
    what the table holds, read apart."""
    tables = {s.key.to_user_string(): s.metadata.get("dagster/table_name") for s in specs}
    totals = {f"total_{t.name}": t for t in load_metrics_file(metrics_file).totals}
    with lw.snowflake.connect(database=database) as conn:
        cur = conn.cursor()
        for check in outcome.checks:
            if check.check == "volume":
                cur.execute(f"SELECT COUNT(*) FROM {table_reference(*tables[check.asset].split('.'))}")
                assert check.metadata["row_count"] == cur.fetchone()[0], check.asset
            elif check.check == "business_key":
                columns = [f'"{c}"' for c in check.metadata["business_key"].split(", ")]
                table = table_reference(*tables[check.asset].split("."))
                keyed = " AND ".join(f"{c} IS NOT NULL" for c in columns)
                cur.execute(
                    f"SELECT COUNT(*), COUNT(DISTINCT {', '.join(columns)}) FROM {table} WHERE {keyed}"
                )
                found = cur.fetchone()
                assert (check.metadata["rows"], check.metadata["distinct_keys"]) == tuple(found), check.asset
            elif check.check in totals:
                sql = resolve_refs(
                    totals[check.check].sql, lambda loc, name: table_reference(database, loc, name)
                )
                cur.execute(f'SELECT SUM("VALUE") FROM ({sql})')
                assert check.metadata["value"] == pytest.approx(float(cur.fetchone()[0] or 0)), check.check


def test_an_ordinary_distributor_night_is_three_statements(daemon):
    DistributorWorld().play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), 60)
    outcome = daemon.tick()
    checks_run = daemon.checks_run
    assert {(c.check, c.asset) for c in outcome.checks} == {
        ("input_freshness", "inventory/fct_inventory_position"),
        ("total_network_onhand_units", "inventory/fct_inventory_position"),
        ("total_ebs_onhand_units", "raw_ebs/mtl_onhand_quantities_detail"),
        ("total_reorder_candidates", "mart/mart_reorder_candidates"),
        *((check, a) for a in ("inventory/dim_warehouse", "inventory/fct_inventory_position",
                               "mart/mart_days_of_supply", "mart/mart_reorder_candidates")
          for check in ("volume", "business_key")),
    }  # fmt: skip
    assert all(c.passed is True for c in outcome.checks), [c for c in outcome.checks if not c.passed]
    assert_three_statements(checks_run, outcome)
    # The small keyed tables' keys are parts of the measurement; 5 tables, 0.6 statements each (was 3.00).
    assert checks_run[1][0].count("SELECT DISTINCT") == 2
    specs = daemon.defs.resolve_all_asset_specs()
    assert_measured_as_the_tables_hold(daemon.lw, "DW_PROD", daemon.settings.metrics_file, outcome, specs)


def test_an_ordinary_ecommerce_night_is_three_statements(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(
        yaml.safe_dump({"name": "statements", "world": str(ECOMMERCE / "world.yaml"), "nights": [{}]})
    )
    scenario = load_scenario(path)
    w = scenario.world
    environ = dict(os.environ)
    try:
        with w.local_world(w.clone(WORLD_CACHE.resolve(), tmp_path / "world")) as lw:
            daemon = ChecksRunDaemon(lw, env=w.env())
            w.play_night(lw, scenario.night_index(0), scenario.events[0])
            outcome = daemon.tick()
            checks_run = daemon.checks_run
            specs = daemon.defs.resolve_all_asset_specs()
            assert_measured_as_the_tables_hold(lw, w.database, daemon.settings.metrics_file, outcome, specs)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    tables = {c.asset for c in outcome.checks}
    assert sum(c.check == "volume" for c in outcome.checks) >= 2 and len(tables) >= 3
    assert {c.check for c in outcome.checks} >= {"input_freshness", "volume", "total_daily_revenue"}
    assert all(c.passed is True for c in outcome.checks), [c for c in outcome.checks if not c.passed]
    assert_three_statements(checks_run, outcome)


def test_a_missing_table_errors_its_own_volume_check_only_named(daemon, tmp_path):
    # Counted (count mode): in the world's metadata mode the Coalesce run's row count stands in, unread.
    metrics = yaml.safe_load(Path(daemon.settings.metrics_file).read_text())
    metrics["volume"]["row_counts"] = "count"
    (tmp_path / "metrics.yaml").write_text(yaml.safe_dump(metrics))
    counting = ChecksRunDaemon(daemon.lw, env={"DW_METRICS_FILE": str(tmp_path / "metrics.yaml")})
    counting.instance = daemon.instance
    DistributorWorld().play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), 61)
    with daemon.lw.snowflake.connect() as conn:
        conn.cursor().execute('ALTER TABLE "DW_PROD"."MART"."MART_DAYS_OF_SUPPLY" RENAME TO "MART_DAYS_GONE"')
    try:
        outcome = counting.tick()
    finally:
        with daemon.lw.snowflake.connect() as conn:
            conn.cursor().execute(
                'ALTER TABLE "DW_PROD"."MART"."MART_DAYS_GONE" RENAME TO "MART_DAYS_OF_SUPPLY"'
            )
    volume = {c.asset: c for c in outcome.checks if c.check == "volume"}
    assert volume["mart/mart_days_of_supply"].passed is None, "errored, never passed"
    # Its business key, counted in the same table, errors with it.
    gone = [c for c in outcome.checks if c.asset == "mart/mart_days_of_supply"]
    assert {c.check for c in gone} == {"volume", "business_key"} and all(c.passed is None for c in gone)
    others = [c for c in outcome.checks if c.asset != "mart/mart_days_of_supply"]
    assert len(others) == 10 and all(c.passed is not None for c in others), "every other check is judged"
    run = daemon.instance.get_runs(limit=1)[0]
    failures = daemon.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    messages = " ".join(str(e.dagster_event.step_failure_data.error) for e in failures)
    assert "mart/mart_days_of_supply" in messages and "MART_DAYS_OF_SUPPLY" in messages
