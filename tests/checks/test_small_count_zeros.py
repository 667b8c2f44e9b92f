"""A zero on a small count is an anomaly whatever its spread only where the series' own nights at its level
say an empty one is rarer than the false-alarm rate: a weekend trickle of three or four rows is empty one
night in 20 to 30, and its eight weekend nights in four weeks do not say otherwise (the weekdays' forty rows,
which kept the old rule from ever seeing a night near empty, say nothing of it). Two shapes: a weekday
business with a weekend trickle, and a six-day business with a Sunday trickle. The business days that empty,
a few events a night that never came near empty in four weeks, a weekend that is always the same 4 rows and a
total whose weekends sit at 3.5 (no count: they do not spread as one) still raise."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from test_calendar_learned import NO_CALENDAR as CALENDAR

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod, Direction
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile

CONFIG = BaselineConfig(weeks=6)
START = date(2025, 9, 1)  # a Monday


def _weekday_business(weekend: tuple[float, ...]) -> dict[date, float]:
    """Ten weeks of 40-50 rows a weekday and the given trickle on the weekend days, in turn (never 0 or 1)."""
    out = {}
    for i in range(70):
        d = START + timedelta(days=i)
        out[d] = (
            40.0 + (i * 7) % 11
            if d.weekday() < 5
            else weekend[(2 * (i // 7) + d.weekday() - 5) % len(weekend)]
        )
    return out


def _six_days(sunday: tuple[float, ...]) -> dict[date, float]:
    """Ten weeks of 60-70 rows Monday to Saturday and the given trickle on Sundays (never 0 or 1)."""
    out = {}
    for i in range(70):
        d = START + timedelta(days=i)
        out[d] = 60.0 + (i * 5) % 9 if d.weekday() < 6 else sunday[(i // 7) % len(sunday)]
    return out


def _few_events(values: tuple[float, ...]) -> dict[date, float]:
    """Ten weeks of a few events every night, cycling through ``values`` (none at 0 or 1)."""
    return {START + timedelta(days=i): values[i % len(values)] for i in range(70)}


def test_a_weekend_trickle_that_empties_is_its_spreads_business_and_a_weekday_that_empties_is_not():
    history = _weekday_business((3.0, 4.0, 3.0, 5.0, 2.0, 4.0, 3.0))
    sunday = START + timedelta(days=70 + 6)
    j = judge(history, sunday, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert j.result.absolute and j.result.expected is not None and j.result.expected < 5
    assert j.severity is None, j.describe()
    monday = START + timedelta(days=70)
    empty = judge(history, monday, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert empty.severity == "ERROR", empty.describe()


def test_a_sunday_trickle_that_empties_is_its_spreads_business():
    calendar = MetricsFile.model_validate(
        {"calendar": {"holidays": [], "business_days": ["mon", "tue", "wed", "thu", "fri", "sat"]}}
    ).calendar
    history = _six_days((4.0, 3.0, 2.0, 4.0, 5.0, 3.0, 4.0, 3.0, 2.0, 4.0))
    sunday = START + timedelta(days=70 + 6)
    j = judge(history, sunday, 0.0, CONFIG, Direction.BOTH, calendar=calendar)
    assert j.result.absolute and j.result.expected is not None and j.result.expected < 5
    assert j.severity is None, j.describe()
    saturday = START + timedelta(days=70 + 5)
    empty = judge(history, saturday, 0.0, CONFIG, Direction.BOTH, calendar=calendar)
    assert empty.severity == "ERROR", empty.describe()


def test_a_few_events_a_night_that_never_came_near_empty_raise_on_an_empty_one():
    few = _few_events((4.0, 3.0, 5.0, 4.0, 2.0, 4.0, 3.0, 5.0, 4.0, 3.0, 6.0))
    night = START + timedelta(days=70)
    j = judge(few, night, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert j.result.expected is not None and 2 < j.result.expected < 5
    assert j.severity == "ERROR", j.describe()


@pytest.mark.parametrize(
    "weekend",
    [(4.0,), (3.5, 3.6, 3.5, 3.6, 3.6, 3.5, 3.5)],
    ids=["the same 4 rows every weekend", "a total at 3.5 thousand on weekends"],
)
def test_a_weekend_that_does_not_spread_as_a_count_raises_on_an_empty_one(weekend):
    history = _weekday_business(weekend)
    sunday = START + timedelta(days=70 + 6)
    j = judge(history, sunday, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert j.result.absolute and j.result.expected is not None and j.result.expected < 5
    assert j.severity == "ERROR", (j.result.expected, j.result.robust_z, j.describe())


def test_an_emptied_month_end_is_not_excused_by_one_earlier_dip():
    """A small count's month-end that empties is not "like" the only earlier month-end, which fell by half:
    in a count's units any fall is within half to twice another's."""
    start = date(2025, 10, 6)  # a Monday: 31 October, a Friday, is the history's first month-end
    history = {}
    for i in range((date(2025, 11, 28) - start).days):
        d = start + timedelta(days=i)
        history[d] = 40.0 + (i * 7) % 11 if d.weekday() < 5 else 3.0 + i % 3
    history[date(2025, 10, 31)] = 20.0
    j = judge(history, date(2025, 11, 28), 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert j.severity == "ERROR", (j.result.expected, j.result.robust_z, j.describe())


def _quiet_weekends(
    weekday: tuple[float, ...], weekend: tuple[float, ...], days: int = 70
) -> dict[date, float]:
    """``days`` nights from START: the business days cycle through ``weekday``, the weekend days through
    ``weekend`` (a trickle that empties some weekends)."""
    out = {}
    for i in range(days):
        d = START + timedelta(days=i)
        out[d] = weekday[i % len(weekday)] if d.weekday() < 5 else weekend[i % len(weekend)]
    return out


WEEKEND_TRICKLE = (2.0, 0.0, 1.0, 3.0, 0.0, 2.0, 1.0)


def test_a_business_day_that_empties_is_not_excused_by_the_weekends_that_did():
    """Eight rows a business day, a weekend trickle that empties: a business day at none is a Poisson chance
    of 0.03% (the weekends' zeros say nothing of it), an anomaly."""
    history = _quiet_weekends((8.0, 6.0, 10.0, 7.0, 9.0, 11.0, 5.0, 8.0), WEEKEND_TRICKLE)
    wednesday = START + timedelta(days=70 + 2)
    j = judge(history, wednesday, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert j.result.absolute and j.result.expected is not None and 5 < j.result.expected < 12
    assert j.severity == "ERROR", (j.result.expected, j.result.robust_z, j.describe())
    saturday = START + timedelta(days=70 + 5)
    assert judge(history, saturday, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR).severity is None


def test_a_sunday_trickle_that_empties_does_not_excuse_an_empty_saturday():
    calendar = MetricsFile.model_validate(
        {"calendar": {"holidays": [], "business_days": ["mon", "tue", "wed", "thu", "fri", "sat"]}}
    ).calendar
    history = {
        d: (7.0 + (i * 3) % 5 if d.weekday() < 6 else WEEKEND_TRICKLE[(i // 7) % len(WEEKEND_TRICKLE)])
        for i in range(70)
        for d in [START + timedelta(days=i)]
    }
    saturday = START + timedelta(days=70 + 5)
    j = judge(history, saturday, 0.0, CONFIG, Direction.BOTH, calendar=calendar)
    assert j.severity == "ERROR", (j.result.expected, j.result.robust_z, j.describe())


def test_business_days_that_come_near_empty_themselves_judge_a_zero_by_their_spread():
    """The guard: a count of a few a business day that itself came near empty in the four weeks (a night at
    one) is judged by its spread, whatever its weekends do."""
    history = _quiet_weekends((3.0, 1.0, 4.0, 2.0, 5.0, 3.0, 2.0, 4.0), WEEKEND_TRICKLE)
    wednesday = START + timedelta(days=70 + 2)
    j = judge(history, wednesday, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert j.result.absolute and j.severity is None, j.describe()


def test_a_month_end_never_told_apart_that_empties_is_an_error():
    """A group's rows: eight a business day, a weekend trickle that empties, fifteen times as many on the
    month-ends, each of which fell on a month's last day too (30 September, 31 October). On 28 November, the
    last business day but not the last day, the group has none: against an ordinary Friday's eight as much as
    against a month-end's, no chance (it was a WARN "like an ordinary night", by the weekends' zeros)."""
    start = date(2025, 9, 1)  # a Monday
    history = {}
    for i in range((date(2025, 11, 28) - start).days):
        d = start + timedelta(days=i)
        history[d] = (7.0 + (i * 3) % 5) if d.weekday() < 5 else WEEKEND_TRICKLE[i % len(WEEKEND_TRICKLE)]
    history[date(2025, 9, 30)] = 118.0
    history[date(2025, 10, 31)] = 131.0
    j = judge(history, date(2025, 11, 28), 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR)
    assert j.calendar_day is not None, j.describe()
    assert j.severity == "ERROR", (j.result.expected, j.result.robust_z, j.describe())


def test_a_holiday_that_empties_is_judged_against_the_weekends_and_holidays():
    """A business-day count whose weekends and earlier holidays run at one to three: a holiday at none is
    judged by the spread of its kind of night (weekends and holidays), not by the business days that never
    came near empty."""
    calendar = MetricsFile.model_validate({"calendar": {"holidays": [{"country": "US"}]}}).calendar
    history, d, i = {}, date(2025, 5, 5), 0
    while d < date(2025, 11, 27):
        history[d] = 3.0 if calendar.holiday(d) else 6.0 + (i * 3) % 5 if d.weekday() < 5 else 1.0 + i % 2
        d, i = d + timedelta(days=1), i + 1
    j = judge(history, date(2025, 11, 27), 0.0, CONFIG, Direction.BOTH, calendar=calendar)
    assert j.calendar_day is not None and j.severity is None, j.describe()


def test_a_weekend_zero_judged_day_over_day_is_judged_against_the_weekends():
    """Day over day, Saturday's expectation is Friday's level: its zero is still judged against the weekends
    that came near empty."""
    weekday, weekend = (
        (7.0, 9.0, 8.0, 10.0, 6.0, 8.0, 9.0, 7.0, 11.0, 8.0, 5.0, 9.0, 8.0, 7.0),
        WEEKEND_TRICKLE,
    )
    history = _quiet_weekends(weekday, weekend, days=75)
    config = BaselineConfig(method=BaselineMethod.DAY_OVER_DAY)
    saturday = START + timedelta(days=75)
    assert saturday.weekday() == 5
    j = judge(history, saturday, 0.0, config, Direction.DOWN, calendar=CALENDAR)
    assert j.result.expected is not None and j.result.expected >= 5 and j.severity is None, j.describe()
