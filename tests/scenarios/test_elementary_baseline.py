"""The Elementary 0.25.1 baseline's arithmetic against hand-computed series, on the local Snowflake server
alone (an ops schema and a source table of its own, no world): the 15 points a nightly test without a
timestamp column trains on, the previous night scored again, the 14 daily buckets of a timestamped source,
source freshness and schema changes. The constants' sources are in ``local/dw_local/scenarios/baseline.py``."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest
from ops_warehouse import ops_schema, warehouse

from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_local.scenarios.baseline import (
    ElementaryBaseline,
    bucket_window,
    detection_scores,
    run_window,
    z_score,
)

__all__ = ["warehouse"]

DB = "DW_OPS_TEST"
DAY = date(2026, 6, 22)
RUN_END = datetime(2026, 6, 23, 8, 31, tzinfo=UTC)  # the job ran the morning after the business day
ENDED = RUN_END + timedelta(minutes=2)
RAW = f'"{DB}"."RAW_PAY"."PAYMENTS"'


def _graph() -> LineageGraph:
    """A source the fact inner-joins on K (the fact's join text as Coalesce gives it), and the fact."""
    join = (
        "FROM {{ ref('RAW_PAY', 'PAYMENTS') }} \"PAYMENTS\"\n"
        'INNER JOIN {{ ref(\'CORE\', \'DIM_K\') }} "DIM_K" ON "PAYMENTS"."K" = "DIM_K"."K"'
    )
    return LineageGraph(
        [
            dg.AssetSpec("raw_pay/payments", metadata={"dagster/table_name": f"{DB}.RAW_PAY.PAYMENTS",
                                                       "coalesce/node_type": "Source"}),
            dg.AssetSpec("core/dim_k", metadata={"dagster/table_name": f"{DB}.CORE.DIM_K"}),
            dg.AssetSpec("core/fct", deps=["raw_pay/payments", "core/dim_k"],
                         metadata={"dagster/table_name": f"{DB}.CORE.FCT", "coalesce/join": join}),
        ]
    )  # fmt: skip


METRICS = MetricsFile.model_validate(
    {
        "totals": [
            {"name": "paid", "owner": "t", "asset": "core/fct", "group_keys": ["CHANNEL"],
             "sql": "SELECT \"CHANNEL\", SUM(\"AMOUNT\") AS \"VALUE\" FROM {{ ref('CORE', 'FCT') }} GROUP BY 1"},
        ],
        "volume": {"assets": ["core/*"]},
        "freshness": {
            "inputs": [{"asset": "core/fct", "column": "TS", "input": "raw_pay/payments", "input_column": "TS",
                        "max_input_age_hours": 26}],
        },
    }
)  # fmt: skip


@pytest.fixture(scope="module")
def setup(warehouse):
    lw, wh = warehouse
    ops = ops_schema(wh, "OPS_ELEMENTARY")
    with lw.snowflake.connect(database=DB) as conn:
        cur = conn.cursor()
        for schema in ("RAW_PAY", "CORE"):
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{DB}"."{schema}"')
        cur.execute(f'CREATE OR REPLACE TABLE {RAW} ("ID" NUMBER, "K" VARCHAR, "TS" TIMESTAMP_NTZ)')
        cur.execute(f'CREATE OR REPLACE TABLE "{DB}"."CORE"."FCT" ("K" VARCHAR, "CHANNEL" VARCHAR)')
        cur.execute(f'CREATE OR REPLACE TABLE "{DB}"."CORE"."DIM_K" ("K" VARCHAR)')
    return lw, ops


def _record(cur, ops, metric: str, values: dict[date, float], groups: dict[date, dict] | None = None):
    for d, v in values.items():
        cur.execute(
            f"INSERT INTO {ops.table('METRIC_HISTORY')} (METRIC, BUSINESS_DATE, VALUE, GROUPS, RECORDED_AT)"
            " VALUES (%s, %s, %s, %s, %s)",
            (metric, d, v, json.dumps((groups or {}).get(d, {})), datetime(2026, 6, 23, 8, 40, tzinfo=UTC)),
        )


def test_the_window_is_fifteen_nightly_points_and_the_previous_night_is_scored_again(setup):
    lw, ops = setup
    days = [DAY - timedelta(days=k) for k in range(15, -1, -1)]  # D-15 .. D
    # D-15 is 1000 (outside the window), D-14 .. D-1 alternate 90, 110 (7 each), tonight 200.
    paid = {d: (1000.0 if i == 0 else 90.0 if i % 2 else 110.0) for i, d in enumerate(days[:-1])} | {
        DAY: 200.0
    }
    # Rows: 95, 105 alternating from D-14 to D-2, 300 on D-1, 100 tonight.
    rows = {d: (95.0 if i % 2 else 105.0) for i, d in enumerate(days[1:-2], start=1)} | {
        days[-2]: 300.0,
        DAY: 100.0,
    }
    web = {d: {"CHANNEL=web": 50.0} for d in days}  # flat: its deviation is 0, its score 0
    with lw.snowflake.connect(database=DB) as conn:
        cur = conn.cursor()
        _record(cur, ops, "paid", paid, web)
        _record(cur, ops, "volume:core/fct", rows)
        baseline = ElementaryBaseline(METRICS, ops, _graph(), ["core/fct"])
        found = baseline._metric_alarms(cur, DAY, untested=set())
        assert baseline._metric_alarms(cur, DAY, untested={"core/fct"}) == []  # not built: not tested
    by = {(a.monitor, a.rescored): a for a in found}
    assert set(by) == {("column_anomalies(sum)", False), ("volume_anomalies", True)}, found
    # Tonight's 200 on D-14 .. D (15 points, not D-15's 1000): mean 1600 / 15 = 106.667; squares about it
    # 7 x 16.667^2 + 7 x 3.333^2 + 93.333^2 = 10,733.3; sample variance / 14 = 766.67, sd 27.689;
    # z = 93.333 / 27.689 = 3.3708. On 14 points (D-13 .. D) it would be 3.2521, on 16 about 1.5.
    tonight = by[("column_anomalies(sum)", False)]
    assert (tonight.series, tonight.asset, tonight.value) == ("paid", "core/fct", 200.0)
    assert tonight.mean == pytest.approx(106.667, abs=1e-3) and tonight.z == pytest.approx(3.3708, abs=1e-3)
    # Last night's 300 scored again on D-14 .. D-1 (14 points: 7 x 95, 6 x 105, 300): mean 1595 / 14 = 113.93;
    # squares 2,508.2 + 478.4 + 34,622.5 = 37,609.1, / 13 = 2,893.0, sd 53.787; z = 186.07 / 53.787 = 3.4594.
    again = by[("volume_anomalies", True)]
    assert again.value == 300.0 and again.z == pytest.approx(3.4594, abs=1e-3)
    assert again.recorded_at == datetime(2026, 6, 23, 8, 40, tzinfo=UTC)


def test_a_short_or_flat_series_is_not_scored_or_scores_zero():
    assert z_score([], 5.0) is None  # one point: no training set
    assert z_score([4.0], 5.0)[2] == pytest.approx(0.7071, abs=1e-4)  # (5 - 4.5) / 0.7071
    assert z_score([7.0] * 14, 7.0) == (7.0, 0.0, 0.0)
    # The detection period is the last two days of the points, whatever else the window holds.
    points = [(DAY - timedelta(days=k), float(k)) for k in range(5)]
    scored = detection_scores(points, DAY)
    assert [(d, rescored) for d, _, _, rescored in scored] == [(DAY - timedelta(days=1), True), (DAY, False)]
    # Tonight's metric NULL (not scored): the latest point is last night's, and the two before it are repeats.
    scored = detection_scores(points[1:], DAY)
    assert [(d, rescored) for d, _, _, rescored in scored] == [
        (DAY - timedelta(days=2), True),
        (DAY - timedelta(days=1), True),
    ]
    assert run_window(DAY) == date(2026, 6, 8)


def test_null_rates_of_a_join_key_are_read_in_daily_buckets_from_the_source(setup):
    lw, ops = setup
    first, end = bucket_window(RUN_END.replace(tzinfo=None))
    assert (first, end) == (datetime(2026, 6, 9), datetime(2026, 6, 23))  # 14 complete buckets
    with lw.snowflake.connect(database=DB) as conn:
        cur = conn.cursor()
        cur.execute(f"DELETE FROM {RAW}")
        # Ten rows a day from 8 June; on 22 June half have no K; the incomplete 23 June bucket has only NULLs.
        for day in range(8, 24):
            for i in range(10):
                key = None if (day == 22 and i < 5) or day == 23 else "A"
                cur.execute(f"INSERT INTO {RAW} VALUES (%s, %s, %s)", (i, key, datetime(2026, 6, day, 3, i)))
        baseline = ElementaryBaseline(METRICS, ops, _graph(), ["core/fct"])
        assert baseline.join_keys == {"raw_pay/payments": ["K"]}
        (alarm,) = baseline._null_rate_alarms(cur, RUN_END.replace(tzinfo=None), ENDED)
    # 13 buckets at 0% and 50%: mean 3.571, squares 13 x 3.571^2 + 46.43^2 = 2,321.4, / 13 = 178.57,
    # sd 13.363; z = 46.43 / 13.363 = 3.4744, the most 14 points allow (13 / sqrt(14)).
    assert (alarm.monitor, alarm.asset, alarm.series) == (
        "column_anomalies(null_percent)",
        "raw_pay/payments",
        "raw_pay/payments.K",
    )
    assert alarm.value == 50.0 and alarm.z == pytest.approx(3.4744, abs=1e-3) and not alarm.rescored


def test_source_freshness_errors_past_its_error_after_and_schema_changes_since_the_last_run(setup):
    lw, ops = setup
    with lw.snowflake.connect(database=DB) as conn:
        cur = conn.cursor()
        cur.execute(f"DELETE FROM {RAW}")
        cur.execute(f"INSERT INTO {RAW} VALUES (1, 'A', %s)", (datetime(2026, 6, 22, 2, 31),))  # 30 h old
        baseline = ElementaryBaseline(METRICS, ops, _graph(), ["core/fct"])
        (stale,) = baseline._freshness_alarms(cur, RUN_END.replace(tzinfo=None), ENDED)
        assert (stale.asset, stale.value, stale.detail) == (
            "raw_pay/payments",
            pytest.approx(30.0),
            "30.0 h old (error_after 26 h)",
        )
        cur.execute(f"INSERT INTO {RAW} VALUES (2, 'A', %s)", (datetime(2026, 6, 22, 22, 31),))  # 10 h old
        assert baseline._freshness_alarms(cur, RUN_END.replace(tzinfo=None), ENDED) == []
        assert baseline._schema_alarms(cur, ENDED, set()) == []  # the first run only takes the snapshot
        cur.execute(f'ALTER TABLE {RAW} ADD COLUMN "CHANNEL" VARCHAR')
        (changed,) = baseline._schema_alarms(cur, ENDED, set())
        assert (changed.monitor, changed.asset, changed.detail) == (
            "schema_changes",
            "raw_pay/payments",
            "column CHANNEL added",
        )
        assert baseline._schema_alarms(cur, ENDED, set()) == []  # reported once, against the last run
        cur.execute(f'ALTER TABLE {RAW} DROP COLUMN "CHANNEL"')
