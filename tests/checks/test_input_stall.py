"""An input whose latest load did not advance on a night its own record says it always does is stale, whatever
its age: a feed whose last load lands a day before the build passes a fixed age on the night its load never
came. Its quiet nights (a weekday feed's weekend, the calendar's holidays) are kept, and a feed that often
skips a night is judged by its age alone. Two shapes: a partner's hourly files delivered around the clock
(the last of a day lands about 25 h before the next night's build, within the 26 h files copy), and B2B
invoices loaded on business days under a rule that allows 40 h."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.freshness import advancing_nights, allowed_age, stalled_nights
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import InputFreshness

CA_ON = BusinessCalendar.model_validate({"holidays": [{"country": "CA", "subdivision": "ON"}]})
ES = BusinessCalendar.model_validate({"holidays": [{"country": "ES"}]})


def _hourly(d: date, rng: random.Random) -> list[datetime]:
    """The partner's 24 files of day ``d``: each hour's file lands 5-20 minutes after the hour ends."""
    start = datetime.combine(d, time(0), ZoneInfo("Europe/Madrid"))
    return [start + timedelta(hours=h + 1, minutes=rng.randint(5, 20)) for h in range(24)]


def _invoices(d: date, rng: random.Random) -> list[datetime]:
    """The billing system's loads of a business day (none at weekends, none on its holidays)."""
    if d.weekday() >= 5 or CA_ON.holiday(d):
        return []
    return [datetime.combine(d, time(9, rng.randint(0, 30)), ZoneInfo("America/Toronto")), datetime.combine(
        d, time(17, rng.randint(0, 30)), ZoneInfo("America/Toronto"))]  # fmt: skip


# name: (loads of a day, the build's time the morning after, the rule's age, the calendar)
SHAPES: dict[str, tuple[Callable[[date, random.Random], list[datetime]], time, float, BusinessCalendar]] = {
    "partner_files": (_hourly, time(1, 30), 26, ES),
    "weekday_invoices": (_invoices, time(4, 30), 40, CA_ON),
}


def _nights(
    shape: str, first: date, last: date, missed: set[date] = frozenset(), weeks: int = 8, seed: int = 3
) -> Iterator[tuple[date, datetime, datetime, dict[date, Recorded]]]:
    """Each business date's build, the input's latest load then, and the input's record before it, as the
    check records it; on the nights in ``missed`` nothing lands between the build before and theirs."""
    loads_of, at, _, _ = SHAPES[shape]
    rng = random.Random(seed)
    zone = ZoneInfo("Europe/Madrid" if shape == "partner_files" else "America/Toronto")

    def build(d: date) -> datetime:
        return datetime.combine(d + timedelta(days=1), at, zone)

    start = first - timedelta(weeks=weeks)
    days = [start - timedelta(days=1) + timedelta(days=k) for k in range((last - start).days + 3)]
    loads = sorted(
        t for d in days for t in loads_of(d, rng) if not any(build(m - timedelta(days=1)) < t <= build(m) for m in missed)
    )  # fmt: skip
    past: dict[date, Recorded] = {}
    day = start
    while day <= last:
        latest = max(t for t in loads if t <= build(day))
        if day >= first:
            yield day, build(day), latest, dict(past)
        past[day] = Recorded(business_date=day, value=latest.timestamp())
        day += timedelta(days=1)


def _rule(shape: str) -> InputFreshness:
    return InputFreshness(
        asset="core/fct", column="LOADED_AT", input="raw/feed", input_column="LOADED_AT",
        max_input_age_hours=SHAPES[shape][2],
    )  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_a_night_whose_load_never_came_is_stale_within_its_age(shape: str) -> None:
    calendar = SHAPES[shape][3]
    for missed in (date(2026, 10, 7), date(2026, 10, 15)):  # a Wednesday, a Thursday
        ((day, built, latest, past),) = _nights(shape, missed, missed, {missed})
        # Its age passes: the check of old passed it.
        assert built - latest <= timedelta(hours=allowed_age(_rule(shape), past, day, calendar).hours)
        assert stalled_nights(latest.timestamp(), past, day, calendar) >= 14, (shape, day)


@pytest.mark.parametrize("shape", SHAPES)
def test_its_ordinary_nights_quiet_days_and_holidays_are_not_stalls(shape: str) -> None:
    """Three weeks of ordinary nights: a weekday feed's weekends and Thanksgiving (Monday 12 October) stand
    still as its record says they do; every other night advanced."""
    calendar = SHAPES[shape][3]
    for day, _, latest, past in _nights(shape, date(2026, 9, 28), date(2026, 10, 18)):
        assert not stalled_nights(latest.timestamp(), past, day, calendar), (shape, day)
    ((day, _, _, past),) = _nights(shape, date(2026, 10, 14), date(2026, 10, 14))
    assert advancing_nights(past, day, calendar) >= 14  # the record says it loads on nights like this one


@pytest.mark.parametrize("shape", SHAPES)
def test_a_feed_that_often_skips_a_night_or_is_new_is_judged_by_its_age_alone(shape: str) -> None:
    calendar = SHAPES[shape][3]
    rng = random.Random(11)
    first, last = date(2026, 9, 1), date(2026, 10, 30)
    skips = {first + timedelta(days=k) for k in range((last - first).days) if rng.random() < 0.12}
    skips = {d for d in skips if d.weekday() < 5} | {date(2026, 10, 21), date(2026, 10, 27)}
    nights = list(_nights(shape, date(2026, 10, 19), date(2026, 10, 30), skips))
    assert any(latest.timestamp() <= past[day - timedelta(days=1)].value for day, _, latest, past in nights)
    for day, _, latest, past in nights:
        assert not stalled_nights(latest.timestamp(), past, day, calendar), (shape, day)
    # Ten nights on record are too few to say the feed loads on every one.
    missed = date(2026, 10, 15)
    ((day, _, latest, past),) = _nights(shape, missed, missed, {missed})
    recent = {d: r for d, r in past.items() if d >= missed - timedelta(days=10)}
    assert stalled_nights(latest.timestamp(), past, day, calendar)
    assert not stalled_nights(latest.timestamp(), recent, day, calendar)
