"""Cumulative totals: a month-to-date (or week-to-date) total is recognised from its history or declared,
and judged on its increment, so neither the first of the month nor the nights after one bad night alarm;
the bad night itself does, and the nights after it say they still carry it."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks import cumulative
from dw_dagster.checks.baseline import BaselineConfig
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import RecordedTotal

CONFIG = BaselineConfig(weeks=6)


def _to_date(daily: dict[date, float], period: cumulative.Period) -> dict[date, Recorded]:
    """The running total of ``daily`` within each period, by biller category (two groups, 60/40)."""
    out, running, groups = {}, 0.0, {"CATEGORY=utility": 0.0, "CATEGORY=telecom": 0.0}
    for d in sorted(daily):
        if d == cumulative.period_start(d, period):
            running, groups = 0.0, dict.fromkeys(groups, 0.0)
        running += daily[d]
        groups = {"CATEGORY=utility": groups["CATEGORY=utility"] + 0.6 * daily[d],
                  "CATEGORY=telecom": groups["CATEGORY=telecom"] + 0.4 * daily[d]}  # fmt: skip
        out[d] = Recorded(business_date=d, value=running, groups=groups)
    return out


def _payments(start: date, days: int, seed: int = 2) -> dict[date, float]:
    rng = random.Random(seed)
    return {
        start + timedelta(days=k): 80_000 * (0.5 if (start + timedelta(days=k)).weekday() >= 5 else 1.0)
        * (1 + rng.gauss(0, 0.05))
        for k in range(days)
    }  # fmt: skip


@pytest.mark.parametrize("period", ["month", "week"])
def test_a_to_date_total_is_recognised_from_its_history(period):
    history = _to_date(_payments(date(2026, 4, 27), 56), period)
    values = {d: r.value for d, r in history.items()}
    assert cumulative.detect(values) == period
    # A daily total is not cumulative; neither is a stock that merely grows.
    assert cumulative.detect(_payments(date(2026, 4, 27), 56)) is None
    assert cumulative.detect({date(2026, 4, 27) + timedelta(days=k): 1000.0 + k for k in range(56)}) is None
    total = RecordedTotal.model_validate(
        {"name": "x", "owner": "o", "asset": "a/b", "sql": "SELECT 1 AS VALUE"}
    )
    assert total.cumulative == "auto" and cumulative.period_of("no", values) is None
    assert cumulative.period_of("quarter", values) == "quarter"


def test_the_first_of_the_month_and_the_nights_after_a_bad_one_are_ordinary_increments():
    daily = _payments(date(2026, 4, 27), 70)
    # Thursday 2 July: the day's journal replayed, every payment twice.
    bad = date(2026, 7, 2)
    daily[bad] *= 2
    history = _to_date(daily, "month")
    levels = {d: r.value for d, r in history.items()}
    increments = cumulative.increments(history, "month")
    for day in (date(2026, 7, 1), date(2026, 7, 3)):
        # On its increment, the first of a month and the night after the replay are ordinary days.
        inc = {d: r.value for d, r in increments.items() if d < day}
        assert judge(inc, day, increments[day].value, CONFIG).severity is None, day
    inc = {d: r.value for d, r in increments.items() if d < bad}
    assert judge(inc, bad, increments[bad].value, CONFIG).severity == "ERROR"
    # On its level, a month's climb from nothing is all the record knows: the second of a month is judged
    # against mid-month levels, and the replay makes no difference to the verdict.
    before = {d: v for d, v in levels.items() if d < bad}
    replayed = judge(before, bad, levels[bad], CONFIG)
    clean = judge(before, bad, levels[bad] - daily[bad] / 2, CONFIG)
    assert (
        replayed.severity == clean.severity and replayed.result.direction == clean.result.direction == "down"
    )
    # Tonight's increment from the recorded nights; its groups' too.
    step, groups = cumulative.tonight(history, bad, history[bad].value, history[bad].groups, "month")
    assert step == pytest.approx(daily[bad]) and groups["CATEGORY=utility"] == pytest.approx(0.6 * daily[bad])
    flagged = {**history, bad: history[bad].model_copy(update={"flagged": True})}
    assert cumulative.flagged_in_period(date(2026, 7, 4), "month", flagged) == [bad]
    assert cumulative.flagged_in_period(date(2026, 8, 1), "month", flagged) == []
