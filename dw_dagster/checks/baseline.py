"""Robust baselines for nightly numbers (detection.md, "what we must do instead", point 2).

Log space, same weekday over the last weeks (or day-over-day changes for slowly moving levels, or
week-over-week changes for a level that trends with a weekly rhythm), the scored point and earlier flagged
days excluded, centre = median, scale = 1.4826 x MAD floored at a fraction of the level; an anomaly needs
|robust z| >= the threshold AND a minimum relative change AND the direction that hurts. Too little history
is its own visible state, never a pass.

Small counts (a usual level below ``small_below``) are judged on the absolute change instead, in rows or
units, with the scale floored at the Poisson spread sqrt(level) and at ``small_scale_floor``: one row more
in a table of six is +1 against a spread of about 2.4, not a robust z of 100.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from enum import Enum
from statistics import NormalDist, median
from typing import Literal

from pydantic import BaseModel, Field

MAD_TO_SIGMA = 1.4826
MAX_BRIDGE_DAYS = 7
MAX_BRIDGE_WEEKS = 2
"""Week over week: a night is compared with its weekday one or two weeks before (one left out: flagged)."""


class Direction(str, Enum):
    DOWN = "down"
    UP = "up"
    BOTH = "both"


class BaselineMethod(str, Enum):
    SAME_WEEKDAY = "same_weekday"
    DAY_OVER_DAY = "day_over_day"
    WEEK_OVER_WEEK = "week_over_week"
    """Tonight's change from the same weekday a week before, against the usual weekly change of the last
    ``days`` nights: a steady trend (a table that accumulates rows, the cost of reading it) is its own usual
    change, and a weekly rhythm cancels out."""


class BaselineConfig(BaseModel):
    method: BaselineMethod = BaselineMethod.SAME_WEEKDAY
    weeks: int = Field(default=8, ge=2, le=52, description="Same-weekday lookback, in weeks.")
    days: int = Field(default=28, ge=5, le=365, description="Day- or week-over-week lookback, in days.")
    min_points: int = Field(default=4, ge=3, description="Fewer points give 'insufficient baseline'.")
    z_threshold: float = Field(default=4.0, gt=0)
    min_relative_change: float = Field(
        default=0.005, ge=0, description="An anomaly must also move at least this fraction (0.005 = 0.5%)."
    )
    scale_floor: float = Field(
        default=0.001,
        gt=0,
        description="Floor of the robust scale, in log units (~ fraction of the level), so that a very "
        "stable series does not alarm on trivial changes.",
    )
    small_below: float = Field(
        default=100,
        ge=0,
        description="A series whose usual level is below this (rows or units) is judged on absolute change; "
        "0 turns it off.",
    )
    small_scale_floor: float = Field(
        default=1.0,
        gt=0,
        description="Floor of the scale of a small count, in its units (besides sqrt of the level).",
    )
    calendar: bool = Field(
        default=True, description="Compare calendar days (the metrics file's calendar) with days like them."
    )
    false_alarm_rate: float = Field(
        default=0.005,
        gt=0,
        lt=0.5,
        description="The false alarms an ordinary night may raise on a table, as a probability (0.005: 0.5 "
        "per 100 table-nights), shared by the series judged on the table. Each series' threshold is read "
        "from its own history of one-step errors at that rate (docs/watch.md, 'Thresholds from the series' "
        "own errors').",
    )


class BaselineStatus(str, Enum):
    OK = "ok"
    ANOMALY = "anomaly"
    INSUFFICIENT = "insufficient_baseline"


class BaselineResult(BaseModel):
    status: BaselineStatus
    method: BaselineMethod
    value: float
    points: int
    absolute: bool = False
    """Judged on absolute change (a small count), not in log space."""
    centre: float | None = None
    """The reference centre, in the space judged (log units, or units for a small count)."""
    scale: float | None = None
    expected: float | None = None
    """The baseline's expectation for the scored day, in the value's units."""
    relative_change: float | None = None
    """(value - expected) / expected."""
    robust_z: float | None = None
    z_threshold: float | None = None
    """The |robust z| an anomaly needs: the series' calibrated one, or the fixed ``z_threshold``."""
    calibrated: bool = False
    """The threshold was read from the series' own errors (``Calibration``)."""
    direction: Literal["down", "up", "flat"] | None = None

    @property
    def is_anomaly(self) -> bool:
        return self.status is BaselineStatus.ANOMALY


def _log(v: float) -> float:
    # log1p keeps zero counts scorable (an empty table is the loudest anomaly of all).
    return math.log1p(max(v, 0.0))


def _identity(v: float) -> float:
    return v


