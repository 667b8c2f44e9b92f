"""A business that all but closes on a public holiday, met on the first holiday on its record: a fall beyond
what a holiday explains (60%) is a closure for it or a loss, which the record cannot tell apart, so a WARN,
never an ERROR. Two shapes: a weekday wholesaler whose weekend webshop trickle all but stops on a Sunday
holiday (German Unity Day, Sunday 3 October 2027), and a seven-day utility's industrial load on a weekday
holiday (Heritage Day, Thursday 24 September 2026). Guards: a rise tenfold, a fall on an ordinary
day, and a holiday whose effect size the team set (it said how much a holiday explains) are ERRORs."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import Direction
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal

CONFIG = RecordedTotal.model_validate(
    {"name": "t", "owner": "o", "asset": "a/b", "sql": "SELECT 1 AS VALUE",
     "baseline": {"method": "same_weekday", "weeks": 6, "min_relative_change": 0.3}}
).baseline  # fmt: skip


class Shape:
    def __init__(self, country, business_days, weekday, weekend, holiday_factor, tonight, ordinary):
        self.country, self.business_days = country, business_days
        self.weekday, self.weekend, self.holiday_factor = weekday, weekend, holiday_factor
        self.tonight, self.ordinary = tonight, ordinary

    def calendar(self, **effect) -> BusinessCalendar:
        # As the metrics file takes it from the context's country where it names no holidays.
        file = MetricsFile.model_validate({"calendar": {"business_days": self.business_days}})
        cal = file.with_country(self.country).calendar
        if effect:
            cal = BusinessCalendar.model_validate(
                {"business_days": self.business_days, "holidays": [{"country": self.country, **effect}]}
            )
        return cal

    def history(self, seed: int) -> dict[date, float]:
        rng, out = random.Random(seed), {}
        # Six weeks: Women's Day (10 August 2026) is before the utility's record.
        d = self.tonight - timedelta(days=42)
        while d < self.tonight:
            level = self.weekday if d.weekday() < 5 else self.weekend
            out[d] = level * rng.lognormvariate(0, 0.12)
            d += timedelta(days=1)
        return out

    def level(self, d: date) -> float:
        return self.weekday if d.weekday() < 5 else self.weekend


SHAPES = {
    "weekday wholesaler, Sunday holiday": Shape(
        "DE", ["mon", "tue", "wed", "thu", "fri"], 700_000.0, 28_000.0, 0.05, date(2027, 10, 3), date(2027, 9, 26)
    ),
    "seven-day utility, weekday holiday": Shape(
        "ZA", ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], 90_000.0, 70_000.0, 0.12,
        date(2026, 9, 24), date(2026, 9, 23),
    ),
}  # fmt: skip


def _judged(shape: Shape, day: date, factor: float, seed: int, **effect):
    cal = shape.calendar(**effect)
    history = shape.history(seed)
    assert not any(cal.holiday(d) for d in history), "the record must hold no earlier holiday"
    return judge(history, day, shape.level(day) * factor, CONFIG, Direction.BOTH, calendar=cal)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_closure_on_the_first_public_holiday_on_record_is_a_warn(shape):
    s = SHAPES[shape]
    for seed in range(6):
        verdict = _judged(s, s.tonight, s.holiday_factor, seed)
        assert verdict.calendar_day is not None and verdict.severity == "WARN", (seed, verdict.describe())
        assert "may be a closure for it or a loss" in verdict.describe()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_rise_an_ordinary_day_and_a_set_effect_size_are_still_errors(shape):
    s = SHAPES[shape]
    for seed in range(6):
        assert _judged(s, s.tonight, 10.0, seed).severity == "ERROR", seed
        assert _judged(s, s.ordinary, s.holiday_factor, seed).severity == "ERROR", seed
        configured = _judged(s, s.tonight, s.holiday_factor, seed, max_effect_pct=60, direction="down")
        assert configured.severity == "ERROR", (seed, configured.describe())
