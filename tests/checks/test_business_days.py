"""Feeds that load on business days only (B2B invoices, bank files, payroll): a series empty on the
weekdays its feed does not load is judged as such, never with an infinite change from an empty night."""

from __future__ import annotations

import random
from datetime import date, timedelta

import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar, closed_days
from dw_dagster.checks.judge import judge
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.recorded_totals import total_query, total_value

MONDAY = date(2025, 10, 6)


def _weekdays_only(level: float, first: date, last: date, seed: int) -> dict[date, float]:
    """A business-day feed: ``level`` a weekday with 8% noise, nothing at weekends."""
    rng, out, d = random.Random(seed), {}, first
    while d < last:
        out[d] = round(level * (1 + rng.gauss(0, 0.08))) if d.weekday() < 5 else 0.0
        d += timedelta(days=1)
    return out


# Two shapes: the invoice lines of a B2B billing fact (rows, a stock-like day-over-day baseline), and the
# files of a bank's settlement feed (a small count: judged on absolute change).
SHAPES = {
    "invoice_lines": (1800.0, BaselineConfig(method="day_over_day", days=28, min_relative_change=0.1)),
    "bank_files": (40.0, BaselineConfig(method="day_over_day", days=28, min_relative_change=0.1)),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_an_empty_weekend_and_the_monday_after_raise_nothing(shape: str) -> None:
    level, config = SHAPES[shape]
    cal = BusinessCalendar()
    hist = _weekdays_only(level, MONDAY - timedelta(weeks=6), MONDAY + timedelta(weeks=1), seed=7)
    saturday, sunday, monday = (MONDAY + timedelta(days=k) for k in (5, 6, 7))
    for day in (saturday, sunday):
        j = judge(hist, day, 0.0, config, Direction.DOWN, calendar=cal)
        assert j.severity is None and not j.insufficient
        assert "a day this series is closed" in j.describe()
    hist[saturday] = hist[sunday] = 0.0
    # Monday is measured from Friday, not from the empty Sunday (an infinite change).
    j = judge(hist, monday, level * 1.03, config, Direction.DOWN, calendar=cal)
    assert j.severity is None and j.result.expected == pytest.approx(level, rel=0.2)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_empty_business_day_still_raises(shape: str) -> None:
    level, config = SHAPES[shape]
    hist = _weekdays_only(level, MONDAY - timedelta(weeks=6), MONDAY + timedelta(weeks=1), seed=7)
    tuesday = MONDAY + timedelta(days=8)
    hist[tuesday - timedelta(days=1)] = level
    j = judge(hist, tuesday, 0.0, config, Direction.DOWN, calendar=BusinessCalendar())
    assert j.severity == "ERROR" and j.result.relative_change == -1.0


def test_only_routinely_empty_weekdays_are_closed() -> None:
    hist = _weekdays_only(500, MONDAY - timedelta(weeks=8), MONDAY, seed=3)
    assert closed_days(hist, MONDAY, 0.0).weekdays == {5, 6}
    # Empty on one Wednesday in eight (a fault, unflagged) does not close Wednesdays.
    hist[MONDAY - timedelta(days=5)] = 0.0
    assert closed_days(hist, MONDAY, 0.0).weekdays == {5, 6}
    # A series empty every day has no closed days: it is judged as it is.
    assert not closed_days(dict.fromkeys(hist, 0.0), MONDAY, 0.0).weekdays


# An ungrouped total over a business-day feed: the SUM of an empty day is NULL, and reads as 0; a NULL over
# rows that exist is still a fault. Two shapes: B2B invoices read straight from their fact, and a payroll's
# posted pay runs through a CTE. On DuckDB under fakesnow.
TOTAL_SHAPES = {
    "invoices": (
        'CREATE TABLE "DB"."BILLING"."FCT_INVOICES" ("INVOICE_ID" INT, "AMOUNT" NUMBER(12, 2))',
        'INSERT INTO "DB"."BILLING"."FCT_INVOICES" VALUES (1, {amount}), (2, {amount})',
        """SELECT SUM("AMOUNT") AS "VALUE" FROM {{ ref('BILLING', 'FCT_INVOICES') }}""",
    ),
    "pay_runs": (
        'CREATE TABLE "DB"."BILLING"."PAY_RUNS" ("EMPLOYEE_ID" INT, "NET_PAY" DOUBLE, "STATUS" VARCHAR)',
        """INSERT INTO "DB"."BILLING"."PAY_RUNS" VALUES (7, {amount}, 'posted'), (8, 10, 'draft')""",
        """WITH "POSTED" AS (SELECT "NET_PAY" FROM {{ ref('BILLING', 'PAY_RUNS') }} WHERE "STATUS" = 'posted')
        SELECT SUM("NET_PAY") AS "VALUE" FROM "POSTED\"""",
    ),
}


@pytest.mark.parametrize("shape", TOTAL_SHAPES)
def test_an_ungrouped_sum_of_an_empty_day_is_zero_and_of_null_values_a_fault(shape: str) -> None:
    create, insert, sql = TOTAL_SHAPES[shape]
    total = RecordedTotal(name="day_amount", owner="finance", asset="billing/fct", sql=sql)
    query = total_query(total, lambda loc, node: f'"DB"."{loc}"."{node}"')
    assert query.part is not None  # measured in the night's statement, its rows counted with it

    def tonight(cur):
        return total_value(
            total, query.sql, query.columns, measure(cur, [query.part], Binds())[query.part.key]
        )

    with fakesnow.patch():
        conn = snowflake.connector.connect(database="DB", schema="BILLING", paramstyle="qmark")
        cur = conn.cursor()
        cur.execute('CREATE SCHEMA IF NOT EXISTS "DB"."BILLING"')
        cur.execute(create)
        empty = tonight(cur)
        assert (empty.value, empty.null_value) == (0.0, False)
        cur.execute(insert.format(amount="NULL"))
        assert tonight(cur).null_value  # rows whose values are NULL: never counted as zero
        cur.execute(insert.format(amount="25.5"))
        assert (tonight(cur).value, tonight(cur).null_value) == (51.0 if shape == "invoices" else 25.5, False)
        conn.close()
