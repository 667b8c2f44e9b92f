"""The business calendar of the metrics file: which nights are not ordinary nights, and like which others.

A team writes down the days its numbers follow a calendar rather than the weekday: public holidays (by
country and subdivision, through the ``holidays`` package) and its own dates, the last business days of a
month or a quarter, and days of the month with their own effect (a payday, a billing run). Holidays close
together make a **holiday period**: the days between them (a Christmas to New Year fortnight, an Easter
weekend) and the first business days after it, while volumes ramp back, are calendar days of their own. A
calendar day is then compared with the days like it (``CalendarDay.like_keys``) rather than with ordinary
nights, and a deviation the calendar explains is at most a warning (``dw_dagster/checks/judge.py``).

```yaml
calendar:
  business_days: [mon, tue, wed, thu, fri]   # which weekdays count for "last N business days"
  holidays:
    - {country: US, subdivision: NY}
  dates:
    - {date: 2025-06-02, name: Annual audit}
    - {date: 2025-12-24, until: 2026-01-02, name: Office closed}
  holiday_period: {bridge_days: 7, after_business_days: 2}
  month_end: {last_business_days: 2}
  quarter_end: {last_business_days: 3}
  day_of_month:
    - {name: payday, days: [1, 15]}
```
"""

from __future__ import annotations

import bisect
import calendar as stdlib_calendar
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from dw_dagster.config import FileModel

MAX_CLOSURE_DAYS = 60
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


class CalendarEffect(FileModel):
    max_effect_pct: float = Field(
        default=60,
        gt=0,
        description="The largest deviation (percent of the usual level) this kind of day explains while no "
        "past day like it is on record; a larger one is judged as on an ordinary night.",
    )
    direction: Literal["up", "down", "both"] = Field(
        default="both",
        description="The way this kind of day moves the numbers, when it explains a deviation.",
    )


class HolidaySource(CalendarEffect):
    country: str = Field(description="ISO 3166-1 code, e.g. 'US', as the holidays package names it.")
    subdivision: str | None = Field(default=None, description="e.g. 'NY' (a state, province or region).")

    @model_validator(mode="after")
    def _known(self) -> HolidaySource:
        import holidays

        try:
            holidays.country_holidays(self.country, subdiv=self.subdivision, years=2025)
        except NotImplementedError as e:
            raise ValueError(f"expected a country the holidays package knows, got {self.country!r}") from e
        except ValueError as e:
            raise ValueError(f"subdivision {self.subdivision!r} of {self.country}: {e}") from e
        return self


class ExplicitDate(CalendarEffect):
    date: date
    until: date | None = Field(default=None, description="The last day of a closure of several days.")
    name: str = Field(min_length=1)

    @model_validator(mode="after")
    def _order(self) -> ExplicitDate:
        if self.until is not None and self.until < self.date:
            raise ValueError(f"until: expected a day on or after date ({self.date}), got {self.until}")
        if self.until is not None and (self.until - self.date).days > MAX_CLOSURE_DAYS:
            raise ValueError(f"until: a closure of at most {MAX_CLOSURE_DAYS} days, got {self.until}")
        return self

    def covers(self, day: date) -> bool:
        return self.date <= day <= (self.until or self.date)


class HolidayPeriod(CalendarEffect):
    """Holidays (public ones and the team's own dates) at most ``bridge_days`` apart are one period: the days
    between them and the first ``after_business_days`` business days after the last are calendar days."""

    bridge_days: int = Field(
        default=7,
        ge=0,
        le=14,
        description="Holidays at most this many days apart make one period (Christmas to New Year's Day is "
        "7); 0 turns holiday periods off.",
    )
    after_business_days: int = Field(
        default=2, ge=0, le=10, description="Business days after a period while volumes ramp back."
    )
    # A period's days dip (offices close, volumes ramp back); a shop whose holiday weeks peak says `up`.
    direction: Literal["up", "down", "both"] = Field(
        default="down",
        description="The way a holiday period moves the numbers, when it explains a deviation.",
    )


class PeriodEnd(CalendarEffect):
    last_business_days: int = Field(ge=0, le=10, description="0 turns the window off.")
    # Period ends bring closing, invoicing and ordering pushes: a fall on one with no like night on record
    # is not explained by the day (a partial load on a quarter-end is a fault). A team whose month-ends dip
    # says `down` or `both`.
    direction: Literal["up", "down", "both"] = Field(
        default="up",
        description="The way this kind of day moves the numbers, when it explains a deviation.",
    )


