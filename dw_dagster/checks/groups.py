"""Group-level checks of a recorded total with group keys, every night.

Each group has its own series (its value night by night, 0 on a night it was absent) and is judged like
the total (``judge.py``: calendar, small counts, accepted levels). Then:

- **a shift between groups**: the total holds while existing groups lost and others gained beyond their
  own baselines and materially (by at least the total's ``min_relative_change`` of the group's own level,
  and at least 1% of the total): a finding naming the groups that lost and gained, with their shares of
  the total before and after;
- **a group gone**: one group went to nothing and nothing gained: a finding of its own, when its own record
  makes nothing tonight improbable at the table's false-alarm rate (``_nothing_is_usual``): a group of a
  sparse table often absent on the nights like tonight (weekends and holidays, or business days), or with so
  few rows expected that none is a chance (Poisson, where the total's SQL returns ``ROWS``), went to nothing
  as it does: noted, not raised (a group that only fell, with nothing gaining elsewhere, is noted on the
  check: alone it is too often the group's noise);
- a loss that went to groups new tonight (a new key, a new account) is the business moving, not a
  fault: noted, not raised (whether the new key reached the target is the reconciliation's job). A group
  is judged from its first night, and counts as new until its own baseline has enough nights (a key that
  opened on an incident's night is still new on the nights after). A group whose *key* is NULL is not a
  new key: it holds rows a left join to a lookup no longer matches, so what it takes is a gain and a loss
  to it is a shift;
- **a group whose value is NULL** (an upstream lookup that found no match) is never counted as zero: a
  finding in its own right, naming its keys and, when the total's SQL returns ``ROWS``, how many rows; unless
  the total's own history holds it (``usual_null_groups``): then its rows are judged against their record.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from datetime import date
from typing import Literal

from pydantic import BaseModel

from dw_dagster.checks.baseline import BaselineConfig, BaselineStatus, Direction, false_alarm_alpha
from dw_dagster.checks.calendar import BusinessCalendar, HolidaySource
from dw_dagster.checks.history import Rebase, Recorded, total_series
from dw_dagster.checks.judge import Judgement, judge
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.records.keys import split_label, split_labels

MAX_GROUPS_JUDGED = 500
"""Beyond this many groups a night (a total grouped by item), groups are not judged one by one."""
MIN_SHARE_OF_TOTAL = 0.01
"""A group's move matters from 1% of the total: a one-unit group doubling is not a finding."""
CANDIDATE_RATE = 0.02
"""The rate at which a group's own move counts as a candidate (its own errors' 95th percentile): the rules on
top, not one group's noise, keep the findings at the table's rate."""
SHARE_UNITS = 10_000
"""A group's share of its total is judged in basis points, in log space like any series (never as a small
count): 12% to 3% is the fall it is."""


class GroupMove(BaseModel):
    group: str
    value: float
    expected: float
    change: float
    share_before: float | None
    share_after: float | None
    status: Literal["lost", "gained", "new", "went"]

    def describe(self, unit: str = "") -> str:
        shares = (
            f", share {100 * self.share_before:.1f}% -> {100 * self.share_after:.1f}%"
            if self.share_before is not None and self.share_after is not None
            else ""
        )
        return f"{self.group} ({self.change:+,.0f}{unit}{shares})"


class GroupVerdict(BaseModel):
    moves: list[GroupMove]
    problem: str | None = None
    """A finding (ERROR), or None."""
    note: str | None = None
    """What was seen and left alone."""
    doubt: str | None = None
    """What the record cannot tell a fault from a benign night by (a WARN where no problem is found)."""


def group_series(own: Mapping[date, Recorded], group: str) -> dict[date, float | None]:
    """The group's value night by night: 0 on a night the total had groups but not this one, nothing on
    a night the group's value was NULL."""
    return {
        d: r.groups.get(group) or 0.0
        for d, r in own.items()
        if r.value is not None and r.groups and not (group in r.groups and r.groups[group] is None)
    }


