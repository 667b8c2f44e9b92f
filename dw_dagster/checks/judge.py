"""How severe tonight's deviation is, once the calendar, the small-count rule and accepted levels have had
their say (``baseline.score`` is the statistics; this is the judgement a person can live with).

- **Accepted levels** first: a series re-based from a night (an owner accepted it, a verified fix or a
  newly mapped key explains it) is judged as if the nights before had been at the new level; on the first
  night at the new level there is nothing to compare it with and it passes, saying so. A verified fix's
  level passes its first night only at the level the fix rebuilt; away from it, the night is judged as if
  there were no level (a new fault the night after a fix is news).
- **Small counts**: a series whose usual level is below ``small_below`` is judged on absolute change
  (``baseline.score``).
- **The calendar**: an ordinary night is compared with ordinary nights only (past month-ends do not widen
  the spread of Tuesdays); on the same weekday a night left out for its kind keeps its place among the
  references at its value less its own effect, so its absence does not make them older. A calendar night
  is compared with the nights like it: the effect each past like night showed against its own ordinary
  expectation moves tonight's expectation. With no like night on
  record, a deviation the calendar can explain (its size and direction) is a WARN, never an ERROR. On the
  first night of a learned kind without another it was never told apart from (``Recurring.untold``), an
  ERROR needs the deviation beyond both that kind's expectation and the ordinary one.

ERROR needs the deviation to survive all three.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from datetime import date, timedelta
from statistics import NormalDist, median
from typing import Literal

from pydantic import BaseModel, Field

from dw_dagster.checks.baseline import (
    CHANGE_P,
    MIN_RESIDUALS,
    BaselineConfig,
    BaselineMethod,
    BaselineResult,
    BaselineStatus,
    Calibration,
    Direction,
    calibrate,
    count_noise,
    false_alarm_alpha,
    is_small,
    reach,
    relative_noise,
    score,
    transform,
    untransform,
    usual_level,
)
from dw_dagster.checks.calendar import WEEKDAYS, BusinessCalendar, CalendarDay, closed_days
from dw_dagster.checks.history import Rebase
from dw_dagster.checks.neighbours import own_effect
from dw_dagster.checks.recurring import MATERIAL, Recurring, learn, moves_like_once

ALL_BUT_CLOSED = math.log(0.25)
"""A calendar night whose like nights ran at a quarter of an ordinary one or less (their effect, in log space:
one like night of a few heavy-tailed rows measures a thirtieth as anything from a fifth to a hundredth)."""


class Judgement(BaseModel):
    severity: Literal["ERROR", "WARN"] | None
    """None: nothing to raise (the check passes, or says the baseline is insufficient)."""
    result: BaselineResult
    """The score the judgement rests on (the calendar-adjusted one on a calendar day)."""
    plain: BaselineResult | None = None
    """On a calendar day: the score as on an ordinary night, before the calendar's effect."""
    calendar_day: CalendarDay | None = None
    like_days: list[date] = Field(default_factory=list)
    calendar_effect_pct: float | None = None
    """The usual effect of this kind of day, measured on the like days."""
    level: Rebase | None = None
    """The accepted level in force tonight."""
    accepted_tonight: bool = False
    calibration: Calibration | None = None
    """The series' own errors the threshold was read from (None: too short a record, or a small count)."""
    calibrated_on: str | None = None
    """The kind of night the calibration was read from alone (``of_tonights_kind``), or None: every kind."""
    closure: bool = False
    """A fall on the first public holiday on record, beyond what a holiday explains: a WARN, since a closure
    for it and a loss look alike (``CalendarDay.closure``)."""
    notes: list[str] = Field(default_factory=list)

    @property
    def insufficient(self) -> bool:
        return self.result.status is BaselineStatus.INSUFFICIENT and not self.accepted_tonight

    def describe(self) -> str:
        return "; ".join(self.notes)