class DayOfMonth(CalendarEffect):
    name: str = Field(min_length=1)
    days: list[int] = Field(
        min_length=1, description="Days of the month, 1-31 (31 is the last day when shorter)."
    )

    @field_validator("days")
    @classmethod
    def _days(cls, v: list[int]) -> list[int]:
        bad = [d for d in v if not 1 <= d <= 31]
        if bad:
            raise ValueError(f"expected days of the month 1-31, got {bad}")
        return v


class CalendarDay(BaseModel):
    """What makes a day not ordinary."""

    kind: Literal["holiday", "holiday_period", "quarter_end", "month_end", "day_of_month", "recurring"]
    """``recurring``: learned from the series' own history (``recurring.py``), not configured."""
    name: str
    like_keys: tuple[str, ...]
    """Compared with past days that share the first of these keys that has any (a quarter-end with past
    quarter-ends, else with past month-ends; a public holiday with past public holidays; a team's own date
    with its own past occurrences)."""
    max_effect_pct: float
    direction: Literal["up", "down", "both"]
    closure: bool = False
    """A public holiday whose effect size nobody set: a business may close for it, so a fall beyond
    ``max_effect_pct`` is no more telling than one within it while no like day is on record."""

    def explains(self, relative_change: float) -> bool:
        if abs(relative_change) * 100 > self.max_effect_pct:
            return False
        moved = "up" if relative_change > 0 else "down"
        return self.direction in ("both", moved)