def judge_groups(
    total: RecordedTotal,
    day: date,
    value: float,
    groups: Mapping[str, float | None],
    own: Mapping[date, Recorded],
    total_verdict: Judgement,
    *,
    calendar: BusinessCalendar,
    excluded_days: set[date],
    rebases: Mapping[str, Sequence[Rebase]],
    share: int = 1,
    moved: bool | None = None,
    rows: Mapping[date, Recorded] | None = None,
    rows_tonight: float | None = None,
) -> GroupVerdict:
    """``moved``: whether the total moved, so that its judgement speaks and the groups only name where (by
    default: beyond its own band, ``_total_moved``). ``rows``: the groups' row counts night by night, where
    the total's SQL returns ``ROWS`` (a total of rows: its own history), for a group's chance of no row;
    ``rows_tonight``: all groups' rows tonight, for the day's level (``_nothing_is_usual``)."""
    if not total.group_keys:
        return GroupVerdict(moves=[])
    last = own[max(own)] if own else None
    names = sorted({g for g, v in groups.items() if v is not None} | set(last.groups if last else ()))
    if len(names) > MAX_GROUPS_JUDGED:
        return GroupVerdict(moves=[], note=f"{len(names)} groups: not judged one by one")
    first_seen: dict[str, date] = {}
    for d in sorted(own):
        for g, v in own[d].groups.items():
            if v:
                first_seen.setdefault(g, d)
    expected_total = total_verdict.result.expected or value
    floor = abs(expected_total) * MIN_SHARE_OF_TOTAL
    if moved is None:
        moved = _total_moved(total_verdict, total.baseline)
    # Each group's move is a candidate at a looser rate than a finding: a shift needs two groups moving
    # opposite ways at once, materially, while the total holds; a fall alone is judged again on its share at
    # the table's own rate (below). Not a loss beyond its own record at the table's rate as well: a
    # heavy-tailed group's record is too short to tell a remap of a third of its money from its noise.
    candidate = total.baseline.model_copy(
        update={"false_alarm_rate": max(total.baseline.false_alarm_rate, CANDIDATE_RATE)}
    )
    calendar_night = total_verdict.calendar_day is not None
    ordinary_only = (
        excluded_days | {d for d in own if calendar.day(d) is not None} if calendar_night else set()
    )
    moves = []
    usual: list[str] = []
    doubtful: dict[str, str] = {}
    alpha = false_alarm_alpha(total.baseline, share)
    for g in names:
        tonight = groups.get(g, 0.0)
        if tonight is None:
            continue
        # A group is judged from its first night: before it, it did not exist (not a run of zeros).
        since = first_seen.get(g)
        verdict = (
            judge(
                {d: v for d, v in group_series(own, g).items() if d >= since},
                day,
                tonight,
                candidate,
                calendar=calendar,
                excluded_days=excluded_days,
                rebases=rebases.get(total_series(total.name, g), ()),
            )
            if since is not None
            else None
        )
        if verdict is None or verdict.insufficient:
            # New, or too new for its own baseline (its first nights, some of them an incident's): a key
            # still arriving, like one new tonight. Rows without a group gained it, when material as any
            # gain is (1% of the total): a few of them are not a shift.
            gained = abs(tonight) >= max(floor, 1e-9) and _null_key(g)
            if tonight != 0:
                moves.append(
                    GroupMove(
                        group=g,
                        value=tonight,
                        expected=0.0,
                        change=tonight,
                        share_before=None,
                        share_after=_share(tonight, value),
                        status="gained" if gained else "new",
                    )
                )
            continue
        r = verdict.result
        # A group gone on the first public holiday on record is a WARN on its own series (a closure or a loss):
        # whether its absence is news is asked below, as for any group gone.
        closed = verdict.closure and tonight == 0
        if (verdict.severity != "ERROR" and not closed) or r.expected is None:
            continue
        if abs(tonight - r.expected) < max(floor, abs(r.expected) * total.baseline.min_relative_change):
            continue
        # A group's sign is its expectation's: a usually negative group (refunds, a net export) loses when it
        # comes nearer nothing and is gone at nothing or beyond it, as a positive one. A group whose usual size
        # is immaterial (a catch-all of a few write-offs) has no side of its own: a new key mapped into it is a
        # gain, not a change of sign.
        sign = -1.0 if r.expected <= -floor else 1.0
        if (
            calendar_night
            and sign * tonight > 0
            and not _share_moved(
                total,
                day,
                _share(tonight, value),
                own,
                g,
                None,
                ordinary_only,
                1,
                candidate.false_alarm_rate,
                kind_calendar=calendar,
            )
        ):
            # On a calendar night a group's own record of such nights is thin (one like night, or none where
            # the group happened to hold on it): a heavy-tailed group compared with its one past holiday is
            # noise against noise. Its move counts only when its share of the total moved too, against its
            # shares of ordinary nights: a share cancels the day's effect common to every group (a holiday's
            # dip). Not a group gone: its absence is judged on its own nights of tonight's kind, as on any night
            # (``_nothing_is_usual``), where a heavy-tailed value's share (a few large amounts) spreads too
            # widely to tell a month-end without one site's rows from noise.
            continue
        status = (
            "gained" if sign * tonight > sign * r.expected else ("went" if sign * tonight <= 0 else "lost")
        )
        # While the total holds, a group gone speaks for itself: only when its own record says it is news.
        if (
            status == "went"
            and not moved
            and (
                why := _nothing_is_usual(
                    total,
                    g,
                    day,
                    own,
                    rows,
                    since,
                    calendar,
                    excluded_days,
                    alpha,
                    rows_tonight=rows_tonight,
                    sign=sign,
                    tonight=tonight,
                )
            )
        ):
            usual.append(why)
            continue
        if (
            status == "went"
            and not moved
            and (first := _first_holiday(g, day, own, since, calendar, excluded_days))
        ):
            # A doubt only when nothing else explains it: gone into another group, it is a shift (below).
            doubtful[g] = first
        moves.append(
            GroupMove(
                group=g,
                value=tonight,
                expected=r.expected,
                change=tonight - r.expected,
                share_before=_share(r.expected, expected_total),
                share_after=_share(tonight, value),
                status=status,
            )
        )
    moves.sort(key=lambda m: -abs(m.change))

    def noted(verdict: GroupVerdict, *, doubt: bool = True) -> GroupVerdict:
        if doubt and doubtful and verdict.problem is None:
            verdict = verdict.model_copy(update={"doubt": "; ".join(doubtful.values())})
        if not usual:
            return verdict
        seen = f"went to nothing as on its own nights like tonight: {'; '.join(usual)}"
        return verdict.model_copy(update={"note": f"{verdict.note}; {seen}" if verdict.note else seen})

    lost = [m for m in moves if m.status in ("lost", "went")]
    gained = [m for m in moves if m.status == "gained"]
    new = [m for m in moves if m.status == "new"]
    if moved or not (lost or gained):
        # The total moved (an ERROR, a WARN the calendar explains, or a move in the direction that does not
        # hurt): its judgement speaks; the groups only name where.
        return noted(GroupVerdict(moves=moves))
    said = lambda ms: ", ".join(m.describe() for m in ms[:5])  # noqa: E731
    # Within its own range, not "held": a wide-spread total can fall by a sixth on an ordinary night.
    held = f"{total.name} stayed within its usual range ({100 * (total_verdict.result.relative_change or 0):+.1f}%)"
    # A shift moves value from one group to another: their values moved in opposite directions, whatever
    # their sides of zero (a negative group that grew fell in value, with the group that lost, not against it;
    # one that shrank rose, as a group gaining does).
    falls = [m for m in moves if m.status != "new" and m.change < 0]
    rises = [m for m in moves if m.status != "new" and m.change > 0]
    if falls and rises:
        return noted(
            GroupVerdict(
                moves=moves,
                problem=f"a shift between groups while {held}: lost {said(falls)}; gained {said(rises)}",
            )
        )
    # What the groups lost went to new ones: the new groups' values moved the other way, as much.
    loss, newly = sum(m.change for m in lost), sum(m.change for m in new)
    if lost and new and loss * newly < 0 and abs(newly) >= abs(loss) - floor:
        return noted(
            GroupVerdict(moves=moves, note=f"moved to groups new tonight: {said(new)}, from {said(lost)}"),
            doubt=False,
        )
    # A group gone on a night its record cannot tell a closure from a loss by (``_first_holiday``): a doubt.
    lost = [m for m in lost if m.group not in doubtful]
    if not (lost or gained):
        return noted(GroupVerdict(moves=moves))
    went = [m for m in lost if m.status == "went"]
    if went:
        nothing = [m for m in went if m.value == 0]
        crossed = [m for m in went if m.value != 0]
        gone = [f"{said(nothing)} went to nothing"] if nothing else []
        gone += [f"{said(crossed)} changed sign"] if crossed else []
        return noted(GroupVerdict(moves=moves, problem=f"{' and '.join(gone)} while {held}"))
    # A group that fell alone while the others held: its values changed (a unit, a scale), or its rows went
    # missing. One group's noise often looks like it, so its share of the total must have moved beyond its
    # own errors at the table's rate split over every group (a share cancels the day's common level: on a
    # calendar night, against the ordinary nights of tonight's kind, as above). A group that rose alone is
    # noted only: a new key mapped into it (a new store of a channel) is benign.
    alone = [
        m
        for m in lost
        if _share_moved(
            total,
            day,
            m.value / value if value else None,
            own,
            m.group,
            None if calendar_night else calendar,
            ordinary_only if calendar_night else excluded_days,
            share * len(names),
            kind_calendar=calendar,
        )
    ]
    if alone:
        return noted(
            GroupVerdict(
                moves=moves,
                problem=f"{said(alone)} fell alone while {held} and the other groups held: its share of the "
                "total moved beyond its own record",
            )
        )
    return noted(
        GroupVerdict(moves=moves, note=f"{'fell' if lost else 'rose'} while {held}: {said(lost or gained)}")
    )


