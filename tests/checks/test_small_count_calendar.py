"""A small count (a few dozen rows a night, judged on absolute change) learns its recurring calendar days
from its own history as a larger series does: each month-end run of a few dozen invoices was an ERROR, and a
fault on one passed for a month-end. Two shapes: a weekday business's invoices with a weekend trickle, run
on the last business day, and a shop open every day whose last day of the month doubles."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest
from test_calendar_learned import NO_CALENDAR as WEEKDAYS_ONLY
from test_calendar_learned import SHOP_DAYS as EVERY_DAY
from test_calendar_learned import _last_business_day

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.judge import judge

CONFIG = BaselineConfig(weeks=6)


def _invoices(end: date, seed: int = 4) -> dict[date, float]:
    """About 45 invoices a weekday, 3 on a weekend day, three times as many on the last business day."""
    rng, out, d = np.random.default_rng(seed), {}, date(2025, 6, 2)
    while d <= end:
        mean = 45.0 if d.weekday() < 5 else 3.0
        if d.weekday() < 5 and _last_business_day(d):
            mean *= 3
        out[d] = float(rng.poisson(mean))
        d += timedelta(days=1)
    return out


def _shop(end: date, seed: int = 2) -> dict[date, float]:
    """About 30 orders a day, every day, twice as many on the month's last day."""
    rng, out, d = np.random.default_rng(seed), {}, date(2025, 6, 1)
    while d <= end:
        mean = 30.0 * (2 if (d + timedelta(days=1)).day == 1 else 1)
        out[d] = float(rng.poisson(mean))
        d += timedelta(days=1)
    return out


SHAPES = [
    (
        _invoices,
        WEEKDAYS_ONLY,
        [date(2025, 10, 31), date(2025, 11, 28), date(2025, 12, 31), date(2026, 1, 30)],
    ),
    (_shop, EVERY_DAY, [date(2025, 10, 31), date(2025, 11, 30), date(2025, 12, 31), date(2026, 1, 31)]),
]


@pytest.mark.parametrize(
    ("make", "calendar", "month_ends"), SHAPES, ids=["invoices-weekdays", "shop-every-day"]
)
def test_a_small_counts_month_end_is_learned_and_a_fault_on_it_still_raises(make, calendar, month_ends):
    series = make(month_ends[-1])
    for day in month_ends:
        history = {d: v for d, v in series.items() if d < day}
        j = judge(history, day, series[day], CONFIG, Direction.BOTH, calendar=calendar)
        assert j.result.absolute, "a small count, judged on absolute change"
        assert j.severity is None, f"{day}: {j.describe()}"
        assert j.calendar_day is not None and j.calendar_day.kind == "recurring", day
        # Most of the month-end's run missing is no month-end: an ERROR, not excused by the kind.
        fault = judge(history, day, round(series[day] * 0.4), CONFIG, Direction.DOWN, calendar=calendar)
        assert fault.severity == "ERROR", f"{day}: {fault.describe()}"


@pytest.mark.parametrize(
    ("make", "calendar", "month_ends"), SHAPES, ids=["invoices-weekdays", "shop-every-day"]
)
def test_a_small_counts_ordinary_nights_stay_quiet_and_its_month_ends_out_of_their_references(
    make, calendar, month_ends
):
    series = make(month_ends[-1])
    start = month_ends[0] - timedelta(days=28)
    judged = [d for d in series if start <= d <= month_ends[-1] and d not in month_ends]
    raised = []
    for day in judged:
        history = {d: v for d, v in series.items() if d < day}
        j = judge(history, day, series[day], CONFIG, Direction.BOTH, calendar=calendar)
        if j.severity == "ERROR":
            raised.append((day, j.describe()))
    assert not raised
