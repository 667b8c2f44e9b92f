"""Cumulative totals: a month-to-date (or week-to-date) total is recognised from its history or declared,
and judged on its increment, so neither the first of the month nor the nights after one bad night alarm;
the bad night itself does, and the nights after it say they still carry it."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks import cumulative
from dw_dagster.checks.baseline import BaselineConfig
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.history import Reading, Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.recorded_totals import evaluate_total
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue

CONFIG = BaselineConfig(weeks=6)
TO_DATE = RecordedTotal.model_validate(
    {"name": "to_date", "owner": "o", "asset": "a/b", "sql": "SELECT 1 AS VALUE", "baseline": {"weeks": 6}}
)


def _to_date(daily: dict[date, float], period: cumulative.Period) -> dict[date, Recorded]:
    """The running total of ``daily`` within each period, by biller category (two groups, 60/40; nights
    missing from ``daily`` have no record)."""
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
    day = max(values) + timedelta(days=1)
    assert total.cumulative == "auto" and cumulative.period_of("no", values, day, 0.0) is None
    assert cumulative.period_of("quarter", values, day, 0.0) == "quarter"


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
    step, groups, span = cumulative.tonight(history, bad, history[bad].value, history[bad].groups, "month")
    assert (
        span == 1
        and step == pytest.approx(daily[bad])
        and groups["CATEGORY=utility"] == pytest.approx(0.6 * daily[bad])
    )
    flagged = {**history, bad: history[bad].model_copy(update={"flagged": True})}
    assert cumulative.flagged_in_period(date(2026, 7, 4), "month", flagged) == [bad]
    assert cumulative.flagged_in_period(date(2026, 8, 1), "month", flagged) == []


def _evaluated(total: RecordedTotal, own: dict[date, Recorded], day: date, tonight: Recorded, failed: date):
    """The total's check tonight, as the checks run evaluates it, the night ``failed`` an incident's."""
    return _checked(total, own, day, tonight, failed)[0]


def _checked(total: RecordedTotal, own: dict[date, Recorded], day: date, tonight: Recorded, failed: date):
    """The total's check tonight and the night it recorded (tonight's reading, flagged or not)."""
    night = Night(
        context=None, run=CheckRun(day, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}), levels={},
        incident_days={failed}, past={total.name: own}, reporter=lambda finding: None, shares={total.asset: 2},
    )  # fmt: skip
    value = TotalValue(value=tonight.value, groups=tonight.groups)
    night.record(total.name, Reading(value=value.value, groups=value.groups))
    return evaluate_total(night, total, {total.name: value}), night


def _parcels(start: date, days: int, seed: int = 3) -> dict[date, float]:
    """Parcels dispatched on business days only (no record at weekends): Mondays carry the weekend's."""
    rng = random.Random(seed)
    out = {}
    for k in range(days):
        d = start + timedelta(days=k)
        if d.weekday() < 5:
            out[d] = 12_000 * (1.4 if d.weekday() == 0 else 1.0) * (1 + rng.gauss(0, 0.04))
    return out


