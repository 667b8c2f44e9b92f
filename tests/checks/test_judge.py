"""The judgement on a night's number: calendar nights against nights like them, small counts on absolute
change, accepted levels; ERROR only for what survives all three."""

from __future__ import annotations

import random
from datetime import date, timedelta

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod, BaselineStatus, Direction, score
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.history import Rebase
from dw_dagster.checks.judge import judge

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
CAL = BusinessCalendar.model_validate(
    {"business_days": EVERY_DAY, "holidays": [{"country": "US"}], "month_end": {"last_business_days": 2}}
)
CFG = BaselineConfig(weeks=6, min_relative_change=0.1)


def _orders(start: date, end: date, seed: int = 5, month_end: float = 1.3, holiday: float = 0.5) -> dict:
    """Order days as a shop sees them: weekend dip, month-end peak on the last two days, holiday dip."""
    rng, out, d = random.Random(seed), {}, start
    while d < end:
        v = 2500 * (0.8 if d.weekday() >= 5 else 1.0) * (1 + rng.gauss(0, 0.03))
        if (d + timedelta(days=2)).month != d.month:
            v *= month_end
        if CAL.holiday(d):
            v *= holiday
        out[d] = v
        d += timedelta(days=1)
    return out


def test_month_end_is_compared_with_past_month_ends_and_passes():
    hist = _orders(date(2025, 3, 1), date(2025, 5, 30))
    day = date(2025, 5, 31)  # a Saturday at month-end
    value = 2500 * 0.8 * 1.3
    # Against ordinary Saturdays the month-end is a 30% anomaly ...
    assert score(hist, day, value, CFG).status is BaselineStatus.ANOMALY
    j = judge(hist, day, value, CFG, calendar=CAL)
    # ... against past month-ends it is an ordinary month-end.
    assert j.severity is None and j.calendar_day.kind == "month_end"
    assert len(j.like_days) == 4 and 20 < j.calendar_effect_pct < 40
    assert "compared with 4 past like nights" in j.describe()


def test_a_fault_on_a_month_end_survives_the_calendar():
    hist = _orders(date(2025, 3, 1), date(2025, 5, 30))
    j = judge(hist, date(2025, 5, 31), 2500 * 0.8 * 1.3 * 0.5, CFG, Direction.DOWN, calendar=CAL)
    assert j.severity == "ERROR" and j.result.relative_change < -0.4


def test_a_holiday_with_no_past_holiday_is_at_most_warn():
    hist = _orders(date(2025, 4, 1), date(2025, 5, 26), holiday=1.0)  # no holiday in the history
    memorial = date(2025, 5, 26)
    j = judge(hist, memorial, 2500 * 0.5, CFG, Direction.DOWN, calendar=CAL)
    assert j.plain.status is BaselineStatus.ANOMALY and j.severity == "WARN"
    assert "Memorial Day: no past night like it on record" in j.describe()
    # Beyond what a holiday explains (60% by default): a closure for it or a loss, which the first public holiday
    # on record cannot tell apart, so still a WARN (test_holiday_closure.py); where the team set how much its
    # holidays explain, judged as on an ordinary night.
    closure = judge(hist, memorial, 2500 * 0.2, CFG, Direction.DOWN, calendar=CAL)
    assert closure.severity == "WARN" and "may be a closure for it or a loss" in closure.describe()
    set_size = BusinessCalendar.model_validate({"holidays": [{"country": "US", "max_effect_pct": 60}]})
    assert judge(hist, memorial, 2500 * 0.2, CFG, Direction.DOWN, calendar=set_size).severity == "ERROR"
    # No calendar: the same dip is an ERROR.
    assert judge(hist, memorial, 2500 * 0.5, CFG, Direction.DOWN).severity == "ERROR"


def test_a_holiday_is_compared_with_past_holidays():
    hist = _orders(date(2025, 1, 1), date(2025, 5, 26), holiday=0.5)  # MLK day, Presidents' day: half
    j = judge(hist, date(2025, 5, 26), 2500 * 0.5, CFG, Direction.DOWN, calendar=CAL)
    # Each past holiday's effect against its own weekday (New Year's Day has no history before it).
    assert j.severity is None and date(2025, 2, 17) in j.like_days and date(2025, 1, 1) not in j.like_days
    assert -60 < j.calendar_effect_pct < -40
    # A holiday that fell to a tenth is not a holiday effect.
    assert judge(hist, date(2025, 5, 26), 250, CFG, Direction.DOWN, calendar=CAL).severity == "ERROR"


