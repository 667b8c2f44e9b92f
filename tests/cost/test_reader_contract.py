"""The account usage reader on recorded rows, through its parsing and the attribution (no server)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from dw_dagster.config import DwConfigError
from dw_dagster.cost.attribution import attribute
from dw_dagster.cost.history import AccountUsage, CostViewError, costs_from_rows, read_query_costs
from dw_dagster.cost.tags import parse_query_tag

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "query_costs.json").read_text())
WHERE = '"SNOWFLAKE"."ACCOUNT_USAGE"."QUERY_ATTRIBUTION_HISTORY"'


def _rows(rows=None):
    out = []
    for row in rows or RECORDED["rows"]:
        row = list(row)
        for i in (4, 5):  # the connector returns timestamps
            row[i] = datetime.fromisoformat(row[i]) if isinstance(row[i], str) else row[i]
        out.append(tuple(row))
    return out


def test_recorded_night_is_attributed_to_nodes_jobs_runs_and_checks():
    costs = costs_from_rows(RECORDED["columns"], _rows(), WHERE)
    a = attribute(costs)
    assert a.queries == 7
    assert a.total_credits == pytest.approx(0.412 + 0.031 + 0.004 + 0.006 + 0.009 + 0.05 + 0.2 + 0.4)
    fact = a.nodes[0]
    assert fact.spender == "node SALES.FCT_ORDERS"
    # Two runs of the same node (the nightly run and a rerun) and the accelerated test's credits.
    assert fact.credits == pytest.approx(0.412 + 0.031 + 0.004 + 0.4)
    assert fact.runs == ["18764", "18770"]
    assert fact.by_stage["Insert Data"] == pytest.approx(0.812)
    assert fact.top_query_ids[0] == "01b4-0001"
    assert [j.spender for j in a.jobs] == ["job nightly"]
    assert [r.spender for r in a.runs] == ["run 18764 of job nightly", "run 18770 of job nightly"]
    assert {s.spender for s in a.dw_dagster} == {"check total_daily_revenue", "diagnosis"}
    assert [s.spender for s in a.other] == ["untagged"]
    assert [s.spender for s in a.top(3)] == ["node SALES.FCT_ORDERS", "untagged", "diagnosis"]


def test_a_runs_statements_outside_its_nodes_count_for_its_job_not_as_a_node():
    costs = costs_from_rows(RECORDED["columns"], _rows(), WHERE)
    setup = costs[0].model_copy(
        update={
            "query_id": "01b4-0099",
            "query_tag": '{"coalesce": {"jobName": "nightly", "runID": "18764"}}',
        }
    )
    a = attribute([*costs, setup])
    assert "job nightly, outside its nodes" in [s.spender for s in a.other]
    assert all(n.node or n.node_id for n in a.nodes)
    assert a.jobs[0].credits == pytest.approx(attribute(costs).jobs[0].credits + setup.credits)


def test_a_row_with_unusable_credits_names_the_view_the_query_and_the_column():
    rows = _rows()
    rows[2] = rows[2][:6] + ("n/a",) + rows[2][7:]
    with pytest.raises(
        CostViewError, match=r"QUERY_ATTRIBUTION_HISTORY.*query 01b4-0003: CREDITS_ATTRIBUTED_COMPUTE"
    ):
        costs_from_rows(RECORDED["columns"], rows, WHERE)
    rows = _rows()
    rows[0] = rows[0][:4] + ("yesterday",) + rows[0][5:]
    with pytest.raises(CostViewError, match="query 01b4-0001: START_TIME: expected a timestamp"):
        costs_from_rows(RECORDED["columns"], rows, WHERE)


def test_an_answer_without_a_column_is_an_error_not_zero_credits():
    columns = [c for c in RECORDED["columns"] if c != "CREDITS_ATTRIBUTED_COMPUTE"]
    rows = [r[:6] + r[7:] for r in _rows()]
    with pytest.raises(CostViewError, match="no column CREDITS_ATTRIBUTED_COMPUTE"):
        costs_from_rows(columns, rows, WHERE)


class _Cursor:
    """What a DB-API cursor hands the reader: the statement and its bound values are kept to be read."""

    def __init__(self):
        self.sent = None
        self.description = [(c,) for c in RECORDED["columns"]]

    def execute(self, sql, params):
        self.sent = (sql, params)

    def fetchall(self):
        return _rows()


def test_the_query_binds_the_window_and_quotes_the_views():
    cur = _Cursor()
    since, until = datetime(2025, 6, 17, 5), datetime(2025, 6, 18, 5)
    views = AccountUsage.from_env({"DW_ACCOUNT_USAGE": 'USAGE_SHARE.VIEWS"X'})
    assert len(read_query_costs(cur, views, since, until)) == 7
    sql, params = cur.sent
    assert params == (since, since, until)
    assert '"USAGE_SHARE"."VIEWS""X"."QUERY_ATTRIBUTION_HISTORY" a' in sql
    assert '"USAGE_SHARE"."VIEWS""X"."QUERY_HISTORY" h' in sql
    assert "2025" not in sql
    with pytest.raises(DwConfigError, match="DW_ACCOUNT_USAGE: expected DATABASE.SCHEMA"):
        AccountUsage.from_env({"DW_ACCOUNT_USAGE": "JUSTONE"})
    with pytest.raises(ValueError, match="empty window"):
        read_query_costs(cur, views, until, since)


def test_tags_of_other_tools_are_other_spenders_never_errors():
    assert parse_query_tag("coalesce run 12").kind == "other"
    assert parse_query_tag('{"coalesce": "not an object"}').kind == "other"
    assert parse_query_tag("{broken json").spender == "untagged ({broken json)"
    assert parse_query_tag(None).spender == "untagged"
    # A run's statements outside any node (its schemas) carry the run's fields only.
    assert (
        parse_query_tag('{"coalesce": {"jobName": "nightly", "runID": "7"}}').spender
        == "job nightly, outside its nodes"
    )
    assert parse_query_tag('{"coalesce": {"runID": "7"}}').spender == "coalesce run 7"
    origin = parse_query_tag('{"app": "dw-dagster", "purpose": "ops.migrate", "job": "ops_migrate"}')
    assert origin.spender == "dw-dagster ops_migrate"
