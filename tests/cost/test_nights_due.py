"""Which nights the cost sensor starts: only complete nights (the views' lag passed) on which something ran."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from dw_dagster.checks.metrics import BusinessDay
from dw_dagster.config import DwConfigError
from dw_dagster.cost.job import latency_from_env, night_window, nights_due

DAY = BusinessDay(timezone="America/Chicago", cutoff_hour=6)


def test_a_night_is_due_once_its_views_caught_up_and_only_if_something_ran():
    ran = {date(2025, 6, 16), date(2025, 6, 18)}
    asked = []

    def had_work(start, end):
        asked.append((start, end))
        return DAY.of(start) in ran

    # 2025-06-19 10:00 Chicago: the night of the 18th ended at 06:00 on the 19th, 4 hours ago.
    now = datetime(2025, 6, 19, 15, 0, tzinfo=UTC)
    assert nights_due(date(2025, 6, 15), now, timedelta(hours=8), DAY, had_work) == [date(2025, 6, 16)]
    assert nights_due(date(2025, 6, 15), now, timedelta(hours=0), DAY, had_work) == [
        date(2025, 6, 16),
        date(2025, 6, 18),
    ]
    # An idle night (the 17th) was asked about, from Dagster's record, and starts nothing.
    assert night_window(DAY, date(2025, 6, 17)) in asked
    # No cursor yet: the latest complete night only, never a year of nights.
    assert nights_due(None, now, timedelta(0), DAY, had_work) == [date(2025, 6, 18)]
    assert nights_due(date(2025, 6, 18), now, timedelta(0), DAY, had_work) == []


def test_the_night_window_follows_the_business_day_across_daylight_saving():
    start, end = night_window(DAY, date(2025, 3, 8))
    assert start == datetime(2025, 3, 8, 12, 0, tzinfo=UTC)  # 06:00 CST
    assert end == datetime(2025, 3, 9, 11, 0, tzinfo=UTC)  # 06:00 CDT: a 23-hour night
    assert latency_from_env({}) == timedelta(hours=8)
    assert latency_from_env({"DW_COST_LATENCY_HOURS": "0"}) == timedelta(0)
    with pytest.raises(
        DwConfigError, match="DW_COST_LATENCY_HOURS: expected a number of hours >= 0, got 'soon'"
    ):
        latency_from_env({"DW_COST_LATENCY_HOURS": "soon"})