class BusinessCalendar(FileModel):
    business_days: list[Weekday] = Field(
        default_factory=lambda: ["mon", "tue", "wed", "thu", "fri"],
        min_length=1,
        description="Weekdays that are business days (a business open every day lists all seven).",
    )
    holidays: list[HolidaySource] = Field(default_factory=list)
    dates: list[ExplicitDate] = Field(
        default_factory=list, description="The team's own dates (an audit, an office closed for days)."
    )
    holiday_period: HolidayPeriod = Field(default_factory=HolidayPeriod)
    month_end: PeriodEnd | None = None
    quarter_end: PeriodEnd | None = None
    day_of_month: list[DayOfMonth] = Field(default_factory=list)
    # Every check asks about the same few hundred dates, once per series and group.
    _memo: dict[date, CalendarDay | None] = PrivateAttr(default_factory=dict)
    _periods: dict[int, list[tuple[date, date]]] = PrivateAttr(default_factory=dict)
    # Each judged series asks of each past night whether it was a business day, and of the days to its
    # month's end: the same dates for every series, a dozen holiday lookups each.
    _holidays: dict[date, tuple[str, CalendarEffect] | None] = PrivateAttr(default_factory=dict)
    # Each past night of each series asks how many business days are left in its month: a month's business
    # days are listed once, and each question is one lookup in that list instead of a walk to the month's end.
    _months: dict[tuple[int, int], list[date]] = PrivateAttr(default_factory=dict)

    @field_validator("business_days")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dupes = sorted({d for d in v if v.count(d) > 1})
        if dupes:
            raise ValueError(f"duplicate weekdays {dupes}")
        return v

    @model_validator(mode="after")
    def _unique_dates(self) -> BusinessCalendar:
        seen = [
            d.date + timedelta(days=k)
            for d in self.dates
            for k in range(((d.until or d.date) - d.date).days + 1)
        ]
        dupes = sorted({d for d in seen if seen.count(d) > 1})
        if dupes:
            raise ValueError(f"dates: {', '.join(map(str, dupes))} listed twice")
        return self

    @property
    def empty(self) -> bool:
        return not (self.holidays or self.dates or self.month_end or self.quarter_end or self.day_of_month)

    def holiday(self, day: date) -> tuple[str, CalendarEffect] | None:
        if day not in self._holidays:
            self._holidays[day] = self._holiday(day)
        return self._holidays[day]

    def _holiday(self, day: date) -> tuple[str, CalendarEffect] | None:
        for d in self.dates:
            if d.covers(day):
                return d.name, d
        for source in self.holidays:
            name = _holidays(source.country, source.subdivision, day.year).get(day)
            if name:
                return name, source
        return None

    def is_business_day(self, day: date) -> bool:
        return WEEKDAYS[day.weekday()] in self.business_days and self.holiday(day) is None

    def business_days_left(self, day: date, last_month_of_period: bool) -> int | None:
        """How many business days after ``day`` remain in its month (0: the last one); None when ``day`` is
        not a business day or, for quarters, not in a quarter's last month."""
        if last_month_of_period and day.month % 3:
            return None
        days = self._business_days_of(day.year, day.month)
        i = bisect.bisect_left(days, day)
        return len(days) - i - 1 if i < len(days) and days[i] == day else None

    def _business_days_of(self, year: int, month: int) -> list[date]:
        found = self._months.get((year, month))
        if found is None:
            month_days = (
                date(year, month, k) for k in range(1, stdlib_calendar.monthrange(year, month)[1] + 1)
            )
            found = self._months[(year, month)] = [d for d in month_days if self.is_business_day(d)]
        return found

    def day(self, day: date) -> CalendarDay | None:
        """What kind of calendar day ``day`` is, the most specific first (a holiday, a day between holidays,
        a quarter-end, a month-end, a first business day after holidays, a day of the month), or None for an
        ordinary day."""
        if day not in self._memo:
            self._memo[day] = self._day(day)
        return self._memo[day]

    def _day(self, day: date) -> CalendarDay | None:
        found = self.holiday(day)
        if found:
            name, effect = found
            # A team's own date is like its own past occurrences (an audit day with past audit days); a
            # public holiday is like every past public holiday.
            keys = (f"date:{name}",) if isinstance(effect, ExplicitDate) else ("holiday",)
            return _calendar_day("holiday", name, keys, effect)
        # The days between holidays come before a month-end in them (a Christmas week is unlike other
        # month-ends); the ramp back after comes after a month-end (the weaker effect of the two).
        period = self._in_holiday_period(day)
        if period is not None and period.like_keys == ("holiday_period",):
            return period
        for kind, window, quarter in (
            ("quarter_end", self.quarter_end, True),
            ("month_end", self.month_end, False),
        ):
            if window and window.last_business_days:
                left = self.business_days_left(day, quarter)
                if left is not None and left < window.last_business_days:
                    label = "quarter-end" if quarter else "month-end"
                    keys = ("quarter_end", "month_end") if quarter else ("month_end",)
                    return _calendar_day(
                        kind, f"{label} (last {window.last_business_days} business days)", keys, window
                    )
        if period is not None:
            return period
        last = stdlib_calendar.monthrange(day.year, day.month)[1]
        for effect in self.day_of_month:
            if day.day in effect.days or (day.day == last and any(d > last for d in effect.days)):
                return _calendar_day("day_of_month", effect.name, (f"day_of_month:{effect.name}",), effect)
        return None

    def holiday_periods(self, year: int) -> list[tuple[date, date]]:
        """The holiday periods (first and last holiday) that touch ``year``: chains of holidays at most
        ``bridge_days`` apart spanning two days or more."""
        if year not in self._periods:
            self._periods[year] = self._chain(year)
        return self._periods[year]

    def _chain(self, year: int) -> list[tuple[date, date]]:
        bridge = self.holiday_period.bridge_days
        if not bridge:
            return []
        # The years around it: a period may run from one year into the next.
        start, end = date(year - 1, 12, 1), date(year + 1, 1, 31)
        days = [start + timedelta(days=k) for k in range((end - start).days + 1)]
        holidays = [d for d in days if self.holiday(d) is not None]
        periods: list[tuple[date, date]] = []
        for d in holidays:
            if periods and (d - periods[-1][1]).days <= bridge:
                periods[-1] = (periods[-1][0], d)
            else:
                periods.append((d, d))
        return [(a, b) for a, b in periods if b > a and (a.year <= year <= b.year)]

    def _in_holiday_period(self, day: date) -> CalendarDay | None:
        effect = self.holiday_period
        for first, last in self.holiday_periods(day.year) + self.holiday_periods(day.year - 1):
            span = (
                f"{self.holiday(first)[0]} {first.isoformat()} to {self.holiday(last)[0]} {last.isoformat()}"
            )
            if first < day < last:
                return _calendar_day(
                    "holiday_period", f"between holidays ({span})", ("holiday_period",), effect
                )
            if 0 < (day - last).days <= 31 and effect.after_business_days and self.is_business_day(day):
                after = sum(
                    self.is_business_day(last + timedelta(days=k)) for k in range(1, (day - last).days)
                )
                if after < effect.after_business_days:
                    return _calendar_day(
                        "holiday_period",
                        f"the first business days after holidays ({span})",
                        ("after_holidays",),
                        effect,
                    )
        return None


