"""Recurring calendar effects a series' own history holds, learned where the metrics file's calendar says
nothing about them: the last business days (or the last days) of a month or a quarter, a day of the month.

A team that wrote no ``month_end`` still invoices on the last business day; its history shows it. A kind of
day is **learned** for a series when its past occurrences (at least two for a period's last days, three for
a day of the month, one of 31 candidates where chance finds two) each moved the series beyond its
ordinary noise by its own effect (below), the same way and by a like amount (the largest effect at most three times the smallest):
those nights then leave the ordinary nights (they do not widen the spread of Tuesdays), and tonight, if it
is such a day, is compared with them (``judge.py``'s like nights). One earlier occurrence only is not a
pattern: on a month's or quarter's last days, a night that moves like it (same way, within half to twice its
effect) is a WARN, not an ERROR, and stays in the history to make the second occurrence. A night flagged
(an incident's, left out of the ordinary nights) that moved like its kind's earlier occurrences, by that
same test against each, is an occurrence too: a month-end taken for a fault before the pattern formed would
otherwise keep it from ever forming. One that moved unlike them (a fault on a month-end) teaches nothing.
A night that moved the series only as the ordinary nights beside it did (``neighbours.own_effect``, the measure
a past like night takes too) is no occurrence: the expectation was behind a series still climbing or filling.
One that moved it beyond them is, and its effect is what it moved beyond them (its departure less theirs): a
month-end on a climbing series otherwise taught the climb's lag as the month-end's own run.

What the file's calendar configures overrides: a ``month_end`` or ``quarter_end`` window turns off the
learning of month- or quarter-ends, ``day_of_month`` entries the learning of days of the month.
"""

from __future__ import annotations

import calendar as stdlib_calendar
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from statistics import median

from dw_dagster.checks.calendar import BusinessCalendar, CalendarDay
from dw_dagster.checks.neighbours import own_effect

MIN_OCCURRENCES = 2
"""Past occurrences, each beyond the noise and alike, that make a period's last days learned."""
MIN_DAY_OF_MONTH_OCCURRENCES = 3
"""The same for a day of the month. A month or a quarter has a few last days to look at, a month 31 days: in
a short history some one of the 31 moved twice the same way by chance (a heavy-tailed series' 25th, once a
Saturday and once a Tuesday), and taken for a pattern it made a real fault on that day a calendar night,
excused by the two chance nights."""
MATERIAL = 2.5
"""An occurrence moved the series when its effect is beyond this many of the ordinary errors' spread."""
ALIKE = math.log(3)
"""Occurrences are alike when the largest effect is at most three times the smallest."""
LIKE_ONE = math.log(2)
"""Tonight moves like the only earlier occurrence within half to twice its effect."""
WINDOW = 3
"""The last days of a month (or quarter) considered: the last, the one before, the one before that."""


def _ordinal(k: int) -> str:
    return ("last", "second-to-last", "third-to-last")[k]


def candidate_keys(day: date, calendar: BusinessCalendar) -> list[tuple[str, str]]:
    """(key, name) of the recurring kinds ``day`` belongs to, the most specific first: a quarter's last
    days, a month's, a day of the month. Kinds the calendar configures are left to it."""
    out: list[tuple[str, str]] = []
    last = date(day.year, day.month, stdlib_calendar.monthrange(day.year, day.month)[1])
    left = (last - day).days
    business_left = calendar.business_days_left(day, last_month_of_period=False)
    windows = []
    if calendar.quarter_end is None and day.month % 3 == 0:
        windows.append(("quarter", "quarter"))
    if calendar.month_end is None:
        windows.append(("month", "month"))
    for key, noun in windows:
        if business_left is not None and business_left < WINDOW:
            out.append(
                (
                    f"{key}_end:business:{business_left}",
                    f"the {_ordinal(business_left)} business day of the {noun}",
                )
            )
        if left < WINDOW:
            out.append((f"{key}_end:day:{left}", f"the {_ordinal(left)} day of the {noun}"))
    if not calendar.day_of_month:
        out.append((f"day_of_month:{day.day}", f"day {day.day} of the month"))
    return out


