"""Calendar effects learned from a series' own history where the metrics file says nothing of them, holidays
from the context file's country, like nights only when they behaved alike, and a fault on a calendar night
still an ERROR. Two shapes: a German distributor's weekday shipments and a shop open every day."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest
import yaml

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile, load_metrics_file
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import load_context_file

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
CONFIG = BaselineConfig(weeks=6)


def _last_business_day(d: date) -> bool:
    nxt = d + timedelta(days=1)
    while nxt.weekday() >= 5:
        nxt += timedelta(days=1)
    return nxt.month != d.month


def _invoices(end: date, spike: float = 3.0, seed: int = 3) -> dict[date, float]:
    """Weekday invoicing with the month's run on its last business day (x3); weekends a trickle."""
    rng, out, d = random.Random(seed), {}, date(2025, 6, 2)
    while d <= end:
        v = 5000.0 if d.weekday() < 5 else 400.0
        if d.weekday() < 5 and _last_business_day(d):
            v *= spike
        out[d] = v * (1 + rng.gauss(0, 0.04))
        d += timedelta(days=1)
    return out


def _shop(end: date, seed: int = 8) -> dict[date, float]:
    """A shop open every day whose last two days of a month sell 40% more."""
    rng, out, d = random.Random(seed), {}, date(2025, 5, 1)
    while d <= end:
        v = 8000.0 * (0.8 if d.weekday() >= 5 else 1.0)
        if (d + timedelta(days=2)).month != d.month:
            v *= 1.4
        out[d] = v * (1 + rng.gauss(0, 0.03))
        d += timedelta(days=1)
    return out


NO_CALENDAR = MetricsFile.model_validate({"calendar": {"holidays": []}}).calendar
SHOP_DAYS = MetricsFile.model_validate({"calendar": {"holidays": [], "business_days": EVERY_DAY}}).calendar


@pytest.mark.parametrize(
    ("make", "day", "calendar"),
    [
        (_invoices, date(2025, 9, 30), NO_CALENDAR),  # Tuesday 30 September
        (_shop, date(2025, 8, 31), SHOP_DAYS),  # Sunday 31 August
    ],
    ids=["distributor-weekdays", "shop-every-day"],
)
def test_a_month_end_the_history_holds_twice_is_learned(make, day, calendar):
    series = make(day)
    history = {d: v for d, v in series.items() if d < day}
    value = series[day]
    j = judge(history, day, value, CONFIG, Direction.BOTH, calendar=calendar)
    assert j.severity is None, j.describe()
    assert j.calendar_day.kind == "recurring" and "learned from" in j.calendar_day.name
    assert len(j.like_days) >= 2
    # A fault on it is judged against what such a night does: half of it missing is an ERROR.
    fault = judge(history, day, value * 0.5, CONFIG, Direction.DOWN, calendar=calendar)
    assert fault.severity == "ERROR", fault.describe()


def test_a_month_end_on_record_once_is_a_warn_and_a_different_move_an_error():
    series = _invoices(date(2025, 7, 30))
    day = date(2025, 7, 31)  # the second month-end: June 30 is the only one before it
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, 15_000, CONFIG, calendar=NO_CALENDAR)
    assert j.severity == "WARN" and "moved like the only earlier one on record (2025-06-30" in j.describe()
    assert judge(history, day, 1_500, CONFIG, Direction.DOWN, calendar=NO_CALENDAR).severity == "ERROR"


def _holidays_us(end: date, columbus: float, thanksgiving: float) -> dict[date, float]:
    rng, out, d = random.Random(5), {}, date(2025, 8, 4)
    while d <= end:
        v = 3000.0 * (0.7 if d.weekday() >= 5 else 1.0)
        if d == date(2025, 10, 13):
            v *= columbus
        if d == date(2024, 11, 28) or d == date(2025, 11, 27):
            v *= thanksgiving
        out[d] = v * (1 + rng.gauss(0, 0.03))
        d += timedelta(days=1)
    return out


US = BusinessCalendar.model_validate({"business_days": EVERY_DAY, "holidays": [{"country": "US"}]})