def test_ordinary_nights_are_not_widened_by_calendar_nights():
    hist = _orders(date(2025, 3, 1), date(2025, 6, 3), month_end=2.0)
    day = date(2025, 6, 3)  # a Tuesday
    j = judge(hist, day, 2500 * 0.85, CFG, Direction.DOWN, calendar=CAL)
    assert j.severity == "ERROR" and j.calendar_day is None


def test_one_row_more_in_a_small_table_is_not_an_anomaly():
    day = date(2025, 6, 17)
    six = {day - timedelta(days=k): 6.0 for k in range(1, 60)}
    dod = BaselineConfig(method=BaselineMethod.DAY_OVER_DAY)
    j = judge(six, day, 7.0, BaselineConfig())
    assert j.severity is None and j.result.absolute and j.result.robust_z < 1
    assert judge(six, day, 7.0, dod).severity is None
    # The small-count rule off: the same row is a huge robust z.
    off = score(six, day, 7.0, BaselineConfig(small_below=0))
    assert off.status is BaselineStatus.ANOMALY and off.robust_z > 100
    # Emptied, a small table is still an anomaly; many rows more too.
    assert judge(six, day, 0.0, BaselineConfig()).severity == "ERROR"
    assert judge(six, day, 20.0, BaselineConfig()).severity == "ERROR"


def test_a_small_list_that_jumps_is_still_an_anomaly():
    rng = random.Random(2)
    day = date(2025, 6, 16)
    reorder = {day - timedelta(days=k): float(31 + rng.randint(-4, 4)) for k in range(1, 60)}
    cfg = BaselineConfig(min_relative_change=0.25)
    j = judge(reorder, day, 195.0, cfg, Direction.UP)
    assert j.severity == "ERROR" and j.result.absolute and j.result.robust_z > 10
    assert judge(reorder, day, 35.0, cfg, Direction.UP).severity is None


def test_an_accepted_level_passes_its_first_night_and_trains_the_next():
    day = date(2025, 6, 17)
    rng = random.Random(4)
    hist = {day - timedelta(days=k): 9000 * (1 + rng.gauss(0, 0.005)) for k in range(1, 60)}
    up = 9000 * 1.14
    assert judge(hist, day, up, BaselineConfig()).severity == "ERROR"
    level = Rebase(
        series="volume:x", from_date=day, kind="explained", reason="new key K=7 mapped: 1,260 rows"
    )
    first = judge(hist, day, up, BaselineConfig(), rebases=[level])
    assert first.severity is None and first.accepted_tonight and "new level from" in first.describe()
    # The next nights, at the new level, pass; a drop back to the old level is an anomaly.
    nxt = {**hist, day: up}
    again = judge(nxt, day + timedelta(days=1), up * 1.001, BaselineConfig(), rebases=[level])
    assert again.severity is None and not again.accepted_tonight and again.level == level
    week = {**nxt, **{day + timedelta(days=k): up for k in range(1, 8)}}
    assert judge(week, day + timedelta(days=8), up, BaselineConfig(), rebases=[level]).severity is None
    assert judge(week, day + timedelta(days=8), 9000, BaselineConfig(), rebases=[level]).severity == "ERROR"


def test_an_accepted_night_counts_even_if_it_was_flagged_a_remediation_starts_after():
    day = date(2025, 6, 17)
    hist = {day - timedelta(days=k): 100_000.0 * (1 + 0.001 * (k % 3)) for k in range(1, 60)}
    flagged = day - timedelta(days=1)
    hist[flagged] = 120_000.0
    accepted = Rebase(series="s", from_date=flagged, kind="accepted", reason="new plant", accepted_by="Ann")
    j = judge(hist, day, 120_100.0, BaselineConfig(), excluded_days={flagged}, rebases=[accepted])
    assert j.severity is None and not j.accepted_tonight
    fixed = Rebase(series="s", from_date=day, kind="remediation", reason="verified fix of INC-1")
    assert judge(
        hist, day, 120_100.0, BaselineConfig(), excluded_days={flagged}, rebases=[fixed]
    ).accepted_tonight


