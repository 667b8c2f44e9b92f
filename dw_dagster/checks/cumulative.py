"""Cumulative totals: a month-to-date (week-, quarter-, year-to-date) total grows through its period and
starts again at the next. Judged on its level it is an anomaly every first of the month and, after one bad
night, every night until the period ends; judged on its **increment** (tonight's value less last night's, or
tonight's value on the first night of a period) it is an ordinary daily number.

A total is cumulative when the metrics file says so (``cumulative: month``) or when its history shows it
(``cumulative: auto``, the default): within each period it never falls (nine steps in ten at least, ten steps
at least), and at every period boundary on record (one at least) it falls to less than half. ``cumulative:
no`` turns detection off. With one reset on record a month and a quarter fit alike: a boundary on which the
total did not drop is then no reset (:func:`period_of`). A period need not start where the calendar's does: a
billing cycle from the 28th to the 27th (``month@28``) or a retail week from Sunday (``week@6``) is detected
from the day of the month, or of the week, on which the history's drops fell.

A night whose record repeats the night before it (:func:`repeats`) added nothing: a failed or skipped build
left the table as it was and its stale value was recorded. The next night's increment is taken from the last
night the node was built (:func:`base_night`) and judged against past increments over as many days
(``increments(own, period, span)``), so the repaired night is an ordinary two days, not a doubled one.

A fault's effect stays in a cumulative total until the period restarts or the night is rebuilt: the nights
after a bad increment are right in themselves but the total still carries it. :func:`carried` names the
flagged nights of tonight's period whose increment is still anomalous, so the check's finding continues the
incident that the bad night opened (``incidents/lifecycle.py``): :func:`flagged_in_period` lists the
flagged nights of tonight's period, which the check re-judges on their increments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import date, timedelta
from typing import NamedTuple

from dw_dagster.checks.history import Recorded

Period = str
"""``week``, ``month``, ``quarter``, ``year``, or a month or week anchored elsewhere: ``month@N`` starts on
day N of each month (2 to 28), ``week@K`` on weekday K (1 Tuesday to 6 Sunday)."""
PERIODS: tuple[Period, ...] = ("month", "quarter", "week", "year")
"""Detection tries the commonest first, then periods anchored where the history's drops fell."""
LAST_ANCHOR_DAY = 28
"""A cycle anchored later in the month would start on a different day in short months."""
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MAX_STEP_DAYS = 7
"""Nights further apart than this have no increment between them (a gap in the record)."""
MIN_STEPS = 10
RISING = 0.9
RESET = 0.5
ANCHORED_RESET = 0.2
"""A period anchored off the calendar's starts again far lower: its first night is one night's worth (a
monthly cycle's a thirtieth, a week's a seventh), not a fault's half or a weekly rhythm's quiet day."""


def period_start(day: date, period: Period) -> date:
    kind, _, at = period.partition("@")
    if kind == "week":
        return day - timedelta(days=(day.weekday() - int(at or 0)) % 7)
    if kind == "month" and at:
        anchor = int(at)
        if day.day >= anchor:
            return day.replace(day=anchor)
        before = day.replace(day=1) - timedelta(days=1)
        return before.replace(day=anchor)
    if period == "month":
        return day.replace(day=1)
    if period == "quarter":
        return date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)
    return date(day.year, 1, 1)


def describe(period: Period) -> str:
    """The period as people say it: ``month``, or ``cycle from the 28th of the month``."""
    kind, _, at = period.partition("@")
    if not at:
        return period
    if kind == "week":
        return f"week from {WEEKDAY_NAMES[int(at)]}"
    n = int(at)
    suffix = "th" if 11 <= n <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"cycle from the {n}{suffix} of the month"


def _anchored(values: Mapping[date, float], days: list[date]) -> list[Period]:
    """Periods anchored where the series' drops fell: a month from each day of the month, a week from each
    weekday, on which one did (commonest first); the history then says whether every boundary dropped."""
    drops = [
        b
        for a, b in zip(days, days[1:], strict=False)
        if (b - a).days <= MAX_STEP_DAYS and _dropped(values[a], values[b])
    ]
    months = Counter(d.day for d in drops if 1 < d.day <= LAST_ANCHOR_DAY)
    weeks = Counter(d.weekday() for d in drops if d.weekday())
    return [f"month@{n}" for n, _ in months.most_common()] + [f"week@{k}" for k, _ in weeks.most_common()]