def is_small(history: Mapping[date, float], day: date, value: float, config: BaselineConfig) -> bool:
    """Whether the series' usual level (the median of its last 28 nights before ``day``) is a small count."""
    recent = [v for d, v in history.items() if d < day and (day - d).days <= 28 and v is not None]
    return bool(config.small_below) and bool(recent) and median(recent) < config.small_below


NEAR_EMPTY = 1.0
"""A night at or below this (rows or units) is near empty."""


def _empty_is_rare(
    history: Mapping[date, float],
    day: date,
    expected: float,
    rate: float,
    open_on: Callable[[date], bool] | None = None,
) -> bool:
    """Whether an empty night is rarer than the false-alarm ``rate`` for a series expected at ``expected``
    tonight, by its own last four weeks: a series that came near empty in them is judged by its spread. One
    that did not is one whose nights at tonight's level or below (at most twice it) never came near empty,
    and a count of independent rows (Poisson) shows that and then an empty night together
    ``(1 - P(at most 1))^n * P(0)`` of the time: at a mean of 4 and 28 such nights 0.12%, a zero an anomaly;
    a weekend trickle of 3 or 4 rows has 8 such nights in four weeks (the weekdays, at forty, say nothing of
    it), 0.84-0.94%, and its zero is its spread's business. Only where those nights spread as a count does
    (:func:`_spreads_as_a_count`): a total in thousands, or a job that writes the same 4 rows every weekend, is
    no count of chance rows, and its zero is an anomaly.

    Only the nights of tonight's kind count where the calendar tells them apart (``open_on``: whether a night is
    a business day): a weekend trickle that came near empty says nothing of a business day's zero (one group's
    month-end rows, a few a day on weekends and none on some, went from 138 to none and were judged by the
    weekends' spread), while a weekend's or a holiday's zero is judged against the weekends and holidays."""
    window = {d: v for d, v in history.items() if d < day and (day - d).days <= 28 and v is not None}
    if open_on is not None:
        tonight = open_on(day)
        window = {d: v for d, v in window.items() if open_on(d) == tonight}
    if any(v <= NEAR_EMPTY for v in window.values()):
        return False
    like = [v for v in window.values() if v <= 2 * expected]
    if not _spreads_as_a_count(like):
        return True
    return (1 - math.exp(-expected) * (1 + expected)) ** len(like) * math.exp(-expected) < rate


def _spreads_as_a_count(values: Sequence[float]) -> bool:
    """Whether ``values`` spread at least as a count of independent rows at their mean does, by the dispersion
    test's lower tail at ``CHANGE_P``: ``sum((v - mean)^2) / mean`` is chi-square with n - 1 degrees of
    freedom for a Poisson count. Fewer than two values say nothing against it."""
    if len(values) < 2:
        return True
    mean = sum(values) / len(values)
    if mean <= 0:
        return True
    return _chi2_lower_tail(sum((v - mean) ** 2 for v in values) / mean, len(values) - 1) >= CHANGE_P


def _chi2_lower_tail(x: float, k: int) -> float:
    """P(chi-square with ``k`` degrees of freedom <= ``x``): the regularized lower incomplete gamma
    P(k/2, x/2) by its power series, which converges fast in the lower tail this is asked for."""
    if x <= 0:
        return 0.0
    a, y = k / 2, x / 2
    term = total = 1 / a
    for n in range(1, 500):
        term *= y / (a + n)
        total += term
        if term < total * 1e-12:
            break
    return min(1.0, math.exp(-y + a * math.log(y) - math.lgamma(a)) * total)


def transform(absolute: bool):
    return _identity if absolute else _log


def untransform(absolute: bool):
    return _identity if absolute else math.expm1


@dataclass(frozen=True)
class _Reference:
    """What the predictor compares a night with: the reference values (levels, or changes per day or per
    week), the night's own value in the same terms, and what the expectation is built on."""

    refs: list[float]
    target: float
    level: float
    """The usual level in the value's units (the small-count scale's floor)."""
    prev: date | None = None
    """Day or week over week: the night the change is measured from."""
    gap_days: int = 1
    """The steps from ``prev`` to the night: days, or weeks for week over week."""
    steps_of_noise: float = 1.0
    """What the deviation per step is multiplied by to read as one step's. Week over week across a missing
    week: the change spans two steps of trend but one of noise (two nights'), so its deviation per step
    counts twice. Day over day across a gap of ``k`` days (a closed weekend, a bridged incident night): a
    level that moves as a random walk (a stock moved by daily flows) carries ``k`` days of noise, whose
    spread grows as ``√k``, so the change per day is ``√k`` times less noisy than one day's and its deviation
    counts ``√k`` times; dividing by ``k`` alone made a Monday's fall after a closed weekend look a third of
    its size. A business closed at weekends moves one day's worth by Monday (``k`` times would be right), a
    level of independent nightly noise two nights' (also ``k``): ``√k`` is the random walk's, and the least
    alarming of the three. Its own record of twelve Mondays in sixty nights is too short to tell them apart
    (their robust spread varies by a third either way)."""
    ref_steps: list[float] | None = None
    """Each reference's own ``steps_of_noise`` (day over day), so that their spread is one day's."""
    age: float = 0.0
    """Same weekday: the median of the references' ages in weeks, how far their median lags a trend
    (``Calibration.lag_age``); 0 otherwise."""