def _nothing_is_usual(
    total: RecordedTotal,
    group: str,
    day: date,
    own: Mapping[date, Recorded],
    rows: Mapping[date, Recorded] | None,
    since: date,
    calendar: BusinessCalendar,
    excluded_days: set[date],
    alpha: float,
    *,
    rows_tonight: float | None = None,
    sign: float = 1.0,
    tonight: float = 0.0,
) -> str | None:
    """Why the group's nothing tonight is within its own record at the false-alarm probability ``alpha``
    (None: improbable, a finding). On its nights like tonight (business days, or the weekends and holidays
    the business is closed: a sparse table's group is absent on its quiet days, present on the others) it had
    nothing often enough; or, where its rows are counted, so few are expected tonight (its rows' own
    baseline, the calendar's say included) that none is a Poisson chance at least that large. A group present
    on every like night, with rows enough that none is improbable, is gone.

    With ``rows_tonight`` (every group's rows tonight), the group's expectation is scaled by the day's level:
    the other groups' rows tonight, a Poisson spread above them, against their expectation without this
    group's, at most 1. On a day the whole table is quiet and the calendar's record does not know yet (the
    first holiday period on record, a business day at two fifths of an ordinary one), a group of four rows an
    ordinary night has none by chance (2.7%; one of five such groups on one such day in eight). The group's
    own share is left out of the level (a group gone would lower it by that share), and the spread keeps the
    others' own noise on an ordinary night from excusing a small group's partial load (one of four groups of 7
    rows gone on an ordinary night: excused on 12% of 40 simulated nights, 7% with no level at all, 27% with
    the group's share in the level and no spread).
    A heavy-tailed value tells no level: one large amount lifts it.

    ``sign``: the group's usual sign (-1 for refunds, a net export), so that nothing is at or beyond zero from
    its own side. A group with a value ``tonight`` past zero still has rows: no chance of none excuses it."""
    open_day = calendar.is_business_day(day)
    like = [
        v
        for d, v in group_series(own, group).items()
        if since <= d < day and d not in excluded_days and calendar.is_business_day(d) == open_day
    ]
    absent = sum(v is not None and sign * v <= 0 for v in like)
    if like and absent >= alpha * len(like):
        kind = "business days" if open_day else "weekends and holidays"
        return f"{group} had nothing on {absent} of its {len(like)} past {kind}"
    first = min((d for d, r in (rows or {}).items() if r.groups.get(group)), default=None)
    if rows is None or first is None or tonight != 0:
        return None
    counts = {d: v for d, v in group_series(rows, group).items() if d >= first}
    expected = judge(
        counts, day, 0.0, total.baseline, calendar=calendar, excluded_days=excluded_days
    ).result.expected
    if expected is not None and rows_tonight is not None:
        everyone = {d: r.value for d, r in rows.items() if r.value is not None}
        usual = judge(
            everyone, day, rows_tonight, total.baseline, calendar=calendar, excluded_days=excluded_days
        ).result.expected
        # The others' level: tonight's rows are theirs (this group has none), against their expectation
        # without this group's, a Poisson spread above them (see above).
        if usual is not None and usual > expected:
            others = max(rows_tonight, 0.0)
            expected *= min(1.0, (others + math.sqrt(others + 1)) / (usual - expected))
    chance = math.exp(-expected) if expected is not None else 0.0
    if chance < alpha:
        return None
    return f"{group} expected {expected:.1f} rows: none by chance on {100 * chance:.1f}% of such nights"