def _fitting(values: Mapping[date, float]) -> list[tuple[Period, frozenset[date]]]:
    """The periods a series' history fits, commonest first, each with its boundaries on record (the first
    night of a period after a night of the one before): within each period it never falls (nine steps in ten,
    ``MIN_STEPS`` at least) and at every boundary on record (one at least) it falls to less than half."""
    days = sorted(d for d, v in values.items() if v is not None)
    out: list[tuple[Period, frozenset[date]]] = []
    for period in (*PERIODS, *_anchored(values, days)):
        within = rising = 0
        boundaries: set[date] = set()
        resets = True
        for a, b in zip(days, days[1:], strict=False):
            if (b - a).days > MAX_STEP_DAYS:
                continue
            if period_start(a, period) == period_start(b, period):
                within += 1
                rising += values[b] >= values[a] - 1e-9 * abs(values[a])
            elif _dropped(values[a], values[b], ANCHORED_RESET if "@" in period else RESET):
                boundaries.add(b)
            elif period_start(a, period) >= days[0]:
                # A period whose start is on record did not drop at its end. One the record opens in the middle
                # of need not: the record holds only its last nights (a history from the 27th, a cycle from the
                # 28th), which may add up to less than the next period's first.
                resets = False
        if boundaries and resets and within >= MIN_STEPS and rising >= RISING * within:
            out.append((period, frozenset(boundaries)))
    return out


def _dropped(was: float, now: float, reset: float = RESET) -> bool:
    return was > 0 and now < reset * was


def detect(values: Mapping[date, float]) -> Period | None:
    """The period a series resets at, from its history; None when it does not look cumulative."""
    fits = _fitting(values)
    return fits[0][0] if fits else None


def period_of(declared: str, values: Mapping[date, float], day: date, value: float) -> Period | None:
    """The period of a total tonight (``value`` on ``day``): declared in the metrics file, or detected
    (``auto``); None: not cumulative.

    A detected period is read from the boundaries at which the series dropped. While those on record are
    boundaries of more than one period (one reset on record: 1 July starts a month and a quarter), the
    commonest is taken; but a boundary of it on which the total did not drop tonight is no reset: the period
    is another that fits the same record and runs on through tonight (a quarter-to-date total on 1 August),
    tonight's increment is an ordinary one, and the record then tells the two apart. A fault tonight is
    still seen: on that increment, or, a fall below half read as a reset, as a period's worth in one night.
    A declared period is never second-guessed: a month-to-date total that
    did not restart on the 1st is a fault."""
    if declared == "no":
        return None
    if declared != "auto":
        return declared  # type: ignore[return-value]
    fits = _fitting(values)
    if not fits:
        return None
    (period, boundaries), others = fits[0], fits[1:]
    last = max((d for d in values if d < day and (day - d).days <= MAX_STEP_DAYS), default=None)
    if last is None or _dropped(values[last], value):
        return period
    if period_start(last, period) == period_start(day, period):
        return period
    return next(
        (p for p, theirs in others if theirs == boundaries and period_start(last, p) == period_start(day, p)),
        period,
    )


def detection_values(own: Mapping[date, Recorded], day: date, value: float) -> dict[date, float]:
    """The record a period is detected from before ``day`` (``value`` tonight): the clean nights, and a flagged
    night that fell below half of the clean night before it, stayed below half on the next night and below
    that night's level on every night of the week after it (tonight included): a reset read as a fault while
    no period was known, as the first one on record always is. A drop that a later night undid (a stock
    emptied for a night or two and reloaded) stays out, and so does every other flagged night: its value is
    no period's shape."""
    nights = sorted((d, r.value) for d, r in own.items() if r.value is not None and d < day)
    nights.append((day, value))
    out: dict[date, float] = {}
    for i, (d, now) in enumerate(nights[:-1]):
        if not own[d].flagged:
            out[d] = now
            continue
        if i == 0:
            continue
        a, was = nights[i - 1]
        after = [v for c, v in nights[i + 1 :] if (c - d).days <= MAX_STEP_DAYS]
        if (
            not own[a].flagged
            and (d - a).days <= MAX_STEP_DAYS
            and _dropped(was, now)
            and after
            and _dropped(was, after[0])
            and all(v < was for v in after)
        ):
            out[d] = now
    return out