def reach(config: BaselineConfig) -> timedelta:
    """How far before a night :func:`_reference` reads: a like weekday up to ``weeks`` back, a change over
    ``days`` and the weeks one is bridged over. A score given only the nights within it is the same score."""
    return timedelta(days=max(7 * config.weeks, config.days + 7 * MAX_BRIDGE_WEEKS))


def _reference(
    usable: Mapping[date, float], day: date, value: float, config: BaselineConfig, absolute: bool
) -> _Reference | None:
    """The reference for ``day`` from ``usable`` (nights before it); None when a day-over-day series has no
    night close enough to measure a change from."""
    f = transform(absolute)
    if config.method is BaselineMethod.SAME_WEEKDAY:
        weeks = [w for w in range(1, config.weeks + 1) if day - timedelta(weeks=w) in usable]
        refs = [f(usable[day - timedelta(weeks=w)]) for w in weeks]
        level = median(usable[day - timedelta(weeks=w)] for w in weeks) if refs else 0.0
        return _Reference(refs, f(value), level, age=median(weeks) if weeks else 0.0)
    if config.method is BaselineMethod.WEEK_OVER_WEEK:
        values = {d: f(v) for d, v in usable.items() if d < day}
        weekly = week_over_week(values)
        prev = week_before(values, day)
        if prev is None:
            return None
        refs = [c for b, (_, c) in weekly.items() if (day - b).days <= config.days]
        weeks = (day - prev).days // 7
        return _Reference(refs, (f(value) - values[prev]) / weeks, usable[prev], prev, weeks, weeks)
    # Changes per day between consecutive usable days: a gap left by an excluded (incident) day is bridged,
    # so the night after an incident is compared with the last good night, not the bad one.
    days = sorted(d for d in usable if d < day and (day - d).days <= config.days)
    if not days or (day - days[-1]).days > MAX_BRIDGE_DAYS:
        return None
    pairs = [(a, b) for a, b in zip(days, days[1:], strict=False) if (b - a).days <= MAX_BRIDGE_DAYS]
    refs = [(f(usable[b]) - f(usable[a])) / (b - a).days for a, b in pairs]
    prev = days[-1]
    gap = (day - prev).days
    target = (f(value) - f(usable[prev])) / gap
    ref_steps = [math.sqrt((b - a).days) for a, b in pairs]
    return _Reference(refs, target, usable[prev], prev, gap, math.sqrt(gap), ref_steps)


def week_before(values: Mapping[date, float], day: date) -> date | None:
    """The latest night of ``values`` on ``day``'s weekday at most ``MAX_BRIDGE_WEEKS`` weeks before it."""
    for weeks in range(1, MAX_BRIDGE_WEEKS + 1):
        if (d := day - timedelta(weeks=weeks)) in values:
            return d
    return None


