"""Day over day (and week over week) bridges a week or two at most: after a longer run of calendar nights
(Christmas to Epiphany as a German business keeps it, or a company's fortnight shut) it had no night to start
from, and the first ordinary nights after it were no judgement at all ("insufficient baseline"): a 30% fall
of a stock on 4 January passed. Every night, calendar ones included, is judged on instead. Two calendars:
the country's holidays with their periods, and a configured fortnight."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod, BaselineStatus, Direction
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.judge import judge

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
SHUT = [date(2025, 12, 24) + timedelta(days=i) for i in range(12)]
CALENDARS = [
    pytest.param({"holidays": [{"country": "DE"}], "business_days": EVERY_DAY}, id="german-holidays"),
    pytest.param(
        {"dates": [{"date": d.isoformat(), "name": "shut", "direction": "down"} for d in SHUT],
         "business_days": EVERY_DAY},
        id="a-configured-fortnight",
    ),
]  # fmt: skip


def _stock(seed: int) -> dict[date, float]:
    """A stock drifting up 0.1% a night with 0.3% noise, from 1 October."""
    rng, out, level = random.Random(seed), {}, 100_000.0
    for i in range(110):
        level *= 1 + rng.gauss(0.001, 0.003)
        out[date(2025, 10, 1) + timedelta(days=i)] = level
    return out


@pytest.mark.parametrize("spec", CALENDARS)
def test_the_first_ordinary_nights_after_a_long_calendar_run_are_judged(spec):
    calendar = BusinessCalendar.model_validate(spec)
    config = BaselineConfig(method=BaselineMethod.DAY_OVER_DAY)
    stock = _stock(1)
    # The first three nights after the run that the calendar does not name.
    after = [date(2026, 1, 1) + timedelta(days=i) for i in range(20)]
    for night in [d for d in after if calendar.day(d) is None][:3]:
        history = {d: v for d, v in stock.items() if d < night}
        ordinary = judge(history, night, stock[night], config, Direction.BOTH, calendar=calendar)
        assert ordinary.result.status is BaselineStatus.OK and ordinary.severity is None, ordinary.describe()
        fall = judge(history, night, stock[night] * 0.7, config, Direction.BOTH, calendar=calendar)
        assert fall.severity == "ERROR", f"{night}: {fall.describe()}"
