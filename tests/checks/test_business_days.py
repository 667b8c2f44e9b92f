"""Feeds that load on business days only (B2B invoices, bank files, payroll): a series empty on the
weekdays its feed does not load is judged as such, never with an infinite change from an empty night."""

from __future__ import annotations

import random
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import dagster as dg
import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar, closed_days
from dw_dagster.checks.freshness import InputFreshnessChecks, allowed_age
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import InputFreshness, MetricsFile, RecordedTotal
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


# Input freshness of a feed that loads on business days only: its allowance follows its own loads. Two
# shapes: B2B invoices loaded through the working day (none at weekends), and a bank's settlement files
# delivered at 06:00 for the business day before (Tuesday to Saturday: on Monday night the newest is
# Friday's, delivered on Saturday).
TORONTO = ZoneInfo("America/Toronto")
FEEDS = {
    "invoices": (lambda d: d.weekday() < 5, time(9), time(17)),
    "bank_files": (lambda d: 1 <= d.weekday() <= 5, time(6), time(6)),
}
RULE = InputFreshness(asset="billing/fct", column="LOADED_AT", input="raw/feed", input_column="LOADED_AT")


def _loads(shape: str, first: date, last: date, missed: date | None = None) -> list[datetime]:
    loads_on, start, end = FEEDS[shape]
    days = (first + timedelta(days=k) for k in range((last - first).days + 1))
    return [
        datetime.combine(d, t, TORONTO)
        for d in days
        if loads_on(d) and d != missed and not CA_ON.holiday(d)
        for t in {start, end}
    ]


CA_ON = BusinessCalendar.model_validate({"holidays": [{"country": "CA", "subdivision": "ON"}]})


def _nights(shape: str, first: date, last: date, missed: date | None = None, weeks: int = 8):
    """Each business date's build (04:30 the morning after), its input's latest load then, and the input's
    record of ``weeks`` before it, as the checks record it."""
    loads = _loads(shape, first - timedelta(weeks=weeks + 1), last, missed)
    past: dict[date, Recorded] = {}
    day = first - timedelta(weeks=weeks)
    while day <= last:
        built = datetime.combine(day + timedelta(days=1), time(4, 30), TORONTO)
        latest = max(t for t in loads if t <= built)
        if day >= first:
            yield day, built, latest, dict(past)
        past[day] = Recorded(business_date=day, value=latest.timestamp())
        day += timedelta(days=1)


@pytest.mark.parametrize("shape", FEEDS)
def test_a_business_day_feed_is_allowed_its_own_gaps_and_no_more(shape: str) -> None:
    first, last = date(2026, 9, 28), date(2026, 10, 18)  # Thanksgiving: Monday 12 October
    for day, built, latest, past in _nights(shape, first, last):
        allowed = allowed_age(RULE, past, day, CA_ON)
        assert built - latest <= timedelta(hours=allowed.hours), (day, allowed.describe())
        if day == date(2026, 10, 12):  # the feed does not load on its business's holidays either
            assert "Thanksgiving" in allowed.describe()
    # The fixed 26 h of old fails every Monday (or Sunday) night of such a feed.
    ages = [(built - latest) / timedelta(hours=1) for _, built, latest, _ in _nights(shape, first, last)]
    assert max(ages) > 26
    # A business day whose load never came fails the night after it, weekend or not.
    for missed in (date(2026, 10, 2), date(2026, 10, 6)):  # a Friday, a Tuesday
        late = [
            (day, allowed_age(RULE, past, day, CA_ON))
            for day, built, latest, past in _nights(shape, missed, missed + timedelta(days=4), missed)
            if built - latest > timedelta(hours=allowed_age(RULE, past, day, CA_ON).hours)
        ]
        assert late, f"{shape}: the missed load of {missed} passed"


def test_a_cadence_the_calendar_does_not_know_is_learned_from_three_weeks_of_loads() -> None:
    """Bank files come Tuesday to Saturday: Monday is a business day that never loads. Its first Mondays
    fail (their nights count all the same); from three on record, Monday nights pass."""
    monday = date(2026, 10, 19)
    for weeks, passes in ((2, False), (4, True)):  # two Mondays on record, then four
        ((day, built, latest, past),) = _nights("bank_files", monday, monday, weeks=weeks)
        allowed = allowed_age(RULE, past, day, CA_ON)
        assert (built - latest <= timedelta(hours=allowed.hours)) is passes, allowed.describe()
    assert (
        allowed.describe() == "74 h: 26 h, and 24 h for each of 2 nights it does not load on (Sunday, Monday)"
    )


