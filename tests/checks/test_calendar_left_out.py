"""A night left out of the ordinary ones for its kind (a learned month-end, a configured holiday) keeps its
place among the next like weekday's references, at its value less its own effect: dropped, it made their
references a week older, and on a climbing business the lag an ERROR on an ordinary night. A calendar night
is never a reference at its raw value. Two shapes each: a weekday business and one open every day."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

import pytest
from test_calendar_net_drift import _month_end  # the month's last business day (every day's: its last)

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.judge import judge
from dw_dagster.checks.recurring import learn

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS = BusinessCalendar.model_validate({"holidays": []})
SHOP = BusinessCalendar.model_validate({"holidays": [], "business_days": EVERY_DAY})
START = date(2025, 6, 2)
CONFIG = BaselineConfig()


def _climbing(
    end: date,
    every_day: bool,
    seed: int,
    month_end: float = 1.0,
    closed: frozenset[date] = frozenset(),
    noise: float = 0.02,
) -> dict[date, float]:
    """A business growing 0.5% a night with ``noise`` (2%); its month's last business day x``month_end``,
    the ``closed`` nights at 30%; weekends a trickle (weekdays only) or 0.8 (every day)."""
    rng, out, d = random.Random(seed), {}, START
    while d <= end:
        v = 5000.0 * 1.005 ** (d - START).days * ((0.8 if every_day else 0.08) if d.weekday() >= 5 else 1.0)
        if _month_end(d, every_day):
            v *= month_end
        if d in closed:
            v *= 0.3
        out[d] = v * (1 + rng.gauss(0, noise))
        d += timedelta(days=1)
    return out


# (seed, the ordinary night after a set-aside month-end of its weekday that raised an ERROR): Mondays after
# Monday 30 June on the weekday business, Thursday 7 August after Thursday 31 July on the shop.
AFTER_MONTH_END = [
    pytest.param(False, WEEKDAYS, 3, date(2025, 7, 7), id="weekdays-7-july"),
    pytest.param(False, WEEKDAYS, 1, date(2025, 7, 14), id="weekdays-14-july"),
    pytest.param(False, WEEKDAYS, 10, date(2025, 7, 28), id="weekdays-28-july"),
    pytest.param(True, SHOP, 14, date(2025, 8, 7), id="shop-7-august"),
]


@pytest.mark.parametrize(("every_day", "calendar", "seed", "night"), AFTER_MONTH_END)
def test_an_ordinary_night_after_its_weekdays_month_end_on_a_climb_passes(every_day, calendar, seed, night):
    series = _climbing(night, every_day, seed, month_end=3.0)
    history = {d: v for d, v in series.items() if d < night}
    j = judge(history, night, series[night], CONFIG, Direction.BOTH, calendar=calendar)
    assert j.calendar_day is None and j.severity is None, j.describe()
    # Every same weekday on record is a reference, the month-end among them (less its x3).
    weeks = min(CONFIG.weeks, (night - START).days // 7)
    assert j.result.points == weeks
    # A quarter of the night missing is still an ERROR.
    f = judge(history, night, series[night] * 0.75, CONFIG, Direction.BOTH, calendar=calendar)
    assert f.severity == "ERROR", f.describe()


STOCK_TAKES = [date(2025, 6, 19), date(2025, 7, 3)]
"""Two Thursdays the business closes for a stock-take (30% of a night)."""


def _stock_takes(every_day: bool) -> BusinessCalendar:
    dates = [{"date": d.isoformat(), "name": "stock-take", "direction": "down"} for d in STOCK_TAKES]
    return BusinessCalendar.model_validate(
        {"dates": dates, **({"business_days": EVERY_DAY} if every_day else {})}
    )


@pytest.mark.parametrize("every_day", [False, True], ids=["weekdays", "shop"])
@pytest.mark.parametrize("seed", [1, 4])
def test_the_thursday_after_two_closed_thursdays_is_expected_at_its_level(every_day, seed):
    """Two of the five Thursdays before 10 July were closed: three ordinary ones are too few references,
    and the five with the closed ones at their raw 30% put the expectation at the oldest open Thursday's."""
    night = date(2025, 7, 10)
    calendar = _stock_takes(every_day)
    series = _climbing(night, every_day, seed, closed=frozenset(STOCK_TAKES))
    history = {d: v for d, v in series.items() if d < night}
    j = judge(history, night, series[night], CONFIG, Direction.BOTH, calendar=calendar)
    assert j.severity is None and j.result.points == 5, j.describe()
    # At the two Thursdays' place, less their closure: the short history's lag remains (-3 to -5%), not the
    # oldest open Thursday's (-9 to -11%).
    truth = 5000.0 * 1.005 ** (night - START).days
    assert j.result.expected is not None and 0.93 < j.result.expected / truth < 1.01, j.describe()
    f = judge(history, night, series[night] * 0.75, CONFIG, Direction.BOTH, calendar=calendar)
    assert f.severity == "ERROR", f.describe()