@dataclass
class Recurring:
    """What a series' history says of recurring days, for tonight's judgement."""

    learned: dict[str, list[date]] = field(default_factory=dict)
    """Learned kinds -> their past occurrences (left out of the ordinary nights)."""
    aside: set[date] = field(default_factory=set)
    """Every occurrence, measured or not, of a period's last days whose every measured occurrence moved the
    series materially and the same way, learned or not: left out of the ordinary nights, so that neither
    they nor the nights compared with them are taken for the series' ordinary errors."""
    effects: dict[str, dict[date, float]] = field(default_factory=dict)
    """Each kind whose nights are left out (learned, or a period's last days set aside) -> each of its
    occurrences' effect against the ordinary expectation (log units, or units of a small count), measured
    for that kind: a night of two kinds (a last business day that is the quarter's too) is measured against
    the nights that are not occurrences of each, and one dict for every kind kept only the last kind's
    measurement of it."""
    tonight: CalendarDay | None = None
    """Tonight's learned kind, compared with its occurrences."""
    like: list[date] = field(default_factory=list)
    once: tuple[str, date, float] | None = None
    """(name, night, effect) of the only earlier occurrence of a kind tonight belongs to."""
    untold: tuple[str, list[date]] | None = None
    """(name, occurrences) of a learned kind tonight is not of, among whose occurrences are all of tonight's
    kind's: the two were never told apart, and tonight is the first night of the one without the other."""

    @property
    def nights(self) -> set[date]:
        """The nights left out of the ordinary ones: the learned kinds' occurrences and those set aside."""
        return {d for days in self.learned.values() for d in days} | self.aside

    def effect(self, night: date) -> float | None:
        """``night``'s own effect: the median of what each kind it is an occurrence of measured (None: none
        measured it)."""
        measured = [e[night] for e in self.effects.values() if night in e]
        return median(measured) if measured else None


Effect = Callable[[date, Mapping[date, float]], float | None]
"""A night's effect against its ordinary expectation from the given nights (None: nothing to compare)."""


