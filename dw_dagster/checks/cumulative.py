"""Cumulative totals: a month-to-date (week-, quarter-, year-to-date) total grows through its period and
starts again at the next. Judged on its level it is an anomaly every first of the month and, after one bad
night, every night until the period ends; judged on its **increment** (tonight's value less last night's, or
tonight's value on the first night of a period) it is an ordinary daily number.

A total is cumulative when the metrics file says so (``cumulative: month``) or when its history shows it
(``cumulative: auto``, the default): within each period it never falls (nine steps in ten at least, ten steps
at least), and at every period boundary on record (one at least) it falls to less than half. ``cumulative:
no`` turns detection off.

A fault's effect stays in a cumulative total until the period restarts or the night is rebuilt: the nights
after a bad increment are right in themselves but the total still carries it. :func:`carried` names the
flagged nights of tonight's period whose increment is still anomalous, so the check's finding continues the
incident that the bad night opened (``incidents/lifecycle.py``): :func:`flagged_in_period` lists the
flagged nights of tonight's period, which the check re-judges on their increments.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, timedelta
from typing import Literal

from dw_dagster.checks.history import Recorded

Period = Literal["week", "month", "quarter", "year"]
PERIODS: tuple[Period, ...] = ("month", "quarter", "week", "year")
"""Detection tries the commonest first."""
MAX_STEP_DAYS = 7
"""Nights further apart than this have no increment between them (a gap in the record)."""
MIN_STEPS = 10
RISING = 0.9
RESET = 0.5


def period_start(day: date, period: Period) -> date:
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    if period == "quarter":
        return date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)
    return date(day.year, 1, 1)


def detect(values: Mapping[date, float]) -> Period | None:
    """The period a series resets at, from its history; None when it does not look cumulative."""
    days = sorted(d for d, v in values.items() if v is not None)
    for period in PERIODS:
        within = rising = resets = boundaries = 0
        for a, b in zip(days, days[1:], strict=False):
            if (b - a).days > MAX_STEP_DAYS:
                continue
            if period_start(a, period) == period_start(b, period):
                within += 1
                rising += values[b] >= values[a] - 1e-9 * abs(values[a])
            else:
                boundaries += 1
                resets += values[a] > 0 and values[b] < RESET * values[a]
        if boundaries and resets == boundaries and within >= MIN_STEPS and rising >= RISING * within:
            return period
    return None


def period_of(declared: str, values: Mapping[date, float]) -> Period | None:
    """The period of a total: declared in the metrics file, or detected (``auto``); None: not cumulative."""
    if declared == "no":
        return None
    if declared == "auto":
        return detect(values)
    return declared  # type: ignore[return-value]


def _increment(now: float | None, before: tuple[date, float | None] | None, day: date, period: Period):
    """Tonight's increment from the night before (None: no comparable night)."""
    if now is None:
        return None
    if before is None:
        return now if day == period_start(day, period) else None
    prev, was = before
    if (day - prev).days > MAX_STEP_DAYS:
        return None
    if period_start(prev, period) != period_start(day, period):
        return now  # the period restarted since
    return None if was is None else now - was


def increments(own: Mapping[date, Recorded], period: Period) -> dict[date, Recorded]:
    """The history as increments, the total and each group alike; nights with no comparable night before
    them are left out."""
    out: dict[date, Recorded] = {}
    days = sorted(own)
    for i, d in enumerate(days):
        r = own[d]
        prev = own[days[i - 1]] if i else None
        increment = _increment(r.value, (prev.business_date, prev.value) if prev else None, d, period)
        if increment is None:
            continue
        groups = {
            g: _increment(v, (prev.business_date, prev.groups.get(g, 0.0)) if prev else None, d, period)
            for g, v in r.groups.items()
        }
        out[d] = Recorded(
            business_date=d,
            value=increment,
            groups={g: v for g, v in groups.items() if v is not None or r.groups.get(g) is None},
            flagged=r.flagged,
        )
    return out


def tonight(
    own: Mapping[date, Recorded], day: date, value: float, groups: Mapping[str, float | None], period: Period
) -> tuple[float, dict[str, float | None]] | None:
    """Tonight's increment and its groups' (None: no comparable night before tonight)."""
    before = [d for d in own if d < day]
    last = own[max(before)] if before else None
    increment = _increment(value, (last.business_date, last.value) if last else None, day, period)
    if increment is None:
        return None
    per_group: dict[str, float | None] = {}
    for g, v in groups.items():
        per_group[g] = (
            None
            if v is None
            else _increment(v, (last.business_date, last.groups.get(g, 0.0)) if last else None, day, period)
        )
    if last is not None and period_start(last.business_date, period) == period_start(day, period):
        # A group that was there last night and is gone tonight fell by all it had.
        for g, v in last.groups.items():
            if g not in groups and v:
                per_group[g] = -v
    return increment, per_group


def flagged_in_period(day: date, period: Period, nights: Mapping[date, Recorded]) -> list[date]:
    """The flagged nights before ``day`` in its period."""
    start = period_start(day, period)
    return sorted(d for d, r in nights.items() if start <= d < day and r.flagged)
