"""A small count (judged on absolute change, ``baseline.is_small``) learns its recurring days from its own
history like any series, on its own scale: a month-end the history holds twice is compared with them and
raises nothing; a fault on it is still an ERROR. Two shapes: a pharmacy's stock adjustments (weekdays, the
month's stock-take on its last business day) and a shop's credit notes (every day, a month's last day)."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS = MetricsFile.model_validate({"calendar": {"holidays": []}}).calendar
EVERY_DAY_OPEN = MetricsFile.model_validate(
    {"calendar": {"holidays": [], "business_days": EVERY_DAY}}
).calendar
CONFIG = BaselineConfig(weeks=6)


def _poisson(rng: random.Random, mean: float) -> float:
    if mean > 30:
        return float(max(0, round(rng.gauss(mean, math.sqrt(mean)))))
    k, p, limit = 0, rng.random(), math.exp(-mean)
    while p > limit:
        k, p = k + 1, p * rng.random()
    return float(k)


def _last_business_day(d: date) -> bool:
    nxt = d + timedelta(days=1)
    while nxt.weekday() >= 5:
        nxt += timedelta(days=1)
    return d.weekday() < 5 and nxt.month != d.month


def _stock_adjustments(end: date, seed: int = 5) -> dict[date, float]:
    """One pharmacy's stock adjustments: about 8 a weekday, 2 a weekend day, 120 at the month's stock-take."""
    rng, out, d = random.Random(seed), {}, date(2025, 8, 1)
    while d <= end:
        mean = 120 if _last_business_day(d) else 8 if d.weekday() < 5 else 2
        out[d] = _poisson(rng, mean)
        d += timedelta(days=1)
    return out


def _credit_notes(end: date, seed: int = 2) -> dict[date, float]:
    """A shop's credit notes: about 6 a day, every day, and 45 on the month's last day (its returns run)."""
    rng, out, d = random.Random(seed), {}, date(2025, 8, 1)
    while d <= end:
        out[d] = _poisson(rng, 45 if (d + timedelta(days=1)).month != d.month else 6)
        d += timedelta(days=1)
    return out


@pytest.mark.parametrize(
    ("make", "day", "calendar"),
    [
        (_stock_adjustments, date(2025, 11, 28), WEEKDAYS),  # Friday 28 November, the month ends on a Sunday
        (_credit_notes, date(2025, 11, 30), EVERY_DAY_OPEN),  # Sunday 30 November
    ],
    ids=["pharmacy-stock-take", "shop-credit-notes"],
)
def test_a_small_count_learns_a_month_end_its_history_holds(make, day, calendar):
    series = make(day)
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, series[day], CONFIG, Direction.BOTH, calendar=calendar)
    assert j.result.absolute
    assert j.severity is None, j.describe()
    assert j.calendar_day is not None and j.calendar_day.kind == "recurring", j.describe()
    assert len(j.like_days) >= 2
    # Most of the month-end missing is still an ERROR.
    fault = judge(history, day, round(series[day] * 0.2), CONFIG, Direction.BOTH, calendar=calendar)
    assert fault.severity == "ERROR", fault.describe()