def test_a_holiday_is_compared_only_with_holidays_that_behaved_alike():
    # Columbus Day was an ordinary Monday for this business (Labor Day too); Thanksgiving halves it.
    series = _holidays_us(date(2025, 11, 26), columbus=1.0, thanksgiving=0.5)
    day = date(2025, 11, 27)
    j = judge(series, day, 1500, CONFIG, Direction.DOWN, calendar=US)
    assert j.severity == "WARN", j.describe()
    assert "Thanksgiving Day: no past night like it on record" in j.describe()
    # A holiday that did move the series is a like night: Columbus Day at half, Thanksgiving at half passes.
    kept = _holidays_us(date(2025, 11, 26), columbus=0.5, thanksgiving=0.5)
    alike = judge(kept, day, 1500, CONFIG, Direction.DOWN, calendar=US)
    assert alike.severity is None and date(2025, 10, 13) in alike.like_days


def test_a_fall_on_a_quarter_end_with_no_like_night_is_not_excused():
    cal = BusinessCalendar.model_validate({"quarter_end": {"last_business_days": 3, "max_effect_pct": 80}})
    series = _invoices(date(2025, 9, 29), spike=1.0)  # no month-end effect on record
    history = {d: v for d, v in series.items() if d < date(2025, 9, 30)}
    # A partial load loses 35% on the quarter's last business day: not what a quarter-end does.
    fault = judge(history, date(2025, 9, 30), 5000 * 0.65, CONFIG, Direction.DOWN, calendar=cal)
    assert fault.severity == "ERROR", fault.describe()
    # A quarter-end push of +40% with nothing like it on record is at most a WARN.
    push = judge(history, date(2025, 9, 30), 5000 * 1.4, CONFIG, calendar=cal)
    assert push.severity in (None, "WARN"), push.describe()


def _files(tmp_path, context_country: str | None, calendar: dict | None):
    ctx = {"teams": {"ops": {"name": "Ops", "slack_channel": "#ops", "members": []}}}
    if context_country is not None:
        ctx["country"] = context_country
    (tmp_path / "context.yaml").write_text(yaml.safe_dump(ctx))
    metrics = {"business_day": {"timezone": "America/Toronto"}}
    if calendar is not None:
        metrics["calendar"] = calendar
    (tmp_path / "metrics.yaml").write_text(yaml.safe_dump(metrics))
    return load_context_file(tmp_path / "context.yaml"), load_metrics_file(tmp_path / "metrics.yaml")


def test_holidays_default_from_the_context_files_country_and_subdivision(tmp_path):
    fete = date(2025, 6, 24)  # Quebec's Fete nationale: not a holiday elsewhere in Canada
    context, metrics = _files(tmp_path, "CA-QC", None)
    assert metrics.calendar.day(fete) is None  # the time zone names Canada only
    quebec = metrics.with_country(context.country).calendar
    assert quebec.day(fete).kind == "holiday" and quebec.day(fete).direction == "down"
    # The metrics file's own holidays override the context's, an empty list too.
    context, declared = _files(tmp_path, "CA-QC", {"holidays": []})
    assert declared.with_country(context.country).calendar.day(fete) is None


def test_a_bad_country_names_the_file_and_the_field(tmp_path):
    with pytest.raises(DwConfigError, match=r"country.*'XX'"):
        _files(tmp_path, "XX", None)
    with pytest.raises(DwConfigError, match=r"country: .*CA has no subdivision 'ZZ' \(it has .*QC"):
        _files(tmp_path, "CA-ZZ", None)


def _daily(start: date, end: date, base: float, weekend: float, month_end: float, holiday: float,
           holidays: BusinessCalendar | None, noise: float, seed: int) -> dict[date, float]:  # fmt: skip
    """A daily series from ``start``: ``base`` a weekday, times ``weekend`` on Saturdays and Sundays, times
    ``month_end`` on the month's last two days, times ``holiday`` on ``holidays``' days, with ``noise``."""
    rng, out, d = random.Random(seed), {}, start
    while d <= end:
        v = base * (weekend if d.weekday() >= 5 else 1.0)
        if (d + timedelta(days=2)).month != d.month:
            v *= month_end
        if holidays is not None and holidays.holiday(d):
            v *= holiday
        out[d] = v * (1 + rng.gauss(0, noise))
        d += timedelta(days=1)
    return out


def _payments(end: date, seed: int = 4, holidays: BusinessCalendar | None = None) -> dict[date, float]:
    """Bill payments from Monday 27 April (the month's last two days at 1.8 times, weekends and holidays lower):
    the history's first month-end (29-30 April) has no like weekday before it."""
    return _daily(date(2026, 4, 27), end, 1400.0, 0.5, 1.8, 0.4, holidays, 0.05, seed)