def test_the_night_after_a_fix_passes_only_at_the_level_the_fix_rebuilt():
    """A fix's level is no blind pass: a night that moved far from what the fix rebuilt is a new fault."""
    day = date(2025, 6, 18)
    hist = {day - timedelta(days=k): 100_000.0 * (1 + 0.001 * (k % 3)) for k in range(1, 60)}
    rebuilt = day - timedelta(days=1)
    hist[rebuilt] = 102_000.0  # the incident's night as the fix's rerun re-recorded it
    fixed = Rebase(series="s", from_date=day, kind="remediation", reason="verified fix of INC-1")
    at_level = judge(hist, day, 102_300.0, BaselineConfig(), excluded_days={rebuilt}, rebases=[fixed])
    assert at_level.severity is None and at_level.accepted_tonight
    scaled = judge(hist, day, 210_000.0, BaselineConfig(), excluded_days={rebuilt}, rebases=[fixed])
    assert scaled.severity == "ERROR" and not scaled.accepted_tonight
    assert "not at the level the fix rebuilt (102,000)" in scaled.describe()


# An office's order intake in Germany (another shape than the shop's above): weekdays only, a trickle at
# weekends and on public holidays (closed), half between Christmas and New Year, 80% while it ramps back.
DE = BusinessCalendar.model_validate({"holidays": [{"country": "DE"}]})


def _intake(end: date, fault: tuple[date, float] | None = None) -> dict:
    rng, out, d = random.Random(11), {}, date(2025, 10, 6)  # after German Unity Day
    while d <= end:
        kind = DE.day(d)
        v = 1200.0 if d.weekday() < 5 else 150.0
        if kind is not None and kind.kind == "holiday":
            v = 150.0
        elif kind is not None and kind.like_keys == ("holiday_period",):
            v *= 0.5
        elif kind is not None and kind.like_keys == ("after_holidays",):
            v *= 0.8
        out[d] = v * (1 + rng.gauss(0, 0.03)) * (fault[1] if fault and fault[0] == d else 1.0)
        d += timedelta(days=1)
    return out


def test_a_holiday_period_night_by_night_raises_nothing_above_warn():
    config = BaselineConfig(weeks=6, min_relative_change=0.15)
    series = _intake(date(2026, 1, 16))
    severities = {}
    for day in sorted(d for d in series if d >= date(2025, 12, 20)):
        j = judge(series, day, series[day], config, Direction.BOTH, calendar=DE)
        severities[day] = j.severity
    assert "ERROR" not in severities.values(), {d: s for d, s in severities.items() if s}
    # Christmas Day, closed like a Sunday, is the first holiday on record: a WARN, its note says why.
    christmas = judge(series, date(2025, 12, 25), series[date(2025, 12, 25)], config, calendar=DE)
    assert (
        christmas.severity == "WARN" and "no lower than the series' own closed days" in christmas.describe()
    )
    # Boxing Day is compared with Christmas Day; the days between with each other once one is on record.
    assert severities[date(2025, 12, 26)] is None and severities[date(2025, 12, 30)] is None
    # Without the calendar the same fortnight is a string of ERRORs, until its own dips widen its errors.
    plain = [judge(series, d, series[d], config).severity for d in sorted(severities)]
    assert plain.count("ERROR") >= 2


def test_a_fault_inside_a_holiday_period_still_raises_error():
    config = BaselineConfig(weeks=6, min_relative_change=0.15)
    # Half the orders lost on 30 December, a working day between the holidays, with the days between
    # before it on record: a quarter of an ordinary Tuesday, not the half the period shows.
    day = date(2025, 12, 30)
    series = _intake(day, fault=(day, 0.5))
    j = judge(series, day, series[day], config, Direction.DOWN, calendar=DE)
    assert j.severity == "ERROR" and j.calendar_day.kind == "holiday_period" and len(j.like_days) >= 3
    # A load played three times on the first day between (half again an ordinary Saturday), before any
    # day between is on record: a period explains a dip, not a jump.
    day = date(2025, 12, 27)
    series = _intake(day, fault=(day, 3.0))
    j = judge(series, day, series[day], config, Direction.BOTH, calendar=DE)
    assert j.severity == "ERROR" and not j.like_days
    # An emptied day on Boxing Day (a holiday) and on the ramp back: ERRORs too.
    for day in (date(2025, 12, 26), date(2026, 1, 5)):
        series = _intake(day, fault=(day, 0.0))
        assert judge(series, day, series[day], config, Direction.DOWN, calendar=DE).severity == "ERROR"