SHAPES = {
    # Bill payments month to date by biller category, every night, weekends at half.
    "payments": ("month", _payments(date(2026, 4, 27), 70), date(2026, 6, 24), "CATEGORY"),
    # Parcels week to date by depot, business days only: the build fails on a Thursday.
    "parcels": ("week", _parcels(date(2026, 4, 27), 70), date(2026, 6, 25), "DEPOT"),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_night_after_a_failed_build_is_judged_over_the_days_since_the_last_build(shape):
    """A failed build leaves the to-date table as it was and its stale value is recorded: the repaired
    night's increment covers two days, judged against two-day increments; a fault in it is still seen."""
    period, daily, failed, key = SHAPES[shape]
    total = RecordedTotal.model_validate(
        {"name": f"{shape}_to_date", "owner": "o", "asset": f"mart/{shape}_to_date", "sql": "SELECT 1 AS VALUE",
         "group_keys": [key], "baseline": {"weeks": 6, "min_relative_change": 0.1}}
    )  # fmt: skip
    history = _to_date(daily, period)
    history = {d: r.model_copy(update={"groups": {f"{key}={g.split('=')[1]}": v for g, v in r.groups.items()}})
               for d, r in history.items()}  # fmt: skip
    repaired = min(d for d in history if d > failed)
    before = max(d for d in history if d < failed)
    own = {d: r for d, r in history.items() if d < repaired}
    # The failed night: the table was not rebuilt, its value is last night's, and that is a finding.
    own[failed] = own[before].model_copy(update={"business_date": failed})
    stale = _evaluated(total, {d: r for d, r in own.items() if d < failed}, failed, own[failed], failed)
    assert not stale.passed, stale.description
    assert cumulative.base_night(own, repaired) == before
    result = _evaluated(total, own, repaired, history[repaired], failed)
    assert result.passed, result.description
    assert "over the 2 days since the last build" in result.metadata["baseline_judged_on"].text
    # A skipped night that recorded nothing at all: the same two days.
    skipped = {d: r for d, r in own.items() if d != failed}
    assert _evaluated(total, skipped, repaired, history[repaired], failed).passed
    # The repaired night loads its own day's rows three times: its two days' increment is twice as large.
    # (Half again as large passed on the payments, whose 42 one-step errors put the calibrated threshold at
    # z 9.5 once no chance day of the month was taken for a pattern: recurring.py.)
    doubled = history[repaired].model_copy(
        update={"value": history[repaired].value + 2 * daily[repaired],
                "groups": {g: v + 2 * (0.6 if g.endswith("utility") else 0.4) * daily[repaired]
                           for g, v in history[repaired].groups.items()}}
    )  # fmt: skip
    replayed = _evaluated(total, own, repaired, doubled, failed)
    assert not replayed.passed
    assert f"{total.name}'s increment over the 2 days since its last build" in replayed.description


def _shaped(shape: str, daily: dict[date, float], period: cumulative.Period) -> dict[date, Recorded]:
    """``daily`` to date, its two groups keyed by the shape's key."""
    key = ONE_RESET[shape][0]
    return {d: r.model_copy(update={"groups": {f"{key}={g.split('=')[1]}": v for g, v in r.groups.items()}})
            for d, r in _to_date(daily, period).items()}  # fmt: skip


ONE_RESET = {
    # Revenue quarter to date by listing currency, every night, from 26 June: 1 July the only reset on
    # record (a month's, a quarter's), 1 August the first month boundary after it.
    "revenue_qtd": ("CURRENCY_CODE", "quarter", _payments(date(2026, 6, 26), 40), [date(2026, 8, 1)]),
    # Parcels year to date by depot, business days only, from 8 December: 2 January the only reset on record
    # (a month's, a quarter's, a year's); 2 February and 1 April the first month and quarter boundaries after.
    "parcels_ytd": ("DEPOT", "year", _parcels(date(2025, 12, 8), 120), [date(2026, 2, 2), date(2026, 4, 1)]),
}


@pytest.mark.parametrize("shape", ONE_RESET)
def test_a_boundary_with_no_drop_is_no_reset_while_one_reset_is_on_record(shape):
    """With one reset on record a longer period's total fits a month's record as well: on the first boundary
    of the shorter period the total does not drop, and that is an ordinary increment (its period is longer),
    not a month-to-date total that failed to restart. A fault on that night is still one."""
    key, period, daily, nights = ONE_RESET[shape]
    total = RecordedTotal.model_validate(
        {"name": f"{shape}", "owner": "o", "asset": f"mart/{shape}", "sql": "SELECT 1 AS VALUE",
         "group_keys": [key], "baseline": {"weeks": 6, "min_relative_change": 0.1}}
    )  # fmt: skip
    history = _shaped(shape, daily, period)
    nobody = date(2000, 1, 1)
    for day in nights:
        own = {d: r for d, r in history.items() if d < day}
        values = {d: r.value for d, r in own.items()}
        # The record fits a month as well as the total's own period; tonight did not drop.
        assert cumulative.detect(values) in ("month", "quarter")
        # Read as a longer period's: tonight continues the period of the last night on record.
        chosen = cumulative.period_of("auto", values, day, history[day].value)
        assert chosen != cumulative.detect(values) and cumulative.period_start(day, chosen) <= max(own)
        result = _evaluated(total, own, day, history[day], nobody)
        assert result.passed, result.description
        # The night's rows loaded twice: its increment doubled, an ERROR.
        doubled = history[day].model_copy(
            update={"value": history[day].value + daily[day],
                    "groups": {g: v + (0.6 if i == 0 else 0.4) * daily[day]
                               for i, (g, v) in enumerate(history[day].groups.items())}}
        )  # fmt: skip
        assert not _evaluated(total, own, day, doubled, nobody).passed
        # The total fell to a third (most of the period's rows lost): a drop read as a month's reset, whose
        # first night is a period's worth of days, not one.
        lost = history[day].model_copy(
            update={
                "value": history[day].value / 3,
                "groups": {g: v / 3 for g, v in history[day].groups.items()},
            }
        )
        assert not _evaluated(total, own, day, lost, nobody).passed
    # Declared, the period is not second-guessed: a month-to-date total that did not restart is a fault.
    day = nights[0]
    own = {d: r for d, r in history.items() if d < day}
    values = {d: r.value for d, r in own.items()}
    assert cumulative.period_of("month", values, day, history[day].value) == "month"
    declared = total.model_copy(update={"cumulative": "month"})
    assert not _evaluated(declared, own, day, history[day], nobody).passed


ANCHORED = {
    # Energy billed from the 28th to the 27th (a utility's meter-reading cycle), every night alike.
    "billing cycle from the 28th": (
        "month@28",
        date(2026, 8, 27),
        60,
        date(2026, 10, 28),
        date(2026, 10, 30),
    ),
    # A retailer's week to date from Sunday, weekends at half.
    "retail week from Sunday": ("week@6", date(2026, 8, 30), 56, date(2026, 10, 25), date(2026, 10, 28)),
}


@pytest.mark.parametrize("shape", ANCHORED)
def test_a_period_that_starts_where_the_calendar_s_does_not_is_recognised_and_judged_on_its_increment(shape):
    """Its first night and the nights after it are ordinary increments, not a fall of nine tenths; a doubled
    night among them is still the finding it is."""
    period, start, days, first, later = ANCHORED[shape]
    total = TO_DATE
    for seed in range(3):
        daily = _payments(start, days + 8, seed=seed)
        history = _to_date(daily, period)
        assert cumulative.detect({d: r.value for d, r in history.items() if d < first}) == period
        assert cumulative.describe(period) in ("cycle from the 28th of the month", "week from Sunday")
        for day in (first, later):
            own = {d: r for d, r in history.items() if d < day}
            result = _evaluated(total, own, day, history[day], failed=date(2000, 1, 1))
            assert result.passed, (seed, day, result.description)
            assert "to date" in result.metadata["baseline_judged_on"].text
        doubled = dict(daily)
        doubled[later] *= 2
        bad = _to_date(doubled, period)
        own = {d: r for d, r in bad.items() if d < later}
        result = _evaluated(total, own, later, bad[later], failed=date(2000, 1, 1))
        assert not result.passed and "increment" in result.description, (seed, result.description)


def test_a_stock_half_lost_once_or_a_weekly_climb_is_no_anchored_period():
    """A period anchored off the calendar's starts again at one night's worth: a stock that only grows, half
    of it lost one night and reloaded the next, and a daily number that climbs from Sunday to Saturday (a
    Sunday at a third of the Saturday before), are not cumulative."""
    rng = random.Random(4)
    start = date(2026, 8, 31)
    stock = {start + timedelta(days=k): 1_000_000 + 20_000 * k * (1 + rng.gauss(0, 0.01)) for k in range(45)}
    stock[date(2026, 9, 14)] *= 0.45
    assert cumulative.detect(stock) is None
    climb = {
        start + timedelta(days=k): (30 + 70 * ((start + timedelta(days=k)).weekday() + 1) % 7 / 6)
        * (1 + rng.gauss(0, 0.03))
        for k in range(56)
    }
    assert cumulative.detect(climb) is None


def _watched(total: RecordedTotal, history: dict[date, Recorded], start: date) -> dict[date, Recorded]:
    """The total watched night after night from ``start``, each night's record flagged as its check left it."""
    own = {d: r for d, r in history.items() if d < start}
    for day in sorted(d for d in history if d >= start):
        _, night = _checked(total, own, day, history[day], failed=date(2000, 1, 1))
        own = {**own, day: history[day].model_copy(update={"flagged": night.readings[total.name].flagged})}
    return own


@pytest.mark.parametrize(
    ("period", "start"),
    [("month@28", date(2026, 7, 29)), ("month", date(2026, 8, 2)), ("quarter", date(2026, 7, 2))],
)
def test_a_reset_read_as_a_fault_before_its_period_was_known_starts_the_period_the_next_night(period, start):
    """Watched from before its first reset, a total to date has no period on record: its first reset is a
    fall of nine tenths, flagged. The next night, that fall, kept by the night after it, is the period's
    start: the total is judged on its increments from then on, and its first reset is the only flagged night.
    A stock emptied for a night or two and reloaded is still no period."""
    total = TO_DATE
    for seed in range(3):
        history = _to_date(_payments(start, 100, seed=seed), period)
        first = min(d for d in history if d == cumulative.period_start(d, period) and d > start)
        flagged = sorted(
            d for d, r in _watched(total, history, start + timedelta(days=10)).items() if r.flagged
        )
        assert flagged == [first], (period, seed, flagged)
    # A stock that only grows, emptied for two nights on the first of a quarter and reloaded: the record
    # opens in the middle of a quarter, so one fall there would fit. Its reload undoes the fall: no period.
    rng = random.Random(7)
    grows = {
        date(2026, 6, 1) + timedelta(days=k): (1_000_000.0 + 2_000 * k) * (1 + rng.gauss(0, 0.0005))
        for k in range(163)
    }
    for out in (date(2026, 10, 1), date(2026, 10, 2)):
        grows[out] = 1_000.0
    watched = _watched(
        total, {d: Recorded(business_date=d, value=v) for d, v in grows.items()}, date(2026, 8, 1)
    )
    assert watched[date(2026, 10, 1)].flagged
    for day in (d for d in sorted(watched) if d >= date(2026, 10, 3)):
        values = cumulative.detection_values({d: r for d, r in watched.items() if d < day}, day, grows[day])
        assert cumulative.period_of("auto", values, day, grows[day]) is None, day
    stock = {date(2026, 8, 2) + timedelta(days=k): 1_000_000 + 20_000 * k for k in range(60)}
    own = {d: Recorded(business_date=d, value=v) for d, v in stock.items()}
    emptied = date(2026, 9, 14)
    own[emptied] = Recorded(business_date=emptied, value=1_000.0, flagged=True)
    later = date(2026, 9, 20)
    values = cumulative.detection_values({d: r for d, r in own.items() if d < later}, later, stock[later])
    assert emptied not in values and cumulative.period_of("auto", values, later, stock[later]) is None
