"""Two learned recurring kinds never told apart: a weekday business's month-ends so far all fell on weekdays,
so each was both the month's last business day and its last day, and both kinds were learned from the same
nights. The first night of one kind without the other (a Sunday 31 August, a Friday 29 August) may move like
either reading, and neither alone makes an ERROR. Two shapes: an invoicing run on the last business day (x3,
weekends a trickle) and a settlement run on the last calendar day, weekends too (a business open every day,
quieter at weekends)."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile

CONFIG = BaselineConfig(weeks=6)
WEEKDAYS = MetricsFile.model_validate({"calendar": {"holidays": []}}).calendar


def _last_business_day(d: date) -> bool:
    nxt = d + timedelta(days=1)
    while nxt.weekday() >= 5:
        nxt += timedelta(days=1)
    return nxt.month != d.month


def _last_day(d: date) -> bool:
    return (d + timedelta(days=1)).month != d.month


def _invoices(end: date, seed: int = 11) -> dict[date, float]:
    """Weekday invoicing from Monday 2 June with the month's run on its last business day (x3)."""
    rng, out, d = random.Random(seed), {}, date(2025, 6, 2)
    while d <= end:
        v = 5000.0 if d.weekday() < 5 else 400.0
        if d.weekday() < 5 and _last_business_day(d):
            v *= 3
        out[d] = v * (1 + rng.gauss(0, 0.03))
        d += timedelta(days=1)
    return out


def _settlements(end: date, seed: int = 5) -> dict[date, float]:
    """A business open every day (weekends at 60%) whose run is on the month's last calendar day (x3),
    a Sunday's too."""
    rng, out, d = random.Random(seed), {}, date(2025, 6, 2)
    while d <= end:
        v = 9000.0 * (0.6 if d.weekday() >= 5 else 1.0)
        if _last_day(d):
            v *= 3
        out[d] = v * (1 + rng.gauss(0, 0.03))
        d += timedelta(days=1)
    return out


def _judge(series: dict[date, float], day: date, value: float):
    return judge({d: v for d, v in series.items() if d < day}, day, value, CONFIG, calendar=WEEKDAYS)


# (series, the first night of one kind without the other, on which this business runs nothing)
ORDINARY = [
    (_invoices, date(2025, 8, 31)),  # Sunday: the last day, not the last business day
    (_settlements, date(2025, 8, 29)),  # Friday: the last business day, not the last day
]


@pytest.mark.parametrize(("make", "day"), ORDINARY, ids=["run-on-last-business-day", "run-on-last-day"])
def test_an_ordinary_night_of_one_kind_without_the_other_is_at_most_a_warn_that_says_so(make, day):
    series = make(day)
    j = _judge(series, day, series[day])
    assert j.severity == "WARN", j.describe()
    said = j.describe()
    assert "never told apart from the last" in said and "(2025-06-30, 2025-07-31)" in said, said
    assert "tonight is the first of the one without the other" in said and "like an ordinary night" in said


@pytest.mark.parametrize(("make", "day"), ORDINARY, ids=["run-on-last-business-day", "run-on-last-day"])
def test_a_night_unlike_both_readings_is_still_an_error(make, day):
    series = make(day)
    # Half an ordinary night missing, or a replay at three times the run: beyond both expectations.
    for value in (series[day] * 0.5, series[day] * 9):
        assert _judge(series, day, value).severity == "ERROR", value


def test_a_run_on_the_first_last_business_day_that_is_not_the_last_day_passes_and_its_absence_warns():
    series = _invoices(date(2025, 8, 29))
    day = date(2025, 8, 29)  # Friday: the run of the last business day, never yet apart from the last day
    ran = _judge(series, day, series[day])
    assert ran.severity is None and ran.calendar_day.kind == "recurring", ran.describe()
    assert "moved like its kind's nights" in ran.describe()
    # No run: it may be that the run is on the last day (Sunday) instead; a WARN, not an ERROR.
    missing = _judge(series, day, series[day] / 3)
    assert missing.severity == "WARN" and "never told apart" in missing.describe(), missing.describe()
    # Half the run: unlike either reading.
    assert _judge(series, day, series[day] / 2).severity == "ERROR"


def test_once_told_apart_the_kinds_are_judged_as_before():
    invoices = _invoices(date(2025, 11, 30))
    # 30 September, a Tuesday, is both kinds: its run passes, its missing run is an ERROR.
    tue = date(2025, 9, 30)
    assert _judge(invoices, tue, invoices[tue]).severity is None
    assert _judge(invoices, tue, invoices[tue] / 3).severity == "ERROR"
    # The ordinary Sunday 31 August on record: the last day is no longer learned, and 30 November (a Sunday)
    # is an ordinary night; its Friday run is judged against the last business days, a missing one an ERROR.
    sun, fri = date(2025, 11, 30), date(2025, 11, 28)
    assert (j := _judge(invoices, sun, invoices[sun])).severity is None and j.calendar_day is None
    assert _judge(invoices, fri, invoices[fri] / 3).severity == "ERROR"
    # The converse business: its ordinary Friday 29 August on record, Sunday 31 August is its run's night.
    settlements = _settlements(date(2025, 8, 31))
    sun = date(2025, 8, 31)
    ran = _judge(settlements, sun, settlements[sun])
    assert ran.severity is None and "never told apart" not in ran.describe(), ran.describe()
    assert _judge(settlements, sun, settlements[sun] / 3).severity == "ERROR"