def test_the_ui_shows_computed_figures_rounded():
    from dw_dagster.checks.judge import judgement_metadata

    hist = _orders(date(2025, 3, 1), date(2025, 5, 30))
    j = judge(hist, date(2025, 5, 31), 2500 * 0.8 * 1.3 * 0.5, CFG, Direction.DOWN, calendar=CAL)
    shown = {k: v.value for k, v in judgement_metadata(j).items() if hasattr(v, "value")}
    floats = {k: v for k, v in shown.items() if isinstance(v, float)}
    assert {"baseline_expected", "baseline_relative_change_pct", "baseline_robust_z"} <= set(floats)
    # Two decimals at most: -43.27, never -43.27119341564.
    assert all(round(v, 2) == v for v in floats.values()), floats


def test_a_deviation_counts_the_totals_own_items_and_a_measure_carries_no_unit_of_ours():
    from dw_dagster.checks.judge import deviation
    from dw_dagster.checks.metrics import RecordedTotal
    from dw_dagster.checks.recorded_totals import counted_unit

    listed = RecordedTotal(name="reorder_candidates", owner="buyers", asset="mart/m", group_keys=["SKU"],
                           sql="""SELECT "SKU", COUNT(*) AS "VALUE" FROM {{ ref('MART', 'M') }} GROUP BY 1""",
                           item_noun="SKUs")  # fmt: skip
    summed = RecordedTotal(name="onhand_units", owner="a", asset="inv/f", sql="select 1",
                           item_key="ITEM_ID", item_noun="SKUs")  # fmt: skip
    # A sum grouped by its groups counts none of them, whatever they are called.
    money = RecordedTotal(name="carrier_cost_eur", owner="a", asset="f/c", group_keys=["GROUP_ID"],
                          sql='SELECT "GROUP_ID", SUM("COST") AS "VALUE" FROM "F" GROUP BY 1',
                          item_noun="invoicing groups")  # fmt: skip
    assert (counted_unit(listed), counted_unit(summed), counted_unit(money)) == ("SKUs", "", "")
    hist = _orders(date(2025, 3, 1), date(2025, 5, 30))
    j = judge(hist, date(2025, 5, 31), 2500 * 0.8 * 1.3 * 0.5, CFG, Direction.DOWN, calendar=CAL)
    assert deviation(j, "SKUs").split(" against")[0].endswith(" SKUs")
    assert " units" not in deviation(j, "") and "  " not in deviation(j, "")


def _filling(start: date, end: date, per_day: int, kept_days: int, seed: int) -> dict:
    """A periodic snapshot that keeps ``kept_days`` of balances: it fills for that long, then holds."""
    rng, out, d = random.Random(seed), {}, start
    while d < end:
        out[d] = per_day * min((d - start).days + 1, kept_days) * (1 + rng.gauss(0, 0.002))
        d += timedelta(days=1)
    return out


def _ramping(start: date, end: date, level: float, seed: int) -> dict:
    """A new business finding its level: it climbs towards it, then holds, with its own noise."""
    rng, out, d = random.Random(seed), {}, start
    while d < end:
        out[d] = level * (1 - 0.9 ** ((d - start).days + 1)) * (1 + rng.gauss(0, 0.02))
        d += timedelta(days=1)
    return out


def test_a_holiday_is_not_compared_with_one_that_fell_while_the_series_was_still_finding_its_level():
    # Independence Day fell while a 35-day snapshot was still filling (every night then far above the nights
    # before it); Labor Day, with the snapshot full and flat, is an ordinary night for it.
    filling = _filling(date(2025, 6, 20), date(2025, 9, 1), per_day=12, kept_days=35, seed=3)
    j = judge(filling, date(2025, 9, 1), 420.0, CFG, calendar=CAL)
    assert date(2025, 7, 4) not in j.like_days and j.severity is None, j.describe()
    # A business climbing to its level over its first weeks, judged on Labor Day at that level.
    ramp = _ramping(date(2025, 6, 10), date(2025, 9, 1), level=8000.0, seed=4)
    j = judge(ramp, date(2025, 9, 1), 8000.0, CFG, calendar=CAL)
    assert {date(2025, 6, 19), date(2025, 7, 4)}.isdisjoint(j.like_days) and j.severity is None, j.describe()
    # A real holiday dip on a settled series is still a like night.
    settled = _orders(date(2025, 1, 1), date(2025, 5, 26), holiday=0.5)
    assert date(2025, 2, 17) in judge(settled, date(2025, 5, 26), 1250.0, CFG, calendar=CAL).like_days