@pytest.mark.parametrize(
    ("make", "day", "calendar"),
    [
        (_payments, date(2026, 6, 30), NO_CALENDAR),  # Tuesday: 29-30 April and 30-31 May before it
        # From Thursday 29 May: 30-31 May (no like weekday before them) and 30 June before it.
        (
            lambda end: {d: v for d, v in _shop(end, seed=2).items() if d >= date(2025, 5, 29)},
            date(2025, 7, 31),
            SHOP_DAYS,
        ),
    ],
    ids=["weekday-payments", "shop-every-day"],
)
def test_the_first_month_end_of_a_history_counts_against_the_nights_after_it(make, day, calendar):
    series = make(day)
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, series[day], CONFIG, calendar=calendar)
    # The first month-end has no like weekday before it; measured against the ones after it, it is the second
    # occurrence that makes the pattern.
    assert j.severity is None and j.calendar_day.kind == "recurring", j.describe()
    assert "learned from 2 past occurrences" in j.calendar_day.name and len(j.like_days) == 2
    # A third of the month-end's rush missing is a fault, though the night is still busier than a Tuesday.
    fault = judge(history, day, series[day] * 0.65, CONFIG, Direction.DOWN, calendar=calendar)
    assert fault.severity == "ERROR", fault.describe()


QUEBEC = BusinessCalendar.model_validate(
    {"holidays": [{"country": "CA", "subdivision": "QC", "direction": "down"}]}
)
US_SHOP = BusinessCalendar.model_validate(
    {"business_days": EVERY_DAY, "holidays": [{"country": "US", "direction": "down"}]}
)


def _shop_through_christmas(end: date, seed: int = 6) -> dict[date, float]:
    """A shop open every day whose holidays halve its sales but whose days between them are ordinary, and whose
    month's last two days sell 40% more."""
    return _daily(date(2025, 10, 6), end, 8000.0, 0.8, 1.4, 0.5, US_SHOP, 0.03, seed)


@pytest.mark.parametrize(
    ("make", "nights", "calendar"),
    [
        # Quebec's Fete nationale (24 June) and Canada Day (1 July) are a week apart: a holiday period, whose
        # days this business keeps at its ordinary pace; its month-end falls inside it.
        (lambda end: _payments(end, holidays=QUEBEC), (date(2026, 6, 29), date(2026, 6, 30)), QUEBEC),
        # Christmas to New Year's Day, the days between ordinary for this shop, the month-end inside them.
        (_shop_through_christmas, (date(2025, 12, 30), date(2025, 12, 31)), US_SHOP),
    ],
    ids=["quebec-payments", "us-shop"],
)
def test_a_holiday_period_the_series_does_not_keep_leaves_its_month_end_a_month_end(make, nights, calendar):
    for day in nights:
        series = make(day)
        history = {d: v for d, v in series.items() if d < day}
        j = judge(history, day, series[day], CONFIG, calendar=calendar)
        # Compared with the ordinary days between the holidays, the month-end's rush was an ERROR.
        assert j.severity is None, (day, j.describe())
        fault = judge(history, day, series[day] * 0.6, CONFIG, Direction.DOWN, calendar=calendar)
        assert fault.severity == "ERROR", (day, fault.describe())


@pytest.mark.parametrize(
    ("make", "calendar"),
    [(_invoices, NO_CALENDAR), (_shop, SHOP_DAYS)],
    ids=["distributor-weekdays", "shop-every-day"],
)
def test_a_day_of_the_month_that_moved_twice_by_chance_does_not_excuse_a_fault_on_it(make, calendar):
    """Among a month's 31 days, some one moves twice the same way by chance in a short history: taken for a
    pattern, it made tonight a calendar night and a real fault on the 25th passed, compared with the two
    chance nights. A day of the month needs three occurrences; two are still chance."""
    day = date(2025, 9, 25)
    chance = {date(2025, 7, 25): 0.6, date(2025, 8, 25): 0.62}
    series = {d: v for d, v in make(day).items() if d >= date(2025, 6, 26)}  # the 25th on record twice
    history = {d: v * chance.get(d, 1.0) for d, v in series.items() if d < day}
    fault = judge(history, day, series[day] * 0.55, CONFIG, Direction.DOWN, calendar=calendar)
    assert fault.calendar_day is None and fault.severity == "ERROR", fault.describe()