CLOSED_LOOKBACK_WEEKS = 8
ROUTINE_NIGHTS = 3


def routine_weekdays(marks: Mapping[date, bool]) -> frozenset[int]:
    """The weekdays (Monday 0) on which ``marks`` held on at least three of their nights and on at least
    three in four of them: what a series routinely does on a weekday (a closed day's emptiness, an input's
    quiet night), a stall of a night or two never making it so."""
    seen: dict[int, list[bool]] = {}
    for d, held in marks.items():
        seen.setdefault(d.weekday(), []).append(held)
    return frozenset(w for w, hs in seen.items() if (n := sum(hs)) >= ROUTINE_NIGHTS and 4 * n >= 3 * len(hs))


@dataclass(frozen=True)
class ClosedDays:
    """The weekdays a series is routinely empty on, learned from its own history (a feed that loads on
    business days only: invoices, bank files, payroll), and what they mean for tonight."""

    weekdays: frozenset[int]
    """Monday 0."""
    tonight: str | None = None
    """Tonight is one of them and empty: why that is the series' ordinary night."""
    points: int = 0
    """How many past nights of tonight's weekday were empty."""

    def split(self, history: Mapping[date, float]) -> tuple[dict[date, float], dict[date, float]]:
        """The nights of ``history`` on open weekdays, and the others: an open night is never measured from
        a closed one (a Monday's change from an empty Sunday is infinite), nor its level or spread read from
        them."""
        shut = {d: v for d, v in history.items() if d.weekday() in self.weekdays}
        return {d: v for d, v in history.items() if d not in shut}, shut


def closed_days(history: Mapping[date, float], day: date, value: float) -> ClosedDays:
    """The weekdays on which ``history`` (the usable nights before ``day``) was empty on at least three
    of its nights of the last eight weeks and on at least three in four of them, while other weekdays were
    not (a series empty every day has no closed days)."""
    since = day - timedelta(weeks=CLOSED_LOOKBACK_WEEKS)
    window = {d: v for d, v in history.items() if since <= d < day}
    closed = routine_weekdays({d: v == 0 for d, v in window.items()})
    if not closed or len(closed) == len({d.weekday() for d in window}):
        return ClosedDays(frozenset())
    if day.weekday() in closed and value == 0:
        same = [v for d, v in window.items() if d.weekday() == day.weekday()]
        empty = sum(v == 0 for v in same)
        name = stdlib_calendar.day_name[day.weekday()]
        return ClosedDays(
            closed,
            f"{name}: empty on {empty} of the {len(same)} past {name}s on record, a day this series is closed",
            empty,
        )
    return ClosedDays(closed)


def _calendar_day(kind: str, name: str, like_keys: tuple[str, ...], effect: CalendarEffect) -> CalendarDay:
    return CalendarDay(
        kind=kind,  # type: ignore[arg-type]
        name=name,
        like_keys=like_keys,
        max_effect_pct=effect.max_effect_pct,
        direction=effect.direction,
        closure=kind == "holiday"
        and isinstance(effect, HolidaySource)
        and "max_effect_pct" not in effect.model_fields_set
        and effect.direction != "up",
    )


@lru_cache(maxsize=64)
def _holidays(country: str, subdivision: str | None, year: int):
    import holidays

    return holidays.country_holidays(country, subdiv=subdivision, years=year)


def timezone_country(timezone: str) -> str | None:
    """The country of an IANA time zone (``Europe/London`` -> ``GB``) from the tz database's ``zone.tab``,
    or None (``UTC``, a zone the table does not list, no table on this machine)."""
    return _zone_countries().get(timezone)


@lru_cache(maxsize=1)
def _zone_countries() -> dict[str, str]:
    import zoneinfo
    from importlib.resources import files
    from pathlib import Path

    candidates = [Path(p) / "zone.tab" for p in zoneinfo.TZPATH]
    try:
        candidates.append(files("tzdata").joinpath("zoneinfo", "zone.tab"))  # type: ignore[arg-type]
    except ModuleNotFoundError:
        pass
    for tab in candidates:
        try:
            text = tab.read_text(encoding="utf-8")
        except OSError:
            continue
        rows = (line.split("\t") for line in text.splitlines() if line and not line.startswith("#"))
        return {r[2]: r[0] for r in rows if len(r) >= 3}
    return {}
