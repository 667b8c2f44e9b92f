"""Watching the distributor world: 60 clean nights, then the reference night, through the real sensor and
checks on the real local servers."""

from __future__ import annotations

import re

import pytest
import yaml
from warehouse_statements import statements

from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.config import DwConfigError
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon
from dw_local.world import DISTRIBUTOR_DIR
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def daemon(seeded_world):
    return LocalDaemon(seeded_world)


def _store(daemon: LocalDaemon) -> IncidentStore:
    return IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))


def _history(daemon: LocalDaemon) -> list[tuple]:
    with daemon.lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute('SELECT * FROM "DW_PROD"."DW_OPS"."METRIC_HISTORY" ORDER BY 2')
        return cur.fetchall()


def test_sixty_clean_nights_open_no_incident(daemon):
    assert _store(daemon).list() == []
    totals = [r for r in _history(daemon) if r[0] == "network_onhand_units"]
    assert len(totals) == 60
    assert not any(r[7] for r in _history(daemon)), "no night was flagged"
    volumes = [r for r in _history(daemon) if r[0] == "volume:inventory/fct_inventory_position"]
    # The world judges volume in production's metadata mode: the Coalesce run's row counts.
    assert len(volumes) == 60 and all(r[8] == "coalesce_run_results" for r in volumes), (
        "row counts, with their source"
    )
    # The history covers weekends and month-ends.
    days = [r[1] for r in totals]
    assert any(d.weekday() >= 5 for d in days) and any((d.day >= 28) for d in days)


def test_an_ordinary_night_passes_every_check(daemon):
    world = DistributorWorld()
    world.play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), 60)
    outcome = daemon.tick()
    assert outcome.events >= 9 and outcome.runs_requested == 1
    assert outcome.failed("ERROR") == [] and outcome.errored() == []
    assert {c.check for c in outcome.checks} >= {"total_network_onhand_units", "volume", "input_freshness"}
    assert _store(daemon).list() == []


def test_the_reference_night(daemon):
    world = DistributorWorld()
    world.play_reference_night(daemon.lw.snowflake, daemon.lw.coalesce_client())
    outcome = daemon.tick()
    by = {(c.check, c.asset): c for c in outcome.checks}

    total = by[("total_network_onhand_units", "inventory/fct_inventory_position")]
    assert total.passed is False and total.severity == "ERROR"
    assert total.metadata["gap_units"] == 41_800
    assert total.metadata["day_change_pct"] == pytest.approx(-1.8, abs=0.1)
    assert total.metadata["source_day_change_pct"] == pytest.approx(0.2, abs=0.1)
    assert "ORGANIZATION_ID=7120" in total.description and "absent in target" in total.description

    # The loss is in values, not a failed load: the fact is fresh and its row count in range.
    assert by[("volume", "inventory/fct_inventory_position")].passed is True
    assert by[("input_freshness", "inventory/fct_inventory_position")].passed is True
    reorder = by[("total_reorder_candidates", "mart/mart_reorder_candidates")]
    assert reorder.passed is False and reorder.metadata["value"] == 195

    incidents = _store(daemon).list(status="open")
    assert len(incidents) == 1, "one cause, one incident"
    findings = _store(daemon).events(incidents[0].incident_id, kind="finding")
    assert {f.detail["check_name"] for f in findings} >= {
        "total_network_onhand_units",
        "total_reorder_candidates",
    }

    # A re-tick reports nothing new and opens nothing.
    again = daemon.tick()
    assert again.runs_requested == 0 and len(_store(daemon).list()) == 1


def test_metadata_mode_counts_rows_without_scans(daemon, tmp_path):
    metrics = yaml.safe_load((DISTRIBUTOR_DIR / "metrics.yaml").read_text())
    metrics["volume"]["row_counts"] = "metadata"
    path = tmp_path / "metrics.yaml"
    path.write_text(yaml.safe_dump(metrics))
    meta = LocalDaemon(daemon.lw, env={"DW_METRICS_FILE": str(path)})
    meta.instance = daemon.instance
    DistributorWorld().play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), 62)
    with statements() as sent:
        outcome = meta.tick()
    vols = {c.asset: c for c in outcome.checks if c.check == "volume"}
    # Tables: the row count the Coalesce run reported; no warehouse query at all.
    assert {v.metadata["row_count_source"] for v in vols.values()} == {"coalesce_run_results"}
    # The measurement counts no rows (its COUNT(*) parts are count mode's), and still reads the keys of the
    # keyed tables the run's own count says are small.
    measured = [s for s in sent if s.startswith('SELECT 0 AS "PART"')]
    # The business keys' parts count rows per key, as a unique test does in either mode (business_keys.py).
    counting = (
        " ".join(p for p in measured[0].split("UNION ALL") if "AS PER_KEY" not in p) if measured else ""
    )
    assert len(measured) == 1 and not re.search(r'COUNT\(\*\) AS "C\d+"', counting)
    keyed = ("inventory/dim_warehouse", "mart/mart_reorder_candidates")
    small = [a for a in keyed if vols[a].metadata["row_count"] < 100]
    assert small and measured[0].count("SELECT DISTINCT") == len(small)
    with daemon.lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute('SELECT COUNT(*) FROM "DW_PROD"."INVENTORY"."FCT_INVENTORY_POSITION"')
        assert vols["inventory/fct_inventory_position"].metadata["row_count"] == cur.fetchone()[0]


def test_a_check_that_cannot_run_is_errored_not_passed(daemon, tmp_path):
    metrics = yaml.safe_load((DISTRIBUTOR_DIR / "metrics.yaml").read_text())
    metrics["totals"][1]["sql"] = (
        "SELECT SUM(\"NO_SUCH_COLUMN\") AS \"VALUE\" FROM {{ ref('RAW_EBS', 'MTL_ONHAND_QUANTITIES_DETAIL') }}"
    )
    metrics["totals"][1]["group_keys"] = []
    path = tmp_path / "metrics.yaml"
    path.write_text(yaml.safe_dump(metrics))
    broken = LocalDaemon(daemon.lw, env={"DW_METRICS_FILE": str(path)})
    DistributorWorld().play_night(daemon.lw.snowflake, daemon.lw.coalesce_client(), 63)
    outcome = broken.tick()
    by = {c.check: c for c in outcome.checks}
    # The source total errored, so the total that reconciles against it could not be judged either.
    assert by["total_ebs_onhand_units"].passed is None
    assert by["total_network_onhand_units"].passed is None
    assert by["total_reorder_candidates"].passed is not None


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda m: m["totals"][0].update(hurts="sideways"), "totals.0.hurts"),
        (lambda m: m["totals"][0]["reconcile_with"].update(total="nope"), "reconcile_with.total"),
        (lambda m: m["totals"][2].update(sql="DELETE FROM x"), "totals.2.sql"),
        (lambda m: m["volume"].update(row_counts="guess"), "volume.row_counts"),
        (lambda m: m["business_day"].update(timezone="Mars/Olympus"), "business_day.timezone"),
    ],
)
def test_a_malformed_metrics_file_names_the_field(tmp_path, edit, field):
    metrics = yaml.safe_load((DISTRIBUTOR_DIR / "metrics.yaml").read_text())
    edit(metrics)
    path = tmp_path / "metrics.yaml"
    path.write_text(yaml.safe_dump(metrics))
    with pytest.raises(DwConfigError) as e:
        load_metrics_file(path)
    assert str(path) in str(e.value) and field in str(e.value)