@pytest.mark.parametrize(
    ("make", "calendar"),
    [(_invoices, NO_CALENDAR), (_shop, SHOP_DAYS)],
    ids=["distributor-weekdays", "shop-every-day"],
)
def test_a_day_of_the_month_the_history_holds_three_times_is_learned(make, calendar):
    """A payday the team never wrote down: the 15th sells 40% less, three months running, and tonight's 15th
    doing the same is no fault; half of it missing still is."""
    day = date(2025, 9, 15)
    series = {d: v * (0.6 if d.day == 15 else 1.0) for d, v in make(day).items() if d >= date(2025, 6, 1)}
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, series[day], CONFIG, Direction.BOTH, calendar=calendar)
    assert j.severity is None and "day 15 of the month (learned from 3" in j.describe(), j.describe()
    fault = judge(history, day, series[day] * 0.5, CONFIG, Direction.DOWN, calendar=calendar)
    assert fault.severity == "ERROR", fault.describe()


@pytest.mark.parametrize(
    ("make", "day", "flagged", "calendar"),
    [
        # Friday 29 August: 30 June, then 31 July taken for a fault (nothing before it to learn from).
        (_invoices, date(2025, 8, 29), {date(2025, 7, 31)}, NO_CALENDAR),
        # From 1 June: 29-30 June, then 30-31 July both taken for faults; tonight Sunday 31 August.
        (
            lambda end: {d: v for d, v in _shop(end).items() if d >= date(2025, 6, 1)},
            date(2025, 8, 31),
            {date(2025, 7, 30), date(2025, 7, 31)},
            SHOP_DAYS,
        ),
    ],
    ids=["distributor-weekdays", "shop-every-day"],
)
def test_a_flagged_month_end_that_moved_like_the_earlier_ones_is_an_occurrence(make, day, flagged, calendar):
    """A month-end flagged before the pattern formed left the occurrences, so it never formed and every
    month-end after it stayed a WARN. Flagged, it still counts when it moved like the earlier ones; a
    flagged one that moved unlike them (a fault) does not teach the calendar."""
    series = make(day)
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, series[day], CONFIG, Direction.BOTH, calendar=calendar, excluded_days=flagged)
    assert j.severity is None and j.calendar_day.kind == "recurring", j.describe()
    assert "learned from 2 past occurrences" in j.calendar_day.name and flagged & set(j.like_days)
    fault = judge(
        history, day, series[day] * 0.5, CONFIG, Direction.DOWN, calendar=calendar, excluded_days=flagged
    )
    assert fault.severity == "ERROR", fault.describe()
    # The flagged month-end a partial load (a sixth of its run) or a replay (five times it): no occurrence,
    # so tonight's is still the second on record, a WARN, not compared with the faulty night.
    for factor in (1 / 6, 5.0):
        faulty = {d: v * (factor if d in flagged else 1.0) for d, v in history.items()}
        j = judge(faulty, day, series[day], CONFIG, Direction.BOTH, calendar=calendar, excluded_days=flagged)
        assert j.severity == "WARN" and j.calendar_day is None, (factor, j.describe())
        assert "moved like the only earlier one on record" in j.describe()


@pytest.mark.parametrize(
    ("make", "calendar"),
    [(_invoices, NO_CALENDAR), (_shop, SHOP_DAYS)],
    ids=["distributor-weekdays", "shop-every-day"],
)
def test_a_flagged_day_of_the_month_counts_only_when_it_moved_like_the_others(make, calendar):
    """A payday on the 15th three months running, the middle one flagged: it moved like the others, so the
    day is learned (three occurrences); flagged after moving unlike them, the two others are not enough."""
    day = date(2025, 9, 15)
    flagged = {date(2025, 7, 15)}
    series = {d: v * (0.6 if d.day == 15 else 1.0) for d, v in make(day).items() if d >= date(2025, 6, 1)}
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, series[day], CONFIG, Direction.BOTH, calendar=calendar, excluded_days=flagged)
    assert j.severity is None and "day 15 of the month (learned from 3" in j.describe(), j.describe()
    faulty = {d: v * (0.3 if d in flagged else 1.0) for d, v in history.items()}
    fault = judge(
        faulty, day, series[day] * 0.5, CONFIG, Direction.DOWN, calendar=calendar, excluded_days=flagged
    )
    assert fault.calendar_day is None and fault.severity == "ERROR", fault.describe()