def rebased(
    points: Mapping[date, float], rebases: Sequence[Rebase], config: BaselineConfig, absolute: bool
) -> dict[date, float]:
    """``points`` with every night before each level's first night moved to that level, oldest level
    first: the step the level made is measured on its first night against its own baseline."""
    f, inv = transform(absolute), untransform(absolute)
    out = dict(points)
    for r in sorted(rebases, key=lambda r: r.from_date):
        after = sorted(d for d in out if d >= r.from_date)
        before = {d: v for d, v in out.items() if d < r.from_date}
        if not after or not before:
            continue
        first = after[0]
        s = score(before, first, out[first], config, absolute=absolute)
        reference = s.expected if s.expected is not None else before[max(before)]
        delta = f(out[first]) - f(max(reference, 0.0))
        for d in before:
            out[d] = inv(f(out[d]) + delta)
    return out


class Indexed:
    """The sorted dates of the last two night-to-value mappings asked about (learning alternates between
    the ordinary nights and those less one kind's occurrences), to read a window of each by bisection."""

    def __init__(self) -> None:
        self._kept: list[tuple[Mapping[date, float], list[date]]] = []

    def between(self, points: Mapping[date, float], start: date, end: date) -> dict[date, float]:
        """The nights of ``points`` from ``start`` to before ``end``."""
        days = next((days for kept, days in self._kept if kept is points), None)
        if days is None:
            days = sorted(points)
            # The mapping itself is kept (not its id, which a new one may take once it is gone).
            self._kept = [(points, days), *self._kept[:1]]
        return {k: points[k] for k in days[bisect_left(days, start) : bisect_left(days, end)]}