def week_over_week(values: Mapping[date, float]) -> dict[date, tuple[date, float]]:
    """Each night's change per week from its weekday a week (or two) before, keyed by the later night."""
    out = {}
    for d in sorted(values):
        if (prev := week_before(values, d)) is not None:
            out[d] = (prev, (values[d] - values[prev]) / ((d - prev).days // 7))
    return out


def inflation(points: int) -> float:
    """How much wider a night's error from a median of ``points`` reference values is than the noise of one
    night: the median's own variance is sigma^2 / m for m <= 2 (a mean) and about pi sigma^2 / 2m beyond."""
    return math.sqrt(1 + (1 / points if points <= 2 else math.pi / (2 * points)))


class Calibration(BaseModel):
    """A series' own record of how far its nights stray from what the baseline expected of them: tonight is
    an anomaly when it strays further than the series does once in ``1 / alpha`` ordinary nights.

    The errors are one-step: each past ordinary night against the baseline built from the nights before it,
    as tonight is judged, divided by how much the median of that many references widens an error
    (``inflation``), so a night predicted from two references and one predicted from eight are alike."""

    residuals: int
    bias: float
    """The median error: a trend the median lags (a steadily growing series runs above its past weeks)."""
    sigma: float
    """1.4826 x the median absolute deviation of the errors from ``bias``."""
    threshold: float
    """Beyond ``bias``, in either direction, by more than this is an anomaly (units of the errors)."""
    alpha: float
    """The probability per ordinary night of a false alarm on the side (or sides) that hurt."""
    level: float = 0.0
    """The series' usual level (the median of its ordinary nights): a night's spread is scaled from it."""
    lag_age: float = 0.0
    """Same weekday: the median, over the errors ``bias`` was read from, of their references' age in weeks
    (``_Reference.age``) per unit of the spread each error was divided by (``inflation`` x
    ``relative_noise``); 0: not measured (a baseline other than the same weekday's, or a closing lag, whose
    span, ``catching_up``, already stands for tonight's bias). The lag of a median of past weeks behind a
    climb grows with the median's age, not with its widening: in the first weeks of a record each night has
    one more week of references than the last (up to ``BaselineConfig.weeks``), and the errors' bias, read
    at two or three weeks and widened to tonight's four or five, put a night climbing 0.5% a night 2-7%
    below the climb.
    Tonight's bias lies between ``bias`` widened as a noise (``inflation``) and ``bias`` x tonight's age /
    ``lag_age`` (x its level's ``relative_noise``): at a full record the two nearly agree."""
    set_aside: list[date] = Field(default_factory=list)
    """Period-end nights left out of the errors (``recurring.Recurring.aside``): they moved the series."""
    catching_up: float = 0.0
    """A lag closing (``recent_regime``): tonight's bias lies anywhere within this of ``bias`` (units of the
    errors), and tonight is expected at the point of that span nearest to it."""


MIN_RESIDUALS = 10
"""Fewer one-step errors than this calibrate nothing: the fixed robust z (``z_threshold``) judges."""
TAIL_FRACTION = 0.2
"""The share of the largest errors the tail beyond the attainable quantile is fitted on."""
PRIOR_TAIL_INDEX = 0.35
PRIOR_WEIGHT = 10
"""What a short record's tail index is read against: Hill's estimate from the ``k`` largest errors weighed with
a prior index of 0.35 worth 10 such errors. A tail of exponent about 3 (1/0.35 = 2.9) is the "cubic law"
heavy-tailed economic numbers are found to follow (Gabaix, "Power laws in economics and finance", Annu. Rev.
Econ. 2009), taken at its heavier edge so that the rate holds for Student-t noise of 3 degrees of freedom. From
the 7 to 12 largest of 35 to 60 errors the index alone is no estimate: its standard error is the index over the
square root of their number (Drees, de Haan and Resnick, "How to make a Hill plot", Ann. Statist. 2000); one
unmodelled calendar night or unflagged fault among them read an index of 1 (a threshold of 45 spreads), and
errors whose largest happened to agree read almost none. Hill's estimator is the likelihood estimate of the
mean of the log-excesses (exponential, of mean the index); with the Pareto shape's conjugate Gamma prior (Hill
1975 sets out the Bayesian reading; arXiv:2303.12199 derives the conjugacy) the index is (sum of the
log-excesses + 10 x 0.35) / (k + 10). On simulated series (``benchmarks/bench_false_alarms.py --series 80``)
Student-t noise alarms on 0.47 and 0.50 nights in 100 (0.45 and 0.54 with Hill's estimate alone) and a 40%
drop in it is found 336 times in 480 (276); Gaussian noise alarms on 0.02 (0.17)."""
MAX_TAIL_INDEX = 0.5
"""And never heavier than 1/2 (a Pareto tail of exponent 2, the edge of a finite variance): a record that
reads heavier is contaminated more likely than it is business noise."""


def relative_noise(level: float, usual: float) -> float:
    """How much wider a night's relative spread is at ``level`` than at the series' ``usual`` level: a sum
    of many independent items (rows, orders, consignments) spreads as one over the square root of its size,
    so a Sunday at a third of a weekday spreads 1.7 times as much. Kept within a factor of 3."""
    if level <= 0 or usual <= 0:
        return 1.0
    return min(3.0, max(1 / 3, math.sqrt(usual / level)))


def usual_level(points: Mapping[date, float]) -> float:
    return median(points.values()) if points else 0.0


def count_floor(level: float, config: BaselineConfig) -> float:
    """The least spread of a small count at ``level``: a count of independent rows spreads as the square
    root of its level (Poisson), and never below ``small_scale_floor``."""
    return max(config.small_scale_floor, math.sqrt(max(level, 0.0)))


def count_noise(points: Mapping[date, float], config: BaselineConfig) -> float:
    """The spread of an ordinary night's error of a small count, in its units: its one-step errors' robust
    spread where they have enough of them, floored at the count's own (:func:`count_floor`): what a
    calibration's ``sigma`` is to a larger series, which a small count has none of."""
    floor = count_floor(usual_level(points), config)
    errors = [abs(e) for e, _ in one_step_errors(points, config, absolute=True)]
    return max(floor, MAD_TO_SIGMA * median(errors)) if len(errors) >= MIN_RESIDUALS else floor


def one_step_errors(
    points: Mapping[date, float], config: BaselineConfig, absolute: bool
) -> list[tuple[float, float]]:
    """Each night of ``points`` against the baseline of the nights before it (at least two references),
    divided by the median's widening for that many references and by the relative spread of its level
    (``relative_noise``), as ``score`` builds them, each value transformed once; beside each error, its
    references' age per unit of that spread (``Calibration.lag_age``; 0 but for the same weekday)."""
    f = transform(absolute)
    values = {d: f(v) for d, v in points.items()}
    usual = usual_level(points)
    days = sorted(values)
    out = []
    if config.method is BaselineMethod.SAME_WEEKDAY:
        for d in days:
            weeks = [w for w in range(1, config.weeks + 1) if d - timedelta(weeks=w) in points]
            if len(weeks) >= 2:
                raw = [points[d - timedelta(weeks=w)] for w in weeks]
                refs = [f(v) for v in raw]
                spread = inflation(len(refs)) * (1.0 if absolute else relative_noise(median(raw), usual))
                out.append(((values[d] - median(refs)) / spread, median(weeks) / spread))
        return out
    if config.method is BaselineMethod.WEEK_OVER_WEEK:
        weekly = week_over_week(values)
        for d, (prev, change) in weekly.items():
            refs = [c for b, (_, c) in weekly.items() if b < d and (d - b).days <= config.days]
            if len(refs) >= 2:
                spread = inflation(len(refs)) * (1.0 if absolute else relative_noise(points[prev], usual))
                out.append(((change - median(refs)) * ((d - prev).days // 7) / spread, 0.0))
        return out
    # (the later night, its change per day) for consecutive nights close enough to measure a change
    changes = [
        (b, a, (values[b] - values[a]) / (b - a).days)
        for a, b in zip(days, days[1:], strict=False)
        if (b - a).days <= MAX_BRIDGE_DAYS
    ]
    for i, d in enumerate(days[1:], start=1):
        prev = days[i - 1]
        gap = (d - prev).days
        if gap > MAX_BRIDGE_DAYS:
            continue
        refs = [c for b, a, c in changes if b < d and (d - a).days <= config.days]
        if len(refs) >= 2:
            spread = inflation(len(refs)) * (1.0 if absolute else relative_noise(points[prev], usual))
            # A gap's change per day, read as one day's noise (``_Reference.steps_of_noise``).
            out.append((((values[d] - values[prev]) / gap - median(refs)) * math.sqrt(gap) / spread, 0.0))
    return out


def tail_threshold(deviations: Sequence[float], p: float) -> float:
    """The deviation exceeded with probability ``p``: the split-conformal quantile (the
    ``ceil((n + 1)(1 - p))``-th smallest of the ``n`` deviations) where ``n`` is large enough, else the
    largest deviations' tail extrapolated to ``p`` (Weissman's estimator with Hill's tail index over the
    largest ``TAIL_FRACTION`` of them, read against ``PRIOR_TAIL_INDEX`` and at most ``MAX_TAIL_INDEX``),
    never below a Gaussian tail of the same spread."""
    a = sorted(deviations)
    n = len(a)
    rank = math.ceil((n + 1) * (1 - p))
    if rank <= n:
        return a[rank - 1]
    k = max(3, round(n * TAIL_FRACTION))
    u = a[n - k - 1]
    gaussian = MAD_TO_SIGMA * median(a) * NormalDist().inv_cdf(1 - p / 2)
    if u <= 0:
        return max(a[-1], gaussian)
    # Weissman's extrapolation with Hill's tail index: a tail as heavy as the largest errors show, read
    # against the prior (a short record's largest errors alone are no estimate of it).
    excess = sum(math.log(x / u) for x in a[n - k :])
    index = min(MAX_TAIL_INDEX, (excess + PRIOR_WEIGHT * PRIOR_TAIL_INDEX) / (k + PRIOR_WEIGHT))
    extrapolated = u * (k / (n * p)) ** index
    return max(extrapolated, gaussian)


CHANGE_P = 0.001
"""The significance at which the one-step errors are taken to have changed regime (``recent_regime``): strict,
as the errors of a same-weekday baseline share references and so run in short streaks."""


def _ranks(values: Sequence[float]) -> list[float]:
    """Each value's rank among ``values`` (1-based; ties share their mean rank)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i : j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def change_point(errors: Sequence[float]) -> int | None:
    """Where the errors' level changed, if it did at ``CHANGE_P``: the index of the first error of the later
    regime. Pettitt's rank test ("A non-parametric approach to the change-point problem", Appl. Statist.
    1979): U_t = 2 x (the sum of the first t ranks) - t(n + 1), K = max |U_t|, p ~ 2 exp(-6K^2 / (n^3 + n^2));
    ranks, so a few outlying nights neither make nor hide a change."""
    n = len(errors)
    best, split, running = 0.0, 0, 0.0
    for t, r in enumerate(_ranks(errors)[:-1], start=1):
        running += r
        if abs(u := 2 * running - t * (n + 1)) > best:
            best, split = abs(u), t
    if split == 0 or 2 * math.exp(-6 * best**2 / (n**3 + n**2)) >= CHANGE_P:
        return None
    return split


def _trending(errors: Sequence[float]) -> bool:
    """Whether the errors still move one way (the Mann-Kendall trend test at ``CHANGE_P``; the variance
    without its correction for ties, which only makes the test stricter)."""
    n = len(errors)
    s = sum((b > a) - (b < a) for i, a in enumerate(errors) for b in errors[i + 1 :])
    z = (abs(s) - 1) / math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    return 2 * (1 - NormalDist().cdf(z)) < CHANGE_P


CLOSING_STEP = 7
"""How many nights of its pace a closing lag may close at once (``recent_regime``): the median of past like
nights takes its middle from nights a week apart, so as they reach the series' new level it moves by at most
the week its middle night steps over. Of a window that filled at a pace of ``r`` a night and stopped, the
median of six weeks, the average of its third and fourth, closes at ``r`` a night, then at ``r / 2`` once the
third has reached the level, and then drops the fourth's last week, ``7 r / 2``, in one night."""


LATEST_NIGHTS = 7
"""The latest errors a lag the trend test does not see may have closed to (``recent_regime``): a week's
worth (one night of each weekday where every weekday is open and ordinary), so that a weekly rhythm left in
the errors moves their median little."""
SETTLED_LAG = 2.5
"""A bias beyond this many spreads of its regime's deviations is a lag the series runs ahead of (or behind)
its past like nights by, which may close on any night (``recent_regime``); one within it is the errors'
noise about zero and is kept as it is."""


@dataclass(frozen=True)
class Regime:
    """What the errors of the recent regime say of tonight's (``recent_regime``)."""

    bias: float
    deviations: list[float]
    catching_up: float = 0.0
    """Half the span tonight's bias may lie anywhere in: a lag catching up with the series may close on any
    night (``Calibration.catching_up``)."""


def night_to_night_noise(errors: Sequence[float]) -> float:
    """The errors' spread from one night to the next over the whole record: 1.4826 x the median absolute
    second difference of consecutive errors, over sqrt(6) (the second difference of independent noise of
    spread s spreads as sqrt(6) s). A second difference is a night against the line through its neighbours,
    so a lag closing or growing at a steady pace leaves nothing in it, and the few nights a change of regime
    or a step of the median touches are outvoted."""
    seconds = [abs(c - 2 * b + a) for a, b, c in zip(errors, errors[1:], errors[2:], strict=False)]
    return MAD_TO_SIGMA * median(seconds) / math.sqrt(6) if seconds else 0.0


def _at_least_noise(deviations: list[float], errors: Sequence[float]) -> list[float]:
    """``deviations`` of the recent regime's errors, each lifted to at least the spread the whole record's
    errors show from night to night (``night_to_night_noise``), so that their spread is never below it and
    their largest, the tail the threshold is read from, stay as the errors show them. A line through a dozen
    errors of a lag closing at a deterministic pace leaves deviations narrower than the series' noise (half of
    it, in a window that filled and stopped), and the change-point test, applied again and again, may leave
    ten errors that happened to be quiet (a spread of 0.0036 on a series of 2% noise read a +2.8% night at
    z 8.5): an ordinary night's wobble would read as ten spreads. Widening every deviation by the same factor
    instead scaled a tail that already stood far out (half the deviations quiet, half at five spreads) to a
    threshold a 20% fall stayed inside."""
    floor = night_to_night_noise(errors) / MAD_TO_SIGMA
    return [max(d, floor) for d in deviations]


def recent_regime(errors: Sequence[float]) -> Regime:
    """The bias tonight's expectation carries and the deviations its threshold is read from.

    A steady trend the median lags gives steady errors: their median is the bias, and their deviations from it
    the spread. A series whose trend changed (a table that keeps a rolling window filled it, and stopped
    growing) has errors that changed regime: the bias of the growth is no longer tonight's, and its errors
    would widen the threshold. So the errors are read from their latest change point on (``change_point``,
    applied again to what follows each change while at least ``MIN_RESIDUALS`` errors remain); if those still
    move one way (a baseline of past weeks catching up with a level that stopped, for as many weeks as it
    looks back), their robust line (Theil-Sen: the median of the pairwise slopes) has reached tonight's bias
    at the latest error (never further: no night beyond it supports the line), and the deviations are from
    that line, spread at least as the record's errors do from night to night (``_at_least_noise``).

    A line that heads towards zero is a lag closing: the median of past like nights catching up with a level
    the series reached. It does not close along the line: the median moves in steps as the nights it takes
    its middle from reach the new level, and may drop the rest of a week's lag in one night (a window that
    filled and stopped: errors falling 0.45, 0.30, 0.16 over three weeks, then 0). Where it is tonight the
    errors cannot tell, only that it lies between the line's latest error and ``CLOSING_STEP`` nights of its
    pace nearer zero, never beyond zero (a lag does not overshoot the level it closes on: a line that crossed
    zero reads zero). So tonight's bias is that span's middle and half its width is ``catching_up``: a night
    is judged from the nearer end of the span, and an ordinary night whose lag closed is not read as a fall of
    twelve spreads, while a fall below the span still is. A line heading away from zero (a lag growing: a
    series that started to climb) is taken at its latest error.

    Errors that do not move one way at that strictness are the regime's median, their deviations from it
    spread (after a change point) at least as the record's from night to night. A lag may close too slowly
    for the trend test and still be closing (a window filling linearly: its log lag shrinks a little each
    night, then the fill stops): where the median is a lag (beyond ``SETTLED_LAG`` spreads of zero) and the
    latest week's median (``LATEST_NIGHTS``) is nearer zero, tonight's bias is the span between the two
    (never beyond zero), judged from its nearer end as above: a 60-day fill's constant bias (0.53, twelve
    spreads from zero; its latest week's 0.50) read the night after the fill stopped, two of its noise's
    spreads low, as a fall of 12.6%, an ERROR."""
    start = 0
    while (cut := change_point(errors[start:])) is not None and len(errors) - start - cut >= MIN_RESIDUALS:
        start += cut
    recent = list(errors[start:])
    if start and _trending(recent):
        slope = median((b - a) / (j - i) for i, a in enumerate(recent) for j, b in enumerate(recent) if j > i)
        intercept = median(e - slope * i for i, e in enumerate(recent))
        deviations = _at_least_noise([abs(e - intercept - slope * i) for i, e in enumerate(recent)], errors)
        latest = intercept + slope * (len(recent) - 1)
        if abs(latest) >= abs(intercept):
            return Regime(latest, deviations)
        near = latest + slope * CLOSING_STEP
        if near * latest <= 0:
            near = 0.0
        if latest * intercept <= 0:
            latest = near = 0.0
        return Regime((latest + near) / 2, deviations, abs(latest - near) / 2)
    bias = median(recent)
    deviations = [abs(e - bias) for e in recent]
    if start:
        # An uncut regime is the whole record: its deviations are the record's own noise already.
        deviations = _at_least_noise(deviations, errors)
    latest = median(recent[-LATEST_NIGHTS:])
    settled = abs(bias) <= SETTLED_LAG * MAD_TO_SIGMA * median(deviations)
    if settled or (latest * bias > 0 and abs(latest) >= abs(bias)):
        return Regime(bias, deviations)
    near = latest if latest * bias > 0 else 0.0
    return Regime((bias + near) / 2, deviations, abs(bias - near) / 2)


def false_alarm_alpha(config: BaselineConfig, share: int = 1) -> float:
    """The false-alarm probability one series may spend per ordinary night: the table's rate, split between
    the ``share`` series judged on it."""
    return config.false_alarm_rate / max(1, share)


def calibrate(
    points: Mapping[date, float], config: BaselineConfig, absolute: bool, alpha: float, hurts: Direction
) -> Calibration | None:
    """The series' calibration from its ordinary nights ``points``; None for a small count (judged on
    absolute change) or too short a record."""
    if absolute:
        return None
    steps = one_step_errors(points, config, absolute)
    if len(steps) < MIN_RESIDUALS:
        return None
    regime = recent_regime([e for e, _ in steps])
    deviations = regime.deviations
    # The regime's errors are the latest, one deviation each.
    ages = [a for _, a in steps[-len(deviations) :]]
    # Deviations are taken as symmetric: a side that alone hurts may spend alpha on its own.
    p = min(0.5, alpha if hurts is Direction.BOTH else 2 * alpha)
    return Calibration(
        residuals=len(deviations),
        bias=regime.bias,
        sigma=MAD_TO_SIGMA * median(deviations),
        threshold=tail_threshold(deviations, p),
        alpha=alpha,
        level=usual_level(points),
        lag_age=median(ages)
        if config.method is BaselineMethod.SAME_WEEKDAY and not regime.catching_up
        else 0.0,
        catching_up=regime.catching_up,
    )


def score(
    history: Mapping[date, float],
    day: date,
    value: float,
    config: BaselineConfig,
    hurts: Direction = Direction.BOTH,
    excluded_days: Collection[date] = (),
    *,
    absolute: bool | None = None,
    offset: float = 0.0,
    scale_factor: float = 1.0,
    calibration: Calibration | None = None,
    open_on: Callable[[date], bool] | None = None,
) -> BaselineResult:
    """Scores ``value`` on ``day`` against ``history`` (which may contain ``day``: it is never used).

    ``absolute``: judge on absolute change (None: when the series is a small count). ``offset`` moves the
    expected level (in the space judged: log units, or units of a small count; a calendar day's effect),
    ``scale_factor`` widens the scale. ``calibration``: the series' own errors set the threshold (else the
    fixed robust z, ``z_threshold``). ``open_on``: whether a night is a business day, by the calendar that tells
    tonight's kind of night (an empty one is judged against the nights of its kind, ``_empty_is_rare``).
    """
    usable = {d: v for d, v in history.items() if d < day and d not in excluded_days and v is not None}
    if absolute is None:
        absolute = is_small(usable, day, value, config)
    if absolute:
        calibration = None
    f = transform(absolute)
    ref = _reference(usable, day, value, config, absolute)
    if ref is None or len(ref.refs) < config.min_points:
        return BaselineResult(
            status=BaselineStatus.INSUFFICIENT,
            method=config.method,
            value=value,
            points=len(ref.refs) if ref else 0,
            absolute=absolute,
        )
    refs, target, gap_days = ref.refs, ref.target, ref.gap_days
    same_weekday = config.method is BaselineMethod.SAME_WEEKDAY
    # The offset is on the level; a day-over-day centre is a change per day.
    centre = median(refs) + (offset if same_weekday else offset / gap_days)
    threshold = config.z_threshold
    if calibration is not None:
        # In the errors' units: tonight's error, less the series' usual one, against its own tail.
        noise = relative_noise(ref.level, calibration.level)
        widen = inflation(len(refs)) * noise
        # The bias at tonight's references: widened as a noise is (``inflation``), or grown with their age as
        # a lag behind a climb is (``Calibration.lag_age``). While the record fills its weeks the errors cannot
        # tell the two apart (a climb's lag grows with the age; a window that filled and stopped does not), so
        # tonight's bias lies anywhere between them; a closing lag's (``catching_up``) lies within its span.
        aged = noise * ref.age / calibration.lag_age if calibration.lag_age and ref.age else widen
        low, high = sorted((calibration.bias * widen, calibration.bias * aged))
        slack = calibration.catching_up * widen  # (a closing lag's calibration has no lag_age: aged is widen)
        # Tonight is expected at the point of that span nearest to it.
        centre = min(max(target, centre + low - slack), centre + high + slack)
        scale = max(calibration.sigma * widen, config.scale_floor) * scale_factor
        limit = max(calibration.threshold * widen * scale_factor, config.z_threshold * config.scale_floor)
        threshold = limit / scale
    else:
        typical = median(refs)
        mad = median(
            abs(x - typical) * s for x, s in zip(refs, ref.ref_steps or [1.0] * len(refs), strict=True)
        )
        floor = count_floor(ref.level, config) if absolute else config.scale_floor
        scale = max(MAD_TO_SIGMA * mad, floor) * scale_factor
    z = (target - centre) / scale * ref.steps_of_noise
    if same_weekday:
        expected = untransform(absolute)(centre)
    else:
        assert ref.prev is not None
        expected = untransform(absolute)(f(usable[ref.prev]) + centre * gap_days)
    rel = (value - expected) / expected if expected else (0.0 if value == 0 else math.inf)
    direction: Literal["down", "up", "flat"] = "down" if z < 0 else "up" if z > 0 else "flat"
    hurts_here = hurts is Direction.BOTH or hurts.value == direction
    # An empty table or a zero total where the usual level is not zero is an anomaly whatever the spread,
    # where the series' own recent nights say an empty one is rarer than the false-alarm rate
    # (``_empty_is_rare``): a small count of rare events (a few refunds a day) or a weekend trickle is judged
    # by its spread like any other night, or its ordinary zeros would raise at their own frequency.
    emptied = (
        absolute
        and value <= 0 < expected
        and _empty_is_rare(usable, day, expected, config.false_alarm_rate, open_on)
    )
    anomalous = (abs(z) >= threshold or emptied) and abs(rel) >= config.min_relative_change and hurts_here
    return BaselineResult(
        status=BaselineStatus.ANOMALY if anomalous else BaselineStatus.OK,
        method=config.method,
        value=value,
        points=len(refs),
        absolute=absolute,
        centre=centre,
        scale=scale,
        expected=expected,
        relative_change=rel,
        robust_z=z,
        z_threshold=threshold,
        calibrated=calibration is not None,
        direction=direction,
    )
