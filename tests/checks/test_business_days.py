"""Feeds that load on business days only (B2B invoices, bank files, payroll): a series empty on the
weekdays its feed does not load is judged as such, never with an infinite change from an empty night."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar, closed_days
from dw_dagster.checks.judge import judge

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