def judge(
    history: Mapping[date, float | None],
    day: date,
    value: float,
    config: BaselineConfig,
    hurts: Direction = Direction.BOTH,
    *,
    calendar: BusinessCalendar | None = None,
    excluded_days: Collection[date] = (),
    rebases: Sequence[Rebase] = (),
    share: int = 1,
    kind_calendar: BusinessCalendar | None = None,
) -> Judgement:
    """Tonight's ``value`` of a series against its ``history``. ``share``: how many series are judged on the
    same table, which share its false-alarm rate (``BaselineConfig.false_alarm_rate``). ``kind_calendar``:
    the calendar whose business days tell the kinds of night apart for the calibration (``of_tonights_kind``;
    by default ``calendar``), so that a series judged without the calendar's days is still calibrated on
    nights of tonight's kind."""
    active = sorted((r for r in rebases if r.from_date <= day), key=lambda r: r.from_date)
    # The night an owner accepted (or the check explained) is the new level's first point, even if it was
    # flagged; a remediation's level starts after the bad night, which stays out.
    restored = {r.from_date for r in active if r.kind != "remediation"}
    usable = {
        d: v
        for d, v in history.items()
        if d < day and v is not None and math.isfinite(v) and (d not in excluded_days or d in restored)
    }
    # A series empty on the weekdays its feed does not load (business days only): an empty one is its
    # ordinary night; an open night is judged against open nights only (calendar.closed_days).
    closed = closed_days(usable, day, value)
    if closed.tonight is not None:
        empty = BaselineResult(
            status=BaselineStatus.OK, method=config.method, value=value, points=closed.points, absolute=True,
            expected=0.0, relative_change=0.0, robust_z=0.0, direction="flat",
        )  # fmt: skip
        return Judgement(severity=None, result=empty, notes=[closed.tonight])
    usable, shut = closed.split(usable)
    cal = calendar if calendar is not None and config.calendar else None
    split_by = kind_calendar if kind_calendar is not None else cal
    # An empty night is judged against the nights of its kind (business days, or weekends and holidays).
    open_on = split_by.is_business_day if split_by is not None else None
    level = active[-1] if active else None
    absolute = is_small(usable, day, value, config)
    unsettled = []
    if level is not None and level.kind == "remediation" and not any(level.from_date <= d for d in usable):
        # A fix's level passes its first night only at the level the fix rebuilt (the incident's night, as
        # its rerun re-recorded it): a night that moved away from that is judged as if there were no level,
        # so a new fault the night after a fix is not taken for the fix.
        rebuilt = history.get(level.from_date - timedelta(days=1))
        tolerance = config.min_relative_change * abs(rebuilt) if rebuilt else 0.0
        if rebuilt is None or abs(value - rebuilt) > tolerance:
            unsettled = [
                f"{level.describe()}; tonight is not at the level the fix rebuilt"
                + (f" ({rebuilt:,.0f})" if rebuilt is not None else "")
                + ": judged on the usual baseline"
            ]
            active = [r for r in active if r is not level]
            level = active[-1] if active else None
    if level is not None and not any(level.from_date <= d for d in usable):
        plain = score(usable, day, value, config, hurts, absolute=absolute, open_on=open_on)
        return Judgement(
            severity=None,
            result=plain,
            level=level,
            accepted_tonight=True,
            notes=[f"{level.describe()}; tonight is its first night"],
        )
    usable = rebased(usable, active, config, absolute)
    notes = [*unsettled, *([level.describe()] if level else [])]

    configured = cal if cal is not None and not cal.empty else None
    kinds = {d: configured.day(d) for d in usable} if configured else {}
    named = {d: v for d, v in usable.items() if kinds.get(d) is None}
    # The nights left out as an incident's, since the last level's first night, that the calendar does not
    # name, on weekdays the series is open: a recurring day among them that moved like its earlier
    # occurrences is one more of them (recurring.py).
    since = active[-1].from_date if active else date.min
    flagged = {
        d: v
        for d, v in history.items()
        if since <= d < day
        and v is not None
        and math.isfinite(v)
        and d not in usable
        and d.weekday() not in closed.weekdays
        and (configured is None or configured.day(d) is None)
    }
    values = {**usable, **flagged}
    alpha = false_alarm_alpha(config, share)
    # The threshold from the series' own one-step errors on ordinary nights, at the false-alarm rate.
    calibration = calibrate(named, config, absolute, alpha, hurts)
    f = transform(absolute)
    # A like night early in the history has few ordinary nights before it: its effect is measured against
    # as few as one (the effects are pooled, and the scale widened for how few there are).
    lenient = config.model_copy(update={"min_points": 1})

    # Learning measures every night against the nights before it, a few hundred times a judgement: each
    # time from the nights its reference can read (``reach``), found in the points' sorted dates.
    span, indexed = reach(lenient), Indexed()

    def effect_of(d: date, points: Mapping[date, float]) -> float | None:
        s = score(indexed.between(points, d - span, d), d, values[d], lenient, absolute=absolute)
        if s.expected is None or s.status is BaselineStatus.INSUFFICIENT:
            # The first nights of a history have no like weekday before them: a past night's effect is
            # measured against the like weekdays after it instead (the nights after it, mirrored), so the
            # first month-end of a short history is an occurrence like the others.
            later = indexed.between(points, d + timedelta(days=1), d + span + timedelta(days=1))
            after = {d - (k - d): v for k, v in later.items()}
            s = score(after, d, values[d], lenient, absolute=absolute)
        if s.expected is None or s.status is BaselineStatus.INSUFFICIENT:
            return None
        return f(values[d]) - f(max(s.expected, 0.0))

    today = configured.day(day) if configured else None
    # Recurring days the file's calendar says nothing about, learned from the series' own history: a small
    # count's too, against its own spread (a few dozen invoices a day run on the last business day as a
    # business's thousands do, and each month-end was an ERROR).
    noise = calibration.sigma if calibration else count_noise(named, config) if absolute else None
    if absolute and noise and config.method is BaselineMethod.SAME_WEEKDAY:
        # A count whose nights all lie within a material move of each other can learn nothing: each night's
        # expectation is a median of the others (and its own effect no larger than its departure), so no
        # occurrence moved it by MATERIAL spreads. Most small counts (a dimension of a few rows) are such,
        # and learning costs a hundred times a small count's judgement.
        seen = [*named.values(), *flagged.values()]
        if max(seen, default=0.0) - min(seen, default=0.0) < MATERIAL * noise:
            noise = None
    recurring = (
        learn(named, day, cal, effect_of, noise, flagged) if cal is not None and noise else Recurring()
    )
    ordinary = {d: v for d, v in named.items() if d not in recurring.nights}
    if recurring.nights:
        calibration = calibrate(ordinary, config, absolute, alpha, hurts)
    # Only on a night no calendar names: a calendar night's expectation carries its like nights' effect,
    # whose spread from one month-end to the next the quiet kind's ordinary errors alone understate.
    own_kind = (
        of_tonights_kind(ordinary, day, split_by, config, absolute, alpha, hurts)
        if split_by is not None and calibration is not None and today is None and recurring.tonight is None
        else None
    )
    calibrated_on = None
    if own_kind is not None:
        calibrated_on, calibration = own_kind
    if calibration is not None and recurring.aside:
        calibration = calibration.model_copy(update={"set_aside": sorted(recurring.aside)})

    same_weekday = config.method is BaselineMethod.SAME_WEEKDAY

    def plain_score(
        d: date,
        v: float,
        points: Mapping[date, float],
        cfg: BaselineConfig = config,
        way: Direction = hurts,
        **kw,
    ):
        kw.setdefault("calibration", calibration)
        kw.setdefault("open_on", open_on)
        s = score(points, d, v, cfg, way, absolute=absolute, **kw)
        if s.status is BaselineStatus.INSUFFICIENT and len(points) < len(usable) and not same_weekday:
            # Day or week over week bridges a week or two at most: after a longer run of calendar nights (a
            # Christmas fortnight) it has no night to start from, and every night, calendar ones included, is
            # judged on rather than none. (The same weekday's references keep each calendar night's place,
            # below, at its value less its effect.)
            s = score({k: x for k, x in usable.items() if k < d}, d, v, cfg, way, absolute=absolute, **kw)
        return s

    departures: dict[date, float | None] = {}

    def departure(d: date) -> float | None:
        """Night ``d``'s departure from its own ordinary expectation, from the ordinary nights before it (once
        a night: the nights beside one like night are beside the next)."""
        if d not in departures:
            s = plain_score(d, usable[d], {k: x for k, x in ordinary.items() if k < d}, lenient)
            departures[d] = (
                None
                if s.expected is None or s.status is BaselineStatus.INSUFFICIENT
                else f(usable[d]) - f(max(s.expected, 0.0))
            )
        return departures[d]

    def own(d: date) -> float | None:
        """A calendar night's own effect: its departure less the drift of the ordinary nights beside it
        (``neighbours.own_effect``; None where it cannot be measured or did not stand out)."""
        e = departure(d)
        return None if e is None else own_effect(d, e, ordinary, departure)

    def in_place(d: date) -> float | None:
        """What to take off a night left out of the ordinary ones to keep it among tonight's references: a
        learned or set-aside occurrence's effect, a calendar night's own, nothing for a calendar night that
        moved only as the nights beside it did (a holiday the business does not keep); None where it cannot be
        measured."""
        if d in recurring.nights:
            return recurring.effect(d)
        return None if departure(d) is None else (own(d) or 0.0)

    # Tonight's references: the ordinary nights, and on the same weekday, in its place, each night left out of
    # them for its kind (a calendar night, a learned or set-aside occurrence) at its value less its own effect,
    # so that leaving a night out does not make the references older. Dropped, a Monday's month-end made the
    # next Mondays' references a week older on the median, and on a climbing series their lag an ERROR (z 5.5
    # against 4.8). A calendar night whose effect is not measured is no reference at all (its raw x0.3 pulled
    # a holiday's next like weekday down), nor is an incident's night (left out as ``history.left_out`` says).
    # Day or week over week bridges the night instead, its gap counted in the change's noise: a stock's
    # month-end less its effect is its expectation, without the night's own step, and the night after it
    # read two nights' noise as one's.
    inv = untransform(absolute)
    references = dict(ordinary)
    for w in range(1, config.weeks + 1) if same_weekday else ():
        d = day - timedelta(weeks=w)
        if d in ordinary or (v := usable.get(d)) is None:
            continue
        if (effect := in_place(d)) is not None:
            references[d] = inv(f(v) - effect)
    plain = plain_score(day, value, references)

    def like_effects(kind: CalendarDay) -> tuple[list[float], list[date]]:
        """The effects of the past nights like tonight of ``kind``, and those nights."""
        if kind.kind == "recurring":
            (key,) = kind.like_keys
            theirs = recurring.effects.get(key, {})
            measured = [d for d in recurring.like if d in theirs]
            return [theirs[d] for d in measured], measured
        like: list[date] = []
        for key in kind.like_keys:
            like = sorted(d for d, k in kinds.items() if k is not None and key in k.like_keys)
            if like:
                break
        if not like and kind.kind in ("quarter_end", "month_end"):
            # No configured like night: the same business day from the end of earlier months.
            position = configured.business_days_left(day, False) if configured else None
            like = sorted(
                d for d in ordinary if configured and configured.business_days_left(d, False) == position
            )
        effects, measured = [], []
        for d in like:
            # A like night moved by the expectation's lag, not by its kind (neighbours.py), is no like night;
            # one moved by both carries its kind's effect only: a holiday while the business climbed otherwise
            # taught the climb's lag as the holiday's, and the holidays after the climb fell short of it.
            if (o := own(d)) is not None:
                effects.append(o)
                measured.append(d)
        return effects, measured

    effects: list[float] = []
    measured: list[date] = []
    on_record = False
    if today is not None:
        effects, measured = like_effects(today)
        # Any like night, whether or not the series moved on it: a business that traded through its past
        # holidays does not close for them.
        on_record = bool(measured)
        noise = calibration.sigma if calibration else (plain.scale or 0.0)
        if today.kind in ("holiday", "month_end", "quarter_end") and effects:
            # Like nights only when they behaved alike: the same holiday in an earlier year, else the holidays
            # (or period ends) on which the series itself moved; one on which activity was ordinary says this
            # business does not keep it.
            same = [
                i for i, d in enumerate(measured) if today.kind == "holiday" and kinds[d].name == today.name
            ]  # type: ignore[union-attr]
            keep = same or [i for i, e in enumerate(effects) if abs(e) >= MATERIAL * noise]
            effects, measured = [effects[i] for i in keep], [measured[i] for i in keep]
        elif today.kind == "holiday_period" and effects and abs(median(effects)) < MATERIAL * noise:
            # The days between two holidays (or after them) on which the series kept its ordinary pace (as a
            # rule: one busy Friday among them is the week's noise): this business does not keep the period
            # (Quebec's Fete nationale and Canada Day are a week apart, and the week between is ordinary), so
            # tonight is judged as a night the calendar does not name, with what the series' own history
            # learned of it (a month-end in that week is a month-end).
            today = None
    if today is None and recurring.tonight is not None:
        today = recurring.tonight
        effects, measured = like_effects(today)
    if today is None:
        out = _verdict(plain, notes=notes, level=level, calibration=calibration, calibrated_on=calibrated_on)
        once = recurring.once
        # A small count that emptied moves "like" any earlier fall in its units: only an earlier night that
        # emptied too excuses it (an emptied table was a WARN for a month-end's dip of -56%).
        emptied = absolute and value <= 0 and once is not None and usable.get(once[1], 0.0) > 0
        if out.severity == "ERROR" and once and plain.expected is not None and not emptied:
            if moves_like_once(f(value) - f(max(plain.expected, 0.0)), once):
                name, night, earlier = once
                notes.append(
                    f"{name}: moved like the only earlier one on record ({night.isoformat()}, "
                    f"{_effect_pct(earlier, plain, absolute):+.1f}%); a second occurrence makes it a pattern"
                )
                out = out.model_copy(update={"severity": "WARN", "notes": notes})
        return out

    if effects:
        effect = median(effects)
        adjusted = plain_score(
            day, value, references, offset=effect, scale_factor=math.sqrt(1 + 1 / len(effects))
        )
        pct = _effect_pct(effect, plain, absolute)
        notes.append(
            f"{today.name}: compared with {len(measured)} past like night{'s' if len(measured) != 1 else ''} "
            f"({', '.join(d.isoformat() for d in measured)}; usual effect {pct:+.1f}%)"
        )
        out = _verdict(
            adjusted, notes=notes, level=level, calibration=calibration, calibrated_on=calibrated_on
        )
        quiet = effect <= ALL_BUT_CLOSED and not absolute and plain.expected and adjusted.expected is not None
        if (
            out.severity == "ERROR"
            and quiet
            and value > 0
            and abs(value - adjusted.expected) < config.min_relative_change * plain.expected
        ):
            # A day the business all but closes (a holiday at a twentieth of an ordinary day): its like nights,
            # a few rows each, say its level loosely, and what it misses against them is a sliver of an
            # ordinary day's number, less than the smallest move that counts on one. Not an emptied table,
            # and not a day that merely runs lower (a holiday at half: its faults are material at its level).
            out = out.model_copy(
                update={
                    "severity": "WARN",
                    "notes": [
                        *out.notes,
                        f"{today.name}: {value - adjusted.expected:+,.0f} against its like nights' "
                        f"{adjusted.expected:,.0f} is {100 * abs(value - adjusted.expected) / plain.expected:.1f}% "
                        f"of an ordinary night's {plain.expected:,.0f}, less than the smallest move that counts "
                        f"({100 * config.min_relative_change:.0f}%)",
                    ],
                }
            )
        if today is recurring.tonight and recurring.untold is not None:
            # Like an ordinary night either way: half a month-end's run missing is no ordinary night, though
            # it is a rise against one.
            ordinary_way = plain_score(day, value, references, way=Direction.BOTH)
            out = _untold(out, ordinary_way, recurring.like, recurring.untold[0])
        return out.model_copy(
            update={"plain": plain, "calendar_day": today, "like_days": measured, "calendar_effect_pct": pct}
        )
    out = _verdict(plain, notes=notes, level=level, calibration=calibration, calibrated_on=calibrated_on)
    closed = (
        _closed_day_floor({**shut, **usable}, day, configured, config)
        if configured and today.kind in ("holiday", "holiday_period")
        else None
    )
    if out.severity == "ERROR" and today.explains(plain.relative_change or 0.0):
        notes.append(
            f"{today.name}: no past night like it on record, and a move of "
            f"{100 * (plain.relative_change or 0):+.1f}% is within what such a day explains"
        )
        out = out.model_copy(update={"severity": "WARN"})
    elif out.severity == "ERROR" and closed is not None and closed <= value < (plain.expected or 0):
        # A business closed for a holiday looks like one of its own closed days (a Sunday of an office):
        # no quieter than the quietest of them, which the pipeline's own history shows.
        notes.append(
            f"{today.name}: no past night like it on record, and {value:,.0f} is no lower than the "
            f"series' own closed days ({closed:,.0f} at the least)"
        )
        out = out.model_copy(update={"severity": "WARN"})
    elif out.severity == "ERROR" and today.closure and not on_record and value < (plain.expected or 0):
        # A business may close for a public holiday, its quiet channels too (a weekday wholesaler's weekend
        # webshop trickle on a Sunday holiday): on the first one on record a closure and a loss look alike. A
        # WARN, kept in the history, so the next holiday is judged against this one.
        notes.append(
            f"{today.name}: no past night like it on record, and a fall of "
            f"{100 * (plain.relative_change or 0):+.1f}% may be a closure for it or a loss: the first public "
            "holiday on record cannot tell them apart"
        )
        out = out.model_copy(update={"severity": "WARN", "closure": True})
    elif out.severity == "ERROR":
        notes.append(
            f"{today.name}: no past night like it on record, and the move is beyond what it explains"
        )
    return out.model_copy(update={"plain": plain, "calendar_day": today, "notes": notes})