def _first_holiday(
    group: str,
    day: date,
    own: Mapping[date, Recorded],
    since: date,
    calendar: BusinessCalendar,
    excluded_days: set[date],
) -> str | None:
    """Why a group gone on a public holiday may be closed for it: tonight is the first weekday holiday on its
    record (None: not a holiday, or the group traded on an earlier one). A business open every day may still
    close one branch or segment for a holiday (offices, an industrial line), and a group that traded on every
    weekend has no night of its own to say which; the total held, so only the group's record could. A WARN,
    not a finding: shown on the check and kept in the history, so the next holiday is judged against this one.
    A weekend holiday does not tell, as the group's weekend trade is the same whatever the holiday."""
    found = calendar.holiday(day)
    # A public holiday on a weekday: a team's own dates (a stock-take) are on record as such, and a weekend
    # holiday does not tell either.
    if found is None or not isinstance(found[1], HolidaySource) or day.weekday() >= 5:
        return None
    earlier = [
        d
        for d in own
        if since <= d < day and d not in excluded_days and d.weekday() < 5 and calendar.holiday(d) is not None
    ]
    if earlier:
        return None
    return (
        f"{group} went to nothing on {found[0]}, the first weekday holiday on its record: closed for it, or "
        "lost; its record cannot tell"
    )