def _window_effect(values: dict[date, float]):
    """A night's log departure from the mean of the given nights of the 35 days before it."""

    def effect(d: date, points) -> float | None:
        before = [values[k] for k in points if 0 < (d - k).days <= 35]
        return math.log(values[d] / (sum(before) / len(before))) if before else None

    return effect


def _x10_month_ends(every_day: bool):
    """What ``learn`` finds on 31 October of a series whose month's last (business) day runs at x10, 1% noise."""
    calendar = SHOP if every_day else WEEKDAYS
    values, d = {}, START
    rng = random.Random(7)
    while d <= date(2025, 10, 31):
        values[d] = 5000.0 * (10.0 if _month_end(d, every_day) else 1.0) * (1 + rng.gauss(0, 0.01))
        d += timedelta(days=1)
    tonight = max(d for d in values if _month_end(d, every_day))
    ordinary = {d: v for d, v in values.items() if d < tonight}
    return learn(ordinary, tonight, calendar, _window_effect(values), noise=0.01)


@pytest.mark.parametrize("every_day", [False, True], ids=["weekdays", "shop"])
def test_a_night_of_two_kinds_keeps_each_kinds_effect(every_day):
    """30 September is the month's last (business) day and the quarter's. Measured for the quarter's kind,
    31 August's x10 is an ordinary night of the month before it; for the month's kind it is not. One effect
    per night kept the quarter's (measured last), and 31 October compared with it read a smaller run."""
    found = _x10_month_ends(every_day)
    assert found.tonight is not None, found
    (key,) = found.tonight.like_keys
    quarter_end = date(2025, 9, 30)
    assert quarter_end in found.like
    month = found.effects[key]
    quarter = next(e for k, e in found.effects.items() if k.startswith("quarter_end") and quarter_end in e)
    # Each kind's own reading of 30 September: the month's like its other month-ends, the quarter's less.
    assert quarter[quarter_end] < month[quarter_end] - 0.1, (quarter, month)


def test_only_the_kinds_that_leave_nights_out_keep_effects():
    """A night's effect in place is read from the kinds that leave it out of the ordinary nights (learned, or
    a period's last days set aside): a day of the month seen twice, learned by nothing, is no reading of it.
    Both shapes' x10 month-ends, whose 31sts (and 30ths, and the 1sts after) moved the series too."""
    for every_day in (False, True):
        found = _x10_month_ends(every_day)
        assert found.learned, found
        for key, effects in found.effects.items():
            assert key in found.learned or set(effects) <= found.aside, (key, found)
        assert not [k for k in found.effects if k.startswith("day_of_month")], sorted(found.effects)


# Two Mondays of the same-weekday references a configured holiday the business does not keep (its nights as
# ordinary as any): they moved only as the nights beside them did.
NOT_KEPT = [date(2025, 7, 7), date(2025, 7, 21)]


@pytest.mark.parametrize("every_day", [False, True], ids=["weekdays", "shop"])
def test_a_holiday_the_business_does_not_keep_stays_among_the_references(every_day):
    """Its own effect is none, so it stays among the next Mondays' references at its value: dropped, it made
    them a week older on a climb (7 or 6 of 8 on main), the very lag a night left out for its kind no longer
    adds."""
    spec: dict = {"dates": [{"date": d.isoformat(), "name": "fete", "direction": "down"} for d in NOT_KEPT]}
    if every_day:
        spec["business_days"] = EVERY_DAY
    calendar = BusinessCalendar.model_validate(spec)
    points = []
    for seed in range(5):
        for night in [date(2025, 7, 28), date(2025, 8, 4), date(2025, 8, 11)]:
            series = _climbing(night, every_day, seed, noise=0.005)
            history = {d: v for d, v in series.items() if d < night}
            j = judge(history, night, series[night], CONFIG, Direction.BOTH, calendar=calendar)
            assert j.severity is None, j.describe()
            points.append(j.result.points)
    assert points == [CONFIG.weeks] * len(points), points
