"""A cost jump's diagnosis says what grew, with its evidence typed, and its alert reads as a person writes;
an alert never carries an exception's text. (The README walkthrough's cost alert read "the cause could not
be measured: ValidationError: 9 validation errors for Diagnosis evidence.grown_queries.float Input should be
a valid number ...": the finding's lists did not fit the diagnosis' evidence.) On DuckDB under fakesnow."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import dagster as dg
import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.cost.attribution import Spend
from dw_dagster.cost.jump import CostJumpConfig, judge_cost
from dw_dagster.cost.night import cost_finding
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.notifications import incident_message
from dw_dagster.records.incidents import BlastRadius, CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.slack_render import render_message

NIGHT = date(2025, 6, 15)
ASSET = "stage/stg_demand"
QUERIES = ["01bd3c2a-0001", "01bd3c2a-0002", "01bd3c2a-0003"]


@pytest.fixture
def ctx():
    with fakesnow.patch():
        # No ops schema: a diagnosis that reads the recorded histories fails, one that needs none does not.
        conn = snowflake.connector.connect(database="DB", schema="DW_OPS", paramstyle="qmark")
        metrics = MetricsFile.model_validate({"totals": [{
            "name": "daily_demand", "owner": "planning", "asset": ASSET,
            "sql": "SELECT SUM(\"UNITS\") AS \"VALUE\" FROM {{ ref('STAGE', 'STG_DEMAND') }}",
        }]})  # fmt: skip
        spec = dg.AssetSpec(ASSET, kinds={"coalesce"}, owners=["team:demand-planning"],
                            metadata={"dagster/table_name": "DB.STAGE.STG_DEMAND"})  # fmt: skip
        yield DiagnosisContext(
            LineageGraph([spec]),
            metrics,
            lambda loc, name: f'"DB"."{loc}"."{name}"',
            HistorySession(conn, OpsSchema("DB")),
            conn.cursor(),
        )
        conn.close()


def _incident(severity: str = "WARN") -> Incident:
    now = datetime.now(UTC)
    return Incident(incident_id="INC-20250615-9a7f15", cause_key="k", status="open", business_date=NIGHT,
                    title="t", severity=severity, opened_at=now, updated_at=now)  # fmt: skip


def _cost_finding() -> Finding:
    """The nightly cost job's finding for a staging node whose Insert Data doubled tonight on its trend
    (0.9% a night) while its test held."""

    def stages(insert: float) -> dict[str, float]:
        return {"Insert Data": insert, "Test: unique DEMAND_ID": 0.2}

    history = {NIGHT - timedelta(days=70 - i): stages(1.1 * 1.009**i) for i in range(70)}
    tonight = stages(2 * 1.1 * 1.009**70)
    jump = judge_cost(
        f"cost:{ASSET}",
        NIGHT,
        sum(tonight.values()),
        tonight,
        {d: sum(s.values()) for d, s in history.items()},
        history,
        CostJumpConfig(),
    )
    assert jump.is_jump
    spend = Spend(spender="node STAGE.STG_DEMAND", kind="coalesce", credits=sum(tonight.values()),
                  queries=2, job="inventory_nightly", node="STG_DEMAND", node_id="n-stg-demand",
                  location="STAGE", runs=["61"], by_stage=tonight, top_query_ids=QUERIES)  # fmt: skip
    return cost_finding(NIGHT, spend, ASSET, jump, "8c72284e")


def test_a_cost_jump_is_diagnosed_as_the_statements_that_grew_without_a_query(ctx):
    finding = _cost_finding()
    d = diagnose(_incident(), [finding], ctx)
    assert d.classification is CauseClass.COST_INCREASE, d.cause
    assert [s.stage for s in d.statements] == ["Insert Data"]  # the test held
    assert d.statements[0].expected == pytest.approx(1.1 * 1.009**70, rel=0.02)
    assert d.cause == (
        f"{ASSET} cost 4.32 credits on 2025-06-15, +91% on the 2.26 its own nights expected. "
        "Grew: Insert Data: 4.12 credits against an expected 2.05 (+101%)."
    )
    assert d.evidence["costliest_query_ids"] == QUERIES
    assert d.evidence["coalesce_runs"] == ["61"] and d.evidence["job"] == "inventory_nightly"
    assert isinstance(d.evidence["expected_credits"], float)
    assert d.path == [ASSET] and d.owners == ["team:demand-planning"]
    assert d.queries == [] and d.notes == []
    # Stored and read back as the incident's record keeps it.
    assert type(d).model_validate_json(d.model_dump_json()) == d

    message = incident_message(_incident(), d, BlastRadius()).payload()
    shown = render_message(message, ZoneInfo("UTC"))
    assert "*Cause* (cost increase)" in shown
    assert "Grew: Insert Data: 4.12 credits against an expected 2.05 (+101%)" in shown
    assert f"Costliest query ids: {', '.join(QUERIES)}" in shown
    assert "Coalesce runs: 61" in shown
    for raw in ("Error", "could not be measured", "['", "{'"):
        assert raw not in json.dumps(message), raw


def test_a_cost_finding_recorded_before_the_statements_were_typed_is_still_diagnosed(ctx):
    """The walkthrough's finding, as its evidence was stored: each statement's usual night as ``usual``."""
    finding = _cost_finding()
    old = dict(finding.evidence)
    old["grown_queries"] = [{"stage": "Insert Data", "credits": 2.1338, "usual": 1.3503}]
    d = diagnose(_incident(), [finding.model_copy(update={"evidence": old})], ctx)
    assert d.classification is CauseClass.COST_INCREASE
    assert d.statements[0].expected == 1.3503
    assert "Insert Data: 2.13 credits against an expected 1.35 (+58%)" in d.cause


def test_a_diagnosis_that_stops_on_an_error_says_so_in_one_sentence_and_keeps_the_error_in_its_notes(ctx):
    finding = Finding(check_name="total_daily_demand", asset_key=ASSET, business_date=NIGHT,
                      summary="daily_demand = 41,800 units against an expected 62,000", cause_scope="job:x")  # fmt: skip
    d = diagnose(_incident("ERROR"), [finding], ctx)
    assert d.classification is CauseClass.UNKNOWN
    assert d.cause == (
        "daily_demand = 41,800 units against an expected 62,000 (the cause could not be measured: the "
        "diagnosis stopped on an error, recorded in its notes)"
    )
    assert any(
        n.startswith("the diagnosis stopped: QueryFailed: recorded history of daily_demand") for n in d.notes
    )
    shown = render_message(incident_message(_incident("ERROR"), d, BlastRadius()).payload(), ZoneInfo("UTC"))
    assert "QueryFailed" not in shown and "does not exist" not in shown
