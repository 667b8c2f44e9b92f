"""A business that all but closes on its holidays, judged against a past holiday of a few rows: heavy-tailed
amounts on a handful of rows say the day's level loosely, and what tonight misses against them is a sliver
of an ordinary day's number. Less than the smallest move that counts on an ordinary day, it is a WARN, not
an ERROR. Two shapes: a Bavarian weekday wholesaler (German Unity Day on a Sunday on record, All Saints' Day
on a Monday tonight, both at a thirtieth of their weekday) and a seven-day utility's industrial load
(Heritage Day on record, the elections day tonight, both at a twelfth). Guard: a holiday whose like night
ran at half and that fell to a tenth of an ordinary day tonight is still an ERROR."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest
from draws import poisson

from dw_dagster.checks.baseline import Direction
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import RecordedTotal

CONFIG = RecordedTotal.model_validate(
    {"name": "t", "owner": "o", "asset": "a/b", "sql": "SELECT 1 AS VALUE",
     "baseline": {"method": "same_weekday", "weeks": 6, "min_relative_change": 0.25}}
).baseline  # fmt: skip


class Shape:
    def __init__(self, country, business_days, weekday_rows, weekend, holiday, start, tonight):
        self.calendar = BusinessCalendar.model_validate(
            {
                "business_days": business_days,
                "holidays": [{"country": country[:2], "subdivision": country[3:] or None}],
            }
        )
        self.weekday_rows, self.weekend, self.holiday = weekday_rows, weekend, holiday
        self.start, self.tonight = start, tonight

    def rows(self, d: date, holiday: float | None = None) -> float:
        factor = self.weekend if d.weekday() >= 5 else 1.0
        if self.calendar.holiday(d):
            factor *= self.holiday if holiday is None else holiday
        return self.weekday_rows * factor

    def amount(self, rng: random.Random, rows: float) -> float:
        return sum(rng.lognormvariate(5.0, 1.3) for _ in range(poisson(rng, rows)))

    def history(self, seed: int, holiday: float | None = None) -> tuple[random.Random, dict[date, float]]:
        rng, out, d = random.Random(seed), {}, self.start
        while d < self.tonight:
            out[d] = self.amount(rng, self.rows(d, holiday))
            d += timedelta(days=1)
        return rng, out


SHAPES = {
    "weekday wholesaler": Shape(
        "DE-BY", ["mon", "tue", "wed", "thu", "fri"], 1400, 0.04, 0.03, date(2027, 8, 25), date(2027, 11, 1)
    ),
    "seven-day industrial load": Shape(
        "ZA", ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], 220, 0.85, 0.08, date(2026, 8, 27),
        date(2026, 11, 4),
    ),
}  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_a_holiday_at_its_usual_sliver_is_never_an_error(shape):
    s = SHAPES[shape]
    for seed in range(12):
        rng, history = s.history(seed)
        assert [d for d in history if s.calendar.holiday(d)], "a past holiday is on record"
        verdict = judge(
            history, s.tonight, s.amount(rng, s.rows(s.tonight)), CONFIG, Direction.BOTH, calendar=s.calendar
        )
        assert verdict.calendar_day is not None and verdict.severity != "ERROR", (seed, verdict.describe())


@pytest.mark.parametrize("shape", SHAPES)
def test_a_holiday_that_ran_at_half_and_fell_to_a_tenth_is_an_error(shape):
    s = SHAPES[shape]
    errors = []
    for seed in range(6):
        rng, history = s.history(seed, holiday=0.5)
        ordinary = s.weekday_rows * (s.weekend if s.tonight.weekday() >= 5 else 1.0)
        value = s.amount(rng, ordinary * 0.1)
        verdict = judge(history, s.tonight, value, CONFIG, Direction.BOTH, calendar=s.calendar)
        errors.append(verdict.severity == "ERROR")
    # One like night of heavy-tailed amounts says its effect loosely: it may hold a tenth as its noise.
    assert sum(errors) >= 4, errors


@pytest.mark.parametrize("shape", SHAPES)
def test_an_emptied_holiday_or_one_that_runs_at_half_keeps_its_faults(shape):
    """The rule is for days all but closed, and never for an emptied table: a holiday at a sixth of an ordinary
    day emptied, and one at half that lost half its rows, are ERRORs as before."""
    s = SHAPES[shape]
    for seed in range(6):
        rng, history = s.history(seed, holiday=s.holiday * 5)
        verdict = judge(history, s.tonight, 0.0, CONFIG, Direction.BOTH, calendar=s.calendar)
        assert verdict.severity == "ERROR", (seed, verdict.describe())
    errors = []
    for seed in range(6):
        rng, history = s.history(seed, holiday=0.5)
        ordinary = s.weekday_rows * (s.weekend if s.tonight.weekday() >= 5 else 1.0)
        value = s.amount(rng, ordinary * 0.25)
        verdict = judge(history, s.tonight, value, CONFIG, Direction.BOTH, calendar=s.calendar)
        # Judged on its like night as before, never excused as a sliver (one like night of heavy-tailed
        # amounts says its effect loosely: the industrial load's cannot tell a half from noise).
        assert "less than the smallest move that counts" not in verdict.describe(), (seed, verdict.describe())
        errors.append(verdict.severity == "ERROR")
    assert shape == "seven-day industrial load" or sum(errors) >= 3, errors
