"""The checks run's warehouse statements on the distributor and e-commerce worlds, counted at the
connector: the history of every table is read once and written once per run, the row counts are one
statement, and a table that cannot be counted errors its own check only, named."""

from __future__ import annotations

import os
import re

import dagster as dg
import pytest
import yaml
from warehouse_statements import statements
from world_cache import WORLD_CACHE

from dw_local.daemon import LocalDaemon
from dw_local.scenarios.model import load_scenario
from dw_local.scenarios.suite import SUITE_DIR
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]

ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce"


@pytest.fixture(scope="module")
def daemon(seeded_world):
    return LocalDaemon(seeded_world)


def _touching(sent: list[str], pattern: str) -> list[str]:
    return [s for s in sent if re.search(pattern, s, re.DOTALL)]


def assert_batched(sent: list[str]) -> None:
    """Whatever the number of tables and totals: one row-count statement, and one history read and one
    history write for the tables, for the totals and for the small tables' keys (series ``rows:``)."""
    assert len(_touching(sent, r"COUNT\(\*\) AS N")) == 1
    assert len(_touching(sent, r"FROM \S*VOLUME_HISTORY")) == 1
    assert len(_touching(sent, r"MERGE INTO \S*VOLUME_HISTORY")) == 1
    for keys in (False, True):
        metric = [s for s in sent if "METRIC_HISTORY" in s and ("'rows:" in s) is keys]
        reads = _touching(metric, r"^SELECT .*FROM \S*METRIC_HISTORY")
        writes = _touching(metric, r"^MERGE INTO \S*METRIC_HISTORY")
        # The keys' pair only where a small keyed table is monitored.
        assert len(reads) == len(writes) == 1 or (keys and len(reads) == len(writes) <= 1), metric


def test_an_ordinary_distributor_night_reads_and_writes_each_history_once(daemon):
    DistributorWorld().play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), 60)
    with statements() as sent:
        outcome = daemon.tick()
    volume = {c.asset for c in outcome.checks if c.check == "volume"}
    totals = [c for c in outcome.checks if c.check.startswith("total_")]
    assert len(volume) == 4 and len(totals) == 3 and outcome.errored() == []
    assert_batched(sent)
    names = ("network_onhand_units", "ebs_onhand_units", "reorder_candidates")
    reads = _touching(sent, r"FROM \S*METRIC_HISTORY.*'network_onhand_units'")
    writes = _touching(sent, r"MERGE INTO \S*METRIC_HISTORY.*'network_onhand_units'")
    assert len(reads) == 1 and len(writes) == 1
    assert all(f"'{n}'" in reads[0] and f"'{n}'" in writes[0] for n in names)
    assert len(sent) <= 25  # 38 before the checks run's statements were batched


def test_an_ordinary_ecommerce_night_reads_and_writes_each_history_once(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(
        yaml.safe_dump({"name": "statements", "world": str(ECOMMERCE / "world.yaml"), "nights": [{}]})
    )
    scenario = load_scenario(path)
    w = scenario.world
    environ = dict(os.environ)
    try:
        with w.local_world(w.clone(WORLD_CACHE.resolve(), tmp_path / "world")) as lw:
            daemon = LocalDaemon(lw, env=w.env())
            w.play_night(lw, scenario.night_index(0), scenario.events[0])
            with statements() as sent:
                outcome = daemon.tick()
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert sum(c.check == "volume" for c in outcome.checks) >= 2 and outcome.errored() == []
    assert_batched(sent)


def test_a_missing_table_errors_its_own_volume_check_only_named(daemon):
    DistributorWorld().play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), 61)
    with daemon.lw.snowflake.connect() as conn:
        conn.cursor().execute('ALTER TABLE "DW_PROD"."MART"."MART_DAYS_OF_SUPPLY" RENAME TO "MART_DAYS_GONE"')
    try:
        outcome = daemon.tick()
    finally:
        with daemon.lw.snowflake.connect() as conn:
            conn.cursor().execute(
                'ALTER TABLE "DW_PROD"."MART"."MART_DAYS_GONE" RENAME TO "MART_DAYS_OF_SUPPLY"'
            )
    volume = {c.asset: c for c in outcome.checks if c.check == "volume"}
    assert volume["mart/mart_days_of_supply"].passed is None, "errored, never passed"
    others = [c for a, c in volume.items() if a != "mart/mart_days_of_supply"]
    assert len(others) == 3 and all(c.passed is not None for c in others), "the other tables are judged"
    run = daemon.instance.get_runs(limit=1)[0]
    failures = daemon.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    messages = " ".join(str(e.dagster_event.step_failure_data.error) for e in failures)
    assert "mart/mart_days_of_supply" in messages and "MART_DAYS_OF_SUPPLY" in messages
