"""A month-end's effect learned while the business still climbed to its level is the month-end's own, not
the climb's lag on top: the month-ends after the climb pass, and a fault on one is still an ERROR. Two shapes:
a weekday distributor invoicing x3 on the month's last business day, and a shop open every day whose last day
of a month sells half. The same for a configured holiday's like nights, on both shapes."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
CONFIG = BaselineConfig(weeks=6)
START = date(2025, 6, 2)
RAMP = 45
"""The days the business takes to climb from 30% of its level to all of it."""


def _month_end(d: date, every_day: bool) -> bool:
    nxt = d + timedelta(days=1)
    while not every_day and nxt.weekday() >= 5:
        nxt += timedelta(days=1)
    return nxt.month != d.month and (every_day or d.weekday() < 5)


def _climbing(
    end: date,
    month_end: float,
    every_day: bool,
    seed: int,
    holidays: BusinessCalendar | None = None,
    ramp: int = RAMP,
    noise: float = 0.02,
) -> dict[date, float]:
    """A business climbing to its level over ``ramp`` days, then flat; the month's last business day
    x``month_end``; weekends a trickle (weekdays only) or 0.8 (every day); the ``holidays``' holidays 30%."""
    rng, out, d = random.Random(seed), {}, START
    while d <= end:
        level = min(1.0, 0.3 + 0.7 * (d - START).days / ramp)
        v = 5000.0 * level * ((0.8 if every_day else 0.08) if d.weekday() >= 5 else 1.0)
        if _month_end(d, every_day):
            v *= month_end
        if holidays is not None and (kind := holidays.day(d)) is not None and kind.kind == "holiday":
            v *= 0.3
        out[d] = v * (1 + rng.gauss(0, noise))
        d += timedelta(days=1)
    return out


WEEKDAYS = MetricsFile.model_validate({"calendar": {"holidays": []}}).calendar
SHOP = MetricsFile.model_validate({"calendar": {"holidays": [], "business_days": EVERY_DAY}}).calendar
SHAPES = [
    pytest.param(3.0, False, WEEKDAYS, 48, RAMP, 0.02, [date(2025, 8, 29), date(2025, 9, 30), date(2025, 10, 31)], id="x3-weekdays"),
    pytest.param(0.5, True, SHOP, 51, RAMP, 0.02, [date(2025, 8, 31), date(2025, 9, 30), date(2025, 10, 31)], id="half-shop"),
    # A noisier business climbing over two months: its first month-end's dip, measured against a lagging
    # expectation, hardly departed from it (-18% where its neighbours ran +39% above theirs).
    pytest.param(0.5, False, WEEKDAYS, 70, 60, 0.05, [date(2025, 8, 29), date(2025, 9, 30), date(2025, 10, 31)], id="half-weekdays-hidden"),
]  # fmt: skip


@pytest.mark.parametrize(("month_end", "every_day", "calendar", "seed", "ramp", "noise", "nights"), SHAPES)
def test_month_ends_after_a_climb_pass_and_a_fault_on_one_is_an_error(
    month_end, every_day, calendar, seed, ramp, noise, nights
):
    series = _climbing(nights[-1], month_end, every_day, seed, ramp=ramp, noise=noise)
    for night in nights:
        history = {d: v for d, v in series.items() if d < night}
        j = judge(history, night, series[night], CONFIG, Direction.BOTH, calendar=calendar)
        assert j.severity != "ERROR", f"{night}: {j.describe()}"
        assert j.calendar_day is not None and j.calendar_day.kind == "recurring", j.describe()
        # The month-end's run (or dip) missing, or doubled, is news. On the first last business day that is
        # not the month's last day (29 August), a missing run is what an ordinary Friday does if the run is on
        # the last day instead: the history never told the two apart, so it is a WARN that says so.
        untold = "never told apart" in j.describe()
        for fault, missing in ((series[night] / month_end, True), (series[night] * month_end, False)):
            f = judge(history, night, fault, CONFIG, Direction.BOTH, calendar=calendar)
            if untold and missing:
                assert f.severity == "WARN" and "like an ordinary night" in f.describe(), f.describe()
            else:
                assert f.severity == "ERROR", f"{night} at {fault:.0f}: {f.describe()}"


HOLIDAYS = [
    pytest.param(False, BusinessCalendar.model_validate({"holidays": [{"country": "US", "direction": "down"}]}),
                 [date(2025, 9, 1), date(2025, 10, 13), date(2025, 11, 11)], id="us-weekdays"),
    pytest.param(True, BusinessCalendar.model_validate({"business_days": EVERY_DAY, "holidays": [{"country": "US", "direction": "down"}]}),
                 [date(2025, 10, 13), date(2025, 11, 11)], id="us-shop"),
]  # fmt: skip


@pytest.mark.parametrize(("every_day", "calendar", "nights"), HOLIDAYS)
def test_holidays_after_a_climb_pass_and_a_fault_on_one_is_an_error(every_day, calendar, nights):
    """The like nights of the holidays after the climb fell while it climbed (Juneteenth, 4 July)."""
    series = _climbing(nights[-1], 1.0, every_day, 1, holidays=calendar)
    for night in nights:
        history = {d: v for d, v in series.items() if d < night}
        j = judge(history, night, series[night], CONFIG, Direction.BOTH, calendar=calendar)
        assert j.severity != "ERROR", f"{night}: {j.describe()}"
        assert j.calendar_day is not None and j.calendar_day.kind == "holiday" and j.like_days, j.describe()
        # A holiday that kept the ordinary pace, or fell twice as far, is news.
        for fault in (series[night] / 0.3, series[night] * 0.3):
            f = judge(history, night, fault, CONFIG, Direction.BOTH, calendar=calendar)
            assert f.severity == "ERROR", f"{night} at {fault:.0f}: {f.describe()}"