def repeats(own: Mapping[date, Recorded]) -> set[date]:
    """The nights whose record repeats the night before it exactly, the total and every group: nothing was
    added, as when the node was not rebuilt (a failed or skipped build recorded its stale value), or on a
    night with nothing to add."""
    out: set[date] = set()
    days = sorted(d for d, r in own.items() if r.value is not None)
    for a, b in zip(days, days[1:], strict=False):
        was, now = own[a], own[b]
        if (b - a).days <= MAX_STEP_DAYS and _alike(was.value, now.value) and _same_groups(was, now):
            out.add(b)
    return out


def _alike(a: float | None, b: float | None) -> bool:
    return a is None and b is None or (a is not None and b is not None and abs(a - b) <= 1e-9 * abs(a))


def _same_groups(a: Recorded, b: Recorded) -> bool:
    return a.groups.keys() == b.groups.keys() and all(_alike(v, b.groups[g]) for g, v in a.groups.items())


def _increment(now: float | None, was: float | None, base: date, day: date, period: Period) -> float | None:
    """``day``'s increment from ``base`` (None: no value to take it from)."""
    if now is None:
        return None
    if period_start(base, period) != period_start(day, period):
        return now  # the period restarted since
    return None if was is None else now - was


def increments(own: Mapping[date, Recorded], period: Period, span: int = 1) -> dict[date, Recorded]:
    """The history as increments over ``span`` days (a night's value less that of ``span`` days before,
    or its value when the period restarted since), the total and each group alike. Nights with no record
    ``span`` days before them are left out, and so are those whose record then repeated the night before it
    (``repeats``): their increment covers more days than ``span``."""
    out: dict[date, Recorded] = {}
    stale = repeats(own)
    for d, r in own.items():
        base = d - timedelta(days=span)
        restarted = period_start(base, period) != period_start(d, period)
        prev = own.get(base)
        if not restarted and (prev is None or base in stale):
            continue
        increment = _increment(r.value, prev.value if prev else None, base, d, period)
        if increment is None:
            continue
        groups = {
            g: _increment(v, prev.groups.get(g, 0.0) if prev else None, base, d, period)
            for g, v in r.groups.items()
        }
        out[d] = Recorded(
            business_date=d,
            value=increment,
            groups={g: v for g, v in groups.items() if v is not None or r.groups.get(g) is None},
            flagged=r.flagged,
        )
    return out


class Tonight(NamedTuple):
    value: float
    groups: dict[str, float | None]
    span: int
    """The days tonight's increment covers: from the last night the node was built (``base_night``)."""


def base_night(own: Mapping[date, Recorded], day: date) -> date | None:
    """The night tonight's increment is taken from: the last night on record before ``day``, or, when it
    repeated the night before it (a failed or skipped build recorded its stale value), the last one before
    that which did not, so that the repaired night's increment is judged as covering the days since. A
    record unchanged for longer than ``MAX_STEP_DAYS`` is a quiet series, not an unbuilt node: its last
    night. None: no night on record in the ``MAX_STEP_DAYS`` before ``day``."""
    before = sorted((d for d in own if d < day and (day - d).days <= MAX_STEP_DAYS), reverse=True)
    if not before:
        return None
    stale = repeats(own)
    return next((d for d in before if d not in stale), before[0])


def tonight(
    own: Mapping[date, Recorded], day: date, value: float, groups: Mapping[str, float | None], period: Period
) -> Tonight | None:
    """Tonight's increment and its groups' since the last night the node was built (None: no comparable
    night before tonight)."""
    base = base_night(own, day)
    if base is None:
        return Tonight(value, dict(groups), 1) if day == period_start(day, period) else None
    last = own[base]
    increment = _increment(value, last.value, base, day, period)
    if increment is None:
        return None
    per_group: dict[str, float | None] = {}
    for g, v in groups.items():
        per_group[g] = None if v is None else _increment(v, last.groups.get(g, 0.0), base, day, period)
    if period_start(base, period) == period_start(day, period):
        # A group that was there last night and is gone tonight fell by all it had.
        for g, v in last.groups.items():
            if g not in groups and v:
                per_group[g] = -v
    return Tonight(increment, per_group, (day - base).days)


def flagged_in_period(day: date, period: Period, nights: Mapping[date, Recorded]) -> list[date]:
    """The flagged nights before ``day`` in its period."""
    start = period_start(day, period)
    return sorted(d for d, r in nights.items() if start <= d < day and r.flagged)