def test_a_configured_age_counts_from_a_loading_night_and_a_daily_feed_keeps_26_hours() -> None:
    """A file that sets the age (metrics files copy 26 h for every input) still gets the feed's quiet nights
    on top: Monday morning's build (of Sunday) sees Friday's load, within 30 h + 48 h; Tuesday's is back
    to 30 h."""
    monday = date(2026, 10, 19)
    set_ = InputFreshness.model_validate({**RULE.model_dump(), "max_input_age_hours": 30})
    nights = _nights("invoices", monday - timedelta(days=2), monday)
    for (day, built, latest, past), hours in zip(nights, (30 + 24, 30 + 48, 30), strict=True):
        allowed = allowed_age(set_, past, day, CA_ON)
        assert allowed.hours == hours, (day, allowed.describe())
        assert built - latest <= timedelta(hours=allowed.hours)
    # A feed that loads every night: 26 h every night, its weekends included.
    daily = {
        monday - timedelta(days=k): Recorded(business_date=monday - timedelta(days=k), value=1e9 - 86400 * k)
        for k in range(1, 57)
    }
    assert {allowed_age(RULE, daily, monday + timedelta(days=k), CA_ON).hours for k in range(7)} == {26}


@pytest.mark.parametrize(
    ("table", "column", "kinds", "age_hours"),
    [
        # A DATE fact over an input stamped in UTC (18:00 UTC is 14:00 in Toronto): 14.5 h old at 04:30.
        ("FCT_INVOICES", "INVOICE_DATE", ("DATE", "TIMESTAMP_NTZ"), 14.5),
        # A DATE on both sides: the day's end, 4.5 h before the build (read as midnight UTC: 32.5 h, stale).
        ("PAY_RUNS", "PAY_DATE", ("DATE", "DATE"), 4.5),
    ],
)
def test_a_date_load_column_covers_its_whole_day(
    table: str, column: str, kinds: tuple[str, str], age_hours: float
) -> None:
    """A DATE load column is read as the end of its day in the business's zone: a table that holds the
    day's DATE holds every load of that day, and a DATE input is not up to a day older than it is."""
    specs = [
        dg.AssetSpec(
            key=["billing", name.lower()],
            metadata={
                "dagster/table_name": f"DB.BILLING.{name}",
                "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(name=column, type=kind)]),
            },
        )
        for name, kind in zip((table, f"RAW_{table}"), kinds, strict=True)
    ]
    rule = {"asset": f"billing/{table.lower()}", "column": column, "input": f"billing/raw_{table.lower()}"}
    metrics = MetricsFile.model_validate(
        {
            "business_day": {"timezone": "America/Toronto"},
            "freshness": {"inputs": [{**rule, "input_column": column}]},
        }
    )
    checks = InputFreshnessChecks(metrics, specs, [specs[0].key])
    with fakesnow.patch():
        conn = snowflake.connector.connect(database="DB", schema="BILLING", paramstyle="qmark")
        cur = conn.cursor()
        cur.execute('CREATE SCHEMA IF NOT EXISTS "DB"."BILLING"')
        for name, kind, value in (
            (table, kinds[0], "2026-10-06"),
            (f"RAW_{table}", kinds[1], "2026-10-06 18:00"),
        ):
            cur.execute(f'CREATE TABLE "DB"."BILLING"."{name}" ("{column}" {kind})')
            cur.execute(f'INSERT INTO "DB"."BILLING"."{name}" VALUES (\'{value}\'::{kind})')
        ((held, latest),) = measure(cur, checks.parts(), Binds())[("freshness", rule["asset"], rule["input"])]
        conn.close()
    held = checks._instant(rule["asset"], column, held)
    latest = checks._instant(rule["input"], column, latest)
    end_of_day = datetime(2026, 10, 7, tzinfo=TORONTO)
    assert held == end_of_day and held >= latest  # the table holds every load of its day: no lag
    built = datetime(2026, 10, 7, 4, 30, tzinfo=TORONTO)
    assert built - latest == timedelta(hours=age_hours)