def _untold(out: Judgement, plain: BaselineResult, learned_from: Sequence[date], other: str) -> Judgement:
    """Tonight's judgement against its learned kind, on the first night of that kind without ``other``, the
    learned kind it was never told apart from (``Recurring.untold``): either may be the one that moves the
    series, so neither reading alone raises an ERROR. Only a night beyond the threshold against both its
    kind's expectation and the ordinary one (``plain``, either way) is one: a run that doubled, half an
    ordinary night missing. A night like the ordinary ones is a WARN that says so; one like its kind's
    occurrences passes as any night like its kind does, with the note."""
    said = (
        f"never told apart from {other}: every night it was learned from "
        f"({', '.join(d.isoformat() for d in learned_from)}) was one too, and tonight is the first of the one "
        f"without the other"
    )
    if plain.status is BaselineStatus.ANOMALY and out.severity is None:
        return out.model_copy(update={"notes": [*out.notes, f"{said}; it moved like its kind's nights"]})
    if plain.status is not BaselineStatus.ANOMALY and out.severity == "ERROR":
        note = f"{said}; it moved like an ordinary night ({100 * (plain.relative_change or 0):+.1f}% against one)"
        return out.model_copy(update={"severity": "WARN", "notes": [*out.notes, note]})
    return out


KIND_TAIL_RATIO = 3.0
"""How much further one kind of night's errors reach at the false-alarm rate than the other's (business days
against weekends and holidays) before each kind is calibrated on its own. Two records of the same noise, of
14 and 35 errors, read thresholds this far apart never in 2,000 Gaussian draws and 1.4-3% of Student-t (3
degrees of freedom) ones; a B2B share's weekends reach 9 times as far as its business days. Below it, one
record of every night is the better estimate. Thresholds, not spreads: a share of six rows sits on a few
values (1/6, 2/6) whose robust spread is small while its tail (a night at none) is not."""