def _total_moved(verdict: Judgement, config: BaselineConfig) -> bool:
    """Whether the total moved beyond its own band, in either direction: its calibrated threshold (or the
    fixed robust z) and its minimum change, as an anomaly needs, whichever side hurts. A noisy total moves by
    more than its ``min_relative_change`` on ordinary nights: a remap under it is still a shift. Without a
    score (too short a record), a change of at least its minimum change."""
    r = verdict.result
    if r.status is BaselineStatus.ANOMALY:
        return True
    change = r.relative_change
    if r.robust_z is None or r.z_threshold is None:
        return change is not None and abs(change) >= config.min_relative_change
    return abs(r.robust_z) >= r.z_threshold and abs(change or 0.0) >= config.min_relative_change


def _share_moved(
    total: RecordedTotal,
    day: date,
    tonight: float | None,
    own: Mapping[date, Recorded],
    group: str,
    calendar: BusinessCalendar | None,
    excluded_days: set[date],
    share: int,
    rate: float | None = None,
    *,
    kind_calendar: BusinessCalendar | None = None,
) -> bool:
    """Whether the group's share of the total tonight is an ERROR against its own shares of earlier nights
    (at the table's false-alarm rate split ``share`` ways, or at ``rate``; like nights of the ``calendar``'s,
    or with no calendar every night alike). A share spreads as the rows behind it, which its level does not
    tell: it is calibrated on the nights of tonight's kind (``judge.of_tonights_kind``; by the business days
    of ``kind_calendar`` where no ``calendar`` is given)."""
    if tonight is None:
        return False
    series = {
        d: SHARE_UNITS * (r.groups.get(group) or 0.0) / r.value
        for d, r in own.items()
        if r.value and r.groups and not (group in r.groups and r.groups[group] is None)
    }
    config = total.baseline.model_copy(
        update={"small_below": 0, **({"false_alarm_rate": rate} if rate is not None else {})}
    )
    # A usually negative group's share (refunds in net takings) is judged on its size, in log space as any.
    sign = -1.0 if series and statistics.median(series.values()) < 0 else 1.0
    series = {d: sign * v for d, v in series.items()}
    tonight *= sign
    verdict = judge(
        series,
        day,
        SHARE_UNITS * tonight,
        config,
        calendar=calendar,
        excluded_days=excluded_days,
        share=share,
        kind_calendar=kind_calendar,
    )
    return (
        verdict.severity == "ERROR"
        and abs(SHARE_UNITS * tonight - (verdict.result.expected or 0)) >= SHARE_UNITS * MIN_SHARE_OF_TOTAL
    )