def _climbing(start: date, end: date, month_end: float, weekdays: bool, seed: int) -> dict[date, float]:
    """A new business finding its level over its first weeks (nine tenths of the way in three), times
    ``month_end`` on its last business day (``weekdays``: weekday invoicing, weekends a trickle) or on the
    month's last two days (a shop open every day, weekends lower)."""
    rng, out, d = random.Random(seed), {}, start
    while d <= end:
        weekend = d.weekday() >= 5
        v = (5000.0 * (0.08 if weekend else 1.0)) if weekdays else 8000.0 * (0.8 if weekend else 1.0)
        v *= 1 - 0.9 ** ((d - start).days + 1)
        if (not weekend and _last_business_day(d)) if weekdays else (d + timedelta(days=2)).month != d.month:
            v *= month_end
        out[d] = v * (1 + rng.gauss(0, 0.03))
        d += timedelta(days=1)
    return out


def _filling(start: date, end: date, kept_days: int = 35, seed: int = 3) -> dict[date, float]:
    """A daily snapshot that keeps ``kept_days`` of balances: it fills for that long, then holds."""
    rng, out, d = random.Random(seed), {}, start
    while d <= end:
        out[d] = 12 * min((d - start).days + 1, kept_days) * (1 + rng.gauss(0, 0.002))
        d += timedelta(days=1)
    return out


@pytest.mark.parametrize(
    ("make", "day", "calendar"),
    [
        # Weekday invoicing from Tuesday 17 June, still climbing at the end of June and July.
        (lambda end: _climbing(date(2025, 6, 17), end, 1.0, True, seed=3), date(2025, 8, 29), NO_CALENDAR),
        # A 35-day snapshot from 17 June, filling across the end of June and July.
        (lambda end: _filling(date(2025, 6, 17), end), date(2025, 8, 31), SHOP_DAYS),
    ],
    ids=["climbing-weekdays", "snapshot-filling"],
)
def test_a_month_end_that_fell_while_the_series_was_finding_its_level_is_not_learned(make, day, calendar):
    """Every night of a series still climbing (or a snapshot still filling) runs above the nights before it,
    its month-ends too: they moved it only as the nights beside them did, so they are no occurrences. Taken
    for two, they made tonight's ordinary month-end a learned one, compared with them, and an ERROR."""
    series = make(day)
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, series[day], CONFIG, calendar=calendar)
    assert j.severity is None and j.calendar_day is None, j.describe()
    assert date(2025, 6, 30) not in j.calibration.set_aside, j.calibration.set_aside
    fault = judge(history, day, series[day] * 0.5, CONFIG, Direction.DOWN, calendar=calendar)
    assert fault.severity == "ERROR", fault.describe()


@pytest.mark.parametrize(
    ("make", "calendar"),
    [
        # Weekday invoicing from Monday 16 June whose last business day is half a day's (the run is billed the
        # next morning): its first, at the end of June, fell while the business was still climbing.
        (lambda end: _climbing(date(2025, 6, 16), end, 0.5, True, seed=1), NO_CALENDAR),
        # A shop from 12 June whose month's last two days sell half as much again.
        (lambda end: _climbing(date(2025, 6, 12), end, 1.5, False, seed=1), SHOP_DAYS),
    ],
    ids=["weekday-dip", "shop-spike"],
)
def test_a_month_end_is_learned_from_its_occurrences_after_the_series_found_its_level(make, calendar):
    """The month-end of June fell while the series was still climbing: its effect is the climb's as much as
    the month-end's (a dip cancelled by it, a rise inflated). It is no occurrence; July's and August's are,
    so tonight's month-end is compared with them, and a fault on it is still an ERROR."""
    day = date(2025, 9, 30)
    series = make(day)
    history = {d: v for d, v in series.items() if d < day}
    j = judge(history, day, series[day], CONFIG, calendar=calendar)
    assert j.severity is None and j.calendar_day.kind == "recurring", j.describe()
    assert j.like_days == [date(2025, 7, 31), date(2025, 8, 29 if calendar is NO_CALENDAR else 31)]
    fault = judge(history, day, series[day] * 0.5, CONFIG, Direction.DOWN, calendar=calendar)
    assert fault.severity == "ERROR", fault.describe()