def of_tonights_kind(
    ordinary: Mapping[date, float],
    day: date,
    kinds: BusinessCalendar,
    config: BaselineConfig,
    absolute: bool,
    alpha: float,
    hurts: Direction,
) -> tuple[str, Calibration] | None:
    """The calibration from the ordinary nights of tonight's kind alone (business days, or weekends and
    holidays) and that kind's name, when each kind has a record of its own (``MIN_RESIDUALS`` nights) and
    their thresholds differ by ``KIND_TAIL_RATIO`` times what their usual levels explain at least, or their
    biases stand apart in the record of every night (``lags_apart``); None: one record of every night. A share of a
    total or a ratio of two spreads as its rows do, which its level does not tell (``relative_noise`` reads
    a level): a B2B group's share of a handful of weekend rows swings 0-85% where it moves 2% on a business
    day, and pooled, those weekends set a business day's threshold at 24 spreads instead of 5. Calibrated
    per kind, each kind keeps the false-alarm rate on its own nights (Mondrian conformal prediction: Vovk,
    Gammerman and Shafer, "Algorithmic Learning in a Random World", 2005, ch. 4; category-conditional
    validity). A night the calendar names (a holiday, a month-end) is judged against its like nights on the
    record of every night."""
    tonight = kinds.is_business_day(day)
    own = {d: v for d, v in ordinary.items() if kinds.is_business_day(d) == tonight}
    other = {d: v for d, v in ordinary.items() if d not in own}
    if min(len(own), len(other)) < MIN_RESIDUALS:
        return None
    mine, theirs = (calibrate(p, config, absolute, alpha, hurts) for p in (own, other))
    if mine is None or theirs is None or mine.threshold <= 0:
        # (A kind whose errors are all nil, a constant on its nights, sets no threshold to judge it by.)
        return None
    # A sum of items spreads as one over the square root of its size (``relative_noise``): a total whose
    # weekends hold a hundredth of a weekday's rows is told by its level, and its record of every night
    # scales each night's error by it. Only tails apart by more than their levels explain are of two kinds,
    # or biases apart in that record (``lags_apart``).
    levels = sorted((mine.level, theirs.level))
    if levels[0] <= 0:
        return None
    low, high = sorted((mine.threshold, theirs.threshold))
    if high <= KIND_TAIL_RATIO * math.sqrt(levels[1] / levels[0]) * low and not lags_apart(
        mine, theirs, usual_level(ordinary)
    ):
        return None
    return ("business days" if tonight else "weekends and holidays"), mine


