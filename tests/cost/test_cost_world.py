"""Cost attribution on the seeded distributor world: the reference night's statements, as the local
Snowflake recorded them in its ACCOUNT_USAGE views, through `dw-dagster cost report` and the nightly job."""

from __future__ import annotations

import json
from collections import defaultdict

import dagster as dg
import pytest
from click.testing import CliRunner

from dw_dagster.app.cli import main
from dw_dagster.checks import load_metrics_file
from dw_dagster.checks.baseline import BaselineConfig
from dw_dagster.checks.history import HistoryStore
from dw_dagster.cost import COST_CHECK
from dw_dagster.cost.jump import CostJumpConfig
from dw_dagster.cost.night import COST_JOB, COST_KEY, attribute_night, night_window, node_assets
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import warehouse_from_env

pytestmark = pytest.mark.world  # the seeded distributor world


@pytest.fixture(scope="module")
def reference_night(seeded_world):
    from dw_local.daemon import LocalDaemon
    from dw_local.worlds.distributor.generator import DistributorWorld

    lw = seeded_world
    daemon = LocalDaemon(lw, env={"DW_COST_LATENCY_HOURS": "0"})
    night = DistributorWorld().play_reference_night(lw.snowflake, lw.coalesce_client())
    outcome = daemon.tick(at=night.watched_at)  # the checks, the incident and its diagnosis
    assert outcome.failed(), "the reference night opens an incident"
    # The nightly job, as the sensor's first request runs it: the night, and the nights before it.
    job = daemon.defs.resolve_job_def(COST_JOB)
    config = {"attribute_costs": {"config": {"night": night.business_date.isoformat(), "backfill_nights": 7}}}
    run = job.execute_in_process(run_config={"ops": config}, instance=daemon.instance)
    return lw, daemon, night, run


def _metrics(daemon):
    return load_metrics_file(daemon.settings.metrics_file)


def _credits_by_node(lw, start, end):
    """The view's rows summed by the node their Coalesce tag names, read apart from the product."""
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute(
            "SELECT QUERY_TAG, CREDITS_ATTRIBUTED_COMPUTE FROM SNOWFLAKE.ACCOUNT_USAGE.QUERY_ATTRIBUTION_HISTORY"
            " WHERE START_TIME >= %s AND START_TIME < %s",
            (start, end),
        )
        out = defaultdict(float)
        for tag, credits in cur.fetchall():
            if tag and tag.startswith('{"coalesce"'):
                c = json.loads(tag)["coalesce"]
                if "nodeName" not in c:
                    continue  # the run's own statements (its schemas), outside any node
                out[f"{c['storageLocation']}.{c['nodeName']}"] += credits
    return out


def test_cost_report_names_the_costliest_nodes_of_the_reference_night(reference_night):
    lw, daemon, night, _ = reference_night
    day = night.business_date.isoformat()
    result = CliRunner().invoke(main, ["cost", "report", "--since", day, "--until", day, "--top", "20"])
    assert result.exit_code == 0, result.output
    expected = _credits_by_node(lw, *night_window(_metrics(daemon).business_day, night.business_date))
    ranked = sorted(expected, key=lambda n: -expected[n])
    assert len(ranked) >= 5, "every node the nightly job built was tagged"
    nodes = [
        line.split()[2]
        for line in result.output.splitlines()
        if line.strip()[:1].isdigit() and " node " in line
    ]
    assert nodes[:3] == ranked[:3]
    # The staging node that reads the whole demand history scans the most rows, night after night.
    assert ranked[0] == "STAGE.STG_DEMAND"
    # dw-dagster's own statements are attributed too: the night's checks and the incident's diagnosis.
    assert "check nightly_checks" in result.output
    assert "diagnosis" in result.output
    assert "job inventory_nightly" in result.output


def test_the_nightly_job_records_credits_per_node_as_plottable_metadata(reference_night):
    lw, daemon, night, run = reference_night
    assert run.success
    event = daemon.instance.get_latest_materialization_event(COST_KEY)
    md = event.asset_materialization.metadata
    node = md["credits: node inventory/fct_inventory_position"]
    assert isinstance(node, dg.FloatMetadataValue) and node.value > 0
    assert md["total_credits"].value >= node.value
    assert md["cost_jumps"].value == 0, "the reference night is wrong in value, not in cost"
    # The backfill recorded each node's nights: the baseline exists from the first run.
    ops = OpsSchema(daemon.settings.database, "DW_OPS")
    with HistoryStore(warehouse_from_env(), ops).session("test") as history:
        past = history.metric_history("cost:inventory/fct_inventory_position", night.business_date, 8)
    assert len(past) == 7
    assert all(r.groups.get("Insert Data") for r in past.values())
    assert IncidentStore(warehouse_from_env(), ops).list()  # the reference incident; no cost one


def test_a_node_whose_cost_rose_beyond_its_threshold_opens_a_finding_for_its_asset(reference_night):
    """With a threshold any rise passes, the nodes the reference night's new rows reach cost more than
    their trend; the costliest of them is recorded as a finding on its own asset, with the statements that grew."""
    lw, daemon, night, _ = reference_night
    specs = [s for s in daemon.repo.assets_defs_by_key.values() for s in s.specs]
    assets = node_assets(specs)
    ops = OpsSchema(daemon.settings.database, _metrics(daemon).ops_schema)
    # Any rise beyond the trend of the last nights is a jump here; a finding only for the costliest node
    # the new rows reach (one finding: the path a real jump takes; the default rules need a same-weekday
    # baseline and a 25% rise).
    md = daemon.instance.get_latest_materialization_event(COST_KEY).asset_materialization.metadata
    reached = {"stage/stg_onhand", "inventory/fct_inventory_position", "mart/mart_reorder_candidates"}
    fact = max(reached, key=lambda a: md[f"credits: node {a}"].value)
    lenient = CostJumpConfig(
        baseline=BaselineConfig(
            method="day_over_day", days=7, min_points=3, small_below=0, min_relative_change=0.0,
            z_threshold=1e-6, calendar=False,
        ),
        min_credits=md[f"credits: node {fact}"].value - 1e-6,  # the metadata rounds to 6 places
    )  # fmt: skip
    _, jumps, found = attribute_night(
        warehouse_from_env(), ops, _metrics(daemon), assets, night.business_date, config=lenient
    )
    incidents = [
        IncidentStore(warehouse_from_env(), ops).record_finding(f).incident.incident_id for f in found
    ]
    # The new org's rows reach the on-hand staging node, the fact and the reorder list (31 -> 195 rows):
    # those cost more than their trend; the demand nodes, large but on trend, do not.
    jumped = {j.series.removeprefix("cost:") for j in jumps if j.is_jump}
    assert jumped == reached
    assert len(set(incidents)) == 1
    store = IncidentStore(warehouse_from_env(), ops)
    findings = [e for i in set(incidents) for e in store.events(i, kind="finding")]
    assert {f.detail["check_name"] for f in findings} == {COST_CHECK}
    assert {f.detail["asset_key"] for f in findings} == {fact}
    assert all(f.detail["severity"] == "WARN" and f.detail["evidence"]["top_query_ids"] for f in findings)
    assert any(f.detail["evidence"]["grown_queries"] for f in findings)