def learn(
    ordinary: Mapping[date, float],
    day: date,
    calendar: BusinessCalendar,
    effect: Effect,
    noise: float,
    flagged: Collection[date] = (),
) -> Recurring:
    """The recurring kinds the ``ordinary`` nights (those the calendar does not name) hold, and tonight's.
    ``effect`` measures a night against the nights it is given; ``noise`` is the spread of an ordinary
    night's error (the same units). ``flagged``: the nights left out of the ordinary ones as an incident's
    (``effect`` measures them too); one that moved like its kind's earlier occurrences is one more of them
    (:func:`_like_earlier`). A night that moved the series only as the ordinary nights beside it did
    (``neighbours.own_effect``: the expectation was behind a series still filling or climbing) is no
    occurrence: it neither makes a kind nor keeps one from forming, and is not set aside. An occurrence's
    effect is its own, net of the drift those nights show."""
    found = Recurring()
    if noise <= 0:
        return found
    # Each ordinary night's departure against the ordinary nights before it, measured once: the nights beside
    # one occurrence are beside the next, and beside the occurrences of the other kinds that night belongs to.
    departures: dict[date, float | None] = {}

    def departure(d: date) -> float | None:
        if d not in departures:
            departures[d] = effect(d, ordinary)
        return departures[d]

    occurrences: dict[str, list[date]] = {}
    names: dict[str, str] = {}
    for d in sorted(ordinary):
        for key, name in candidate_keys(d, calendar):
            occurrences.setdefault(key, []).append(d)
            names[key] = name
    flagged_occurrences: dict[str, list[date]] = {}
    for d in sorted(flagged):
        for key, _ in candidate_keys(d, calendar):
            flagged_occurrences.setdefault(key, []).append(d)
    tonight = candidate_keys(day, calendar)
    tonight_keys = {key for key, _ in tonight}
    for key, days in occurrences.items():
        period_end = not key.startswith("day_of_month")
        seen = len(days) + len(flagged_occurrences.get(key, []))
        if seen < MIN_OCCURRENCES and key not in tonight_keys and not period_end:
            continue
        # Each occurrence against the ordinary nights before it that are not occurrences themselves.
        mine = set(days)
        others = {d: v for d, v in ordinary.items() if d not in mine}
        measured = {d: e for d in days if (e := effect(d, others)) is not None}
        # Each one's own effect: none where it moved the series only as the ordinary nights beside it did (the
        # expectation was behind a series still filling or climbing, not moved by its kind), else what it moved
        # the series beyond them (the lag's share, learned too, made every month-end after a climb fall short
        # of it).
        own = {d: own_effect(d, e, others, departure) for d, e in measured.items()}
        # Every one must have moved the series by its own effect: a month-end's dip that a climb's lag hid
        # moved it all the same. One that did not, and one that neither stood out nor moved it at all, say the
        # kind does not move the series whatever its neighbours did.
        if not measured or any(
            abs(measured[d] if o is None else o) < MATERIAL * noise for d, o in own.items()
        ):
            continue
        effects = {d: o for d, o in own.items() if o is not None}
        if not effects:
            continue
        signs = {e > 0 for e in effects.values()}
        if len(signs) != 1:
            continue
        if period_end:
            # A period's last days that moved the series every time it could be measured are no ordinary
            # nights even before they make a pattern: the first of a short history (nothing before it to
            # measure it against) and a lone one alike. Kept among the ordinary nights, they and the nights
            # compared with them would be a short record's largest errors, and its threshold would be read
            # from them.
            found.aside.update(d for d in days if d in effects or d not in measured)
            # A night left out of the ordinary ones keeps its place among their references at its value less
            # its own effect (``judge.py``): kept for every kind that leaves nights out, set aside or learned
            # (the same dict: a flagged night that joins it below is in neither, and never a reference).
            found.effects[key] = effects
        sizes = [abs(e) for e in effects.values()]
        if math.log(max(sizes) / min(sizes)) > ALIKE:
            continue
        # A flagged night of this kind (a month-end taken for a fault before the kind was learned) that moved
        # like the earlier ones is an occurrence too: left out, it kept the pattern from ever forming, and
        # every later one stayed unexplained. One that moved unlike them (a fault) teaches nothing.
        for d in flagged_occurrences.get(key, []):
            if (
                (e := effect(d, others)) is not None
                and (o := own_effect(d, e, others, departure)) is not None
                and _like_earlier(o, [v for k, v in effects.items() if k < d], noise)
            ):
                effects[d] = o
        if len(effects) >= (MIN_OCCURRENCES if period_end else MIN_DAY_OF_MONTH_OCCURRENCES):
            found.learned[key] = sorted(effects)
            found.effects[key] = effects
        elif key in tonight_keys and found.once is None and not key.startswith("day_of_month"):
            # A period's last days recur for every business; a day of the month moving once is as likely
            # chance (31 of them), so only a period end on record once makes tonight's like move a WARN.
            (only,) = effects
            found.once = (names[key], only, effects[only])
    for key, name in tonight:
        if key in found.learned:
            days = found.learned[key]
            usual = median(found.effects[key][d] for d in days)
            found.tonight = CalendarDay(
                kind="recurring",
                name=f"{name} (learned from {len(days)} past occurrences)",
                like_keys=(key,),
                max_effect_pct=100,
                direction="up" if usual > 0 else "down",
            )
            found.like = days
            # Every occurrence of tonight's kind was an occurrence of another learned kind that tonight is not
            # (a weekday business's month-ends so far all last business days and last days alike): the history
            # cannot tell which of the two moved the series, and tonight is the first night that could.
            # Compared with its kind alone, it made an ordinary Sunday 31 August an ERROR for lacking the run
            # of a business that runs on the last business day, and the converse business's ordinary Friday
            # 29 August one too. Told apart once a night of tonight's kind without the other is on record: a
            # kind whose such night did not move the series is no longer learned.
            for other, theirs in found.learned.items():
                if other not in tonight_keys and set(days) <= set(theirs):
                    found.untold = (names[other], theirs)
                    break
            break
    return found


def _like_earlier(effect: float, earlier: Sequence[float], noise: float) -> bool:
    """A flagged night's ``effect`` is like its kind's ``earlier`` occurrences' (one at least): beyond the
    noise as they are, and like each of them as tonight must be like an only earlier one to be a WARN
    (:func:`moves_like_once`). Stricter than the occurrences' own likeness (:data:`ALIKE`): the night was
    taken for a fault, and a fault that multiplied a month-end's run must not teach the calendar."""
    return bool(earlier) and abs(effect) >= MATERIAL * noise and all(_moves_like(effect, e) for e in earlier)


def _moves_like(effect: float, earlier: float) -> bool:
    """The same way, within half to twice the earlier effect."""
    return effect * earlier > 0 and abs(math.log(abs(effect) / abs(earlier))) <= LIKE_ONE


def moves_like_once(tonight_effect: float, once: tuple[str, date, float]) -> bool:
    """Tonight moved like the only earlier occurrence: the same way, within half to twice its effect."""
    return _moves_like(tonight_effect, once[2])