def lags_apart(mine: Calibration, theirs: Calibration, usual: float) -> bool:
    """Whether two kinds' biases stand apart in the record of every night, whose errors are in units of the
    relative spread of their level (``relative_noise``) against ``usual``: beyond what two medians of their
    records stray by chance (their standard errors, sqrt(pi / 2) x spread / sqrt(n), at ``CHANGE_P``). A
    climb's lag is a move of the level, the same fraction of a weekend at 8% of a weekday as of the weekday,
    and so in that record a third of it on weekends (the spread is kept within 3): pooled, the weekends' errors
    stood two thirds of a lag from the weekdays' median and doubled the threshold, and a weekend was expected
    at three times the lag. Each kind on its own record carries the lag whole, in its own level's spread."""
    scaled = [
        (c.bias / (r := relative_noise(c.level, usual)), c.sigma / r, c.residuals) for c in (mine, theirs)
    ]
    (a, sa, na), (b, sb, nb) = scaled
    apart = abs(a - b) / math.sqrt(math.pi / 2 * (sa**2 / na + sb**2 / nb)) if sa or sb else 0.0
    return apart > NormalDist().inv_cdf(1 - CHANGE_P / 2)


def _closed_day_floor(
    usable: Mapping[date, float], day: date, cal: BusinessCalendar, config: BaselineConfig
) -> float | None:
    """The lowest value of the last four weeks' closed days (weekdays that are not business days, holidays
    aside), less the smallest move that counts, when there are at least two of them."""
    closed = [
        v
        for d, v in usable.items()
        if (day - d).days <= 28 and WEEKDAYS[d.weekday()] not in cal.business_days and cal.holiday(d) is None
    ]
    return min(closed) * (1 - config.min_relative_change) if len(closed) >= 2 else None