USUAL_NULL_DAYS = 28
"""A NULL-valued group is usual when the total's own history of the last four weeks holds it."""


def usual_null_groups(
    day: date,
    groups: Mapping[str, float | None],
    rows: Mapping[str, int],
    own: Mapping[date, Recorded],
    own_rows: Mapping[date, Recorded],
    config: BaselineConfig,
    *,
    calendar: BusinessCalendar,
    excluded_days: Collection[date],
    share: int,
) -> dict[str, str]:
    """Tonight's NULL-valued groups that the total's own history holds as usual -> what was seen of each (a
    note); the others are findings (``null_groups_problem``). A group is usual when it was NULL-valued on at
    least ``min_points`` of the total's ordinary nights of the last four weeks. Where the total's SQL returns
    ``ROWS`` its rows are then judged like any group's value, against their own record from its first NULL
    night (0 on a night it was absent): more rows with no value than the record holds (a NULL group tiny in
    the history and large tonight) is a finding. Without rows, it must have been NULL-valued on at least half
    of those nights."""
    recent = [
        d
        for d, r in own.items()
        if d < day and (day - d).days <= USUAL_NULL_DAYS and d not in excluded_days and r.groups
    ]
    out = {}
    for g in sorted(g for g, v in groups.items() if v is None):
        nulls = [d for d in recent if g in own[d].groups and own[d].groups[g] is None]
        if len(nulls) < config.min_points:
            continue  # absent from the history, or too seldom there: new tonight
        seen = f"{g} with no value on {len(nulls)} of the last {len(recent)} ordinary nights"
        first = min((d for d, r in own_rows.items() if r.groups.get(g)), default=None) if g in rows else None
        if first is not None:
            series = {d: r.groups.get(g) or 0.0 for d, r in own_rows.items() if d >= first and r.groups}
            verdict = judge(
                series,
                day,
                float(rows[g]),
                config,
                Direction.UP,
                calendar=calendar,
                excluded_days=excluded_days,
                share=share,
            )
            if verdict.severity == "ERROR":
                continue  # more rows with no value than its record holds
            if not verdict.insufficient:
                out[g] = f"{seen}; {rows[g]:,} rows tonight, within its record"
                continue
        if 2 * len(nulls) >= len(recent):
            out[g] = seen
    return out


def null_groups_problem(
    total: str, groups: Mapping[str, float | None], rows: Mapping[str, int], value_columns: Sequence[str]
) -> str | None:
    """Groups whose value is NULL: "N rows with no <column>", never counted as zero."""
    nulls = sorted(g for g, v in groups.items() if v is None)
    if not nulls:
        return None
    what = " or ".join(value_columns) if value_columns else "VALUE"
    shown = ", ".join(
        f"{rows[g]:,} row{'s' if rows[g] != 1 else ''} with no {what} ({g})"
        if g in rows
        else f"{g} with no {what}"
        for g in nulls[:10]
    )
    more = f" and {len(nulls) - 10} more groups" if len(nulls) > 10 else ""
    return f"{total}: {shown}{more}: a NULL value is not counted as zero (a lookup that found no match?)"


def _null_key(group: str) -> bool:
    """The group's label names a NULL key value (in any of its columns)."""
    return any(split_label(part)[1] is None for part in split_labels(group))


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole else None