def _effect_pct(effect: float, plain: BaselineResult, absolute: bool) -> float:
    if not absolute:
        return 100 * math.expm1(effect)
    return 100 * effect / plain.expected if plain.expected else 0.0


def _verdict(
    result: BaselineResult,
    *,
    notes: list[str],
    level: Rebase | None,
    calibration: Calibration | None,
    calibrated_on: str | None = None,
) -> Judgement:
    return Judgement(
        severity="ERROR" if result.status is BaselineStatus.ANOMALY else None,
        result=result,
        level=level,
        calibration=calibration,
        calibrated_on=calibrated_on,
        notes=list(notes),
    )


def figure(value: float, places: int = 2):
    """A computed figure as the UI shows it: rounded to what a person reads (``-0.02``, not
    ``-0.021805139580922107``); measured values are shown as measured."""
    import dagster as dg

    return dg.MetadataValue.float(round(float(value), places))


def judgement_metadata(j: Judgement, prefix: str = "baseline") -> dict[str, object]:
    """What the check shows of its judgement: the score, the calendar day and the level in force."""
    r = j.result
    out: dict[str, object] = {
        f"{prefix}_status": "accepted_level" if j.accepted_tonight else r.status.value,
        f"{prefix}_points": r.points,
        f"{prefix}_mode": "absolute (small count)" if r.absolute else "relative",
    }
    if r.expected is not None:
        out[f"{prefix}_expected"] = figure(r.expected)
        out[f"{prefix}_relative_change_pct"] = figure(100 * (r.relative_change or 0))
        out[f"{prefix}_robust_z"] = figure(r.robust_z or 0)
        if r.z_threshold is not None:
            out[f"{prefix}_z_threshold"] = figure(r.z_threshold)
    if j.calibration is not None:
        c = j.calibration
        out[f"{prefix}_threshold_from"] = (
            f"{c.residuals} past nights' one-step errors"
            + (
                f" (of {j.calibrated_on} only, tonight's kind: the other nights stray otherwise)"
                if j.calibrated_on
                else ""
            )
            + f", at {100 * c.alpha:.2g} false alarms per 100 nights"
            + (
                f" ({len(c.set_aside)} period-end nights that moved the series set aside, the latest "
                f"{c.set_aside[-1].isoformat()})"
                if c.set_aside
                else ""
            )
        )
    if j.calendar_day is not None:
        out[f"{prefix}_calendar_day"] = j.calendar_day.name
        if j.calendar_effect_pct is not None:
            out[f"{prefix}_calendar_effect_pct"] = figure(j.calendar_effect_pct)
    if j.level is not None:
        out[f"{prefix}_level"] = j.level.describe()
    if j.notes:
        out[f"{prefix}_judgement"] = j.describe()
    return out


def deviation(j: Judgement, unit: str) -> str:
    """The deviation as a person reads it: '9,012 rows against an expected 7,900 (+14.1%, robust z +9.3)'."""
    r = j.result
    z = f"robust z {r.robust_z:+.1f}" if r.robust_z is not None else ""
    of = f" {unit}" if unit else ""
    if r.absolute and r.expected is not None:
        moved = f"{r.value - r.expected:+,.0f}{of}"
        return f"{r.value:,.0f}{of} against an expected {r.expected:,.0f} ({moved}, {z})"
    return f"{r.value:,.0f}{of} against an expected {r.expected or 0:,.0f} ({100 * (r.relative_change or 0):+.1f}%, {z})"
