"""A series calibrated on the nights of tonight's kind (judge.of_tonights_kind): a share or a ratio whose
rows differ by an order of magnitude between business days and weekends spreads as its rows do, which its
level does not tell; pooled, the noisy kind's errors set the quiet kind's threshold."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.groups import judge_groups
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import RecordedTotal

CONFIG = BaselineConfig(weeks=6, small_below=0, min_relative_change=0.05)
MONDAY = date(2026, 11, 2)
FRIDAY = date(2026, 10, 30)
SATURDAY = date(2026, 10, 31)
SEEDS = range(1, 6)


def _binomial(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def _shares(seed: int, day: date, rows_on, p: float, nights: int = 60) -> dict[date, float]:
    """A group's share of a total, in basis points, on ``nights`` nights before ``day``: each night's rows
    drawn with probability ``p`` from ``rows_on(night)`` rows."""
    rng, out = random.Random(seed), {}
    for k in range(1, nights + 1):
        d = day - timedelta(days=k)
        n = rows_on(d)
        out[d] = 10_000 * _binomial(rng, n, p) / n
    return out


def b2b_rows(d: date) -> int:
    """An office business: 650 rows a weekday, 6 at weekends."""
    return 6 if d.weekday() >= 5 else 650


def leisure_rows(d: date) -> int:
    """A leisure business: 500 rows a weekend day, 20 a weekday."""
    return 500 if d.weekday() >= 5 else 20


def test_a_b2b_share_that_fell_on_a_business_day_is_judged_against_business_days():
    # Half of a half-the-rows group lost: its share 49.5% -> 33%, on a Friday and on a Monday after a weekend.
    for day in (FRIDAY, MONDAY):
        found = 0
        for seed in SEEDS:
            j = judge(
                _shares(seed, day, b2b_rows, 0.495), day, 3_290, CONFIG, calendar=BusinessCalendar(), share=4
            )
            assert j.calibrated_on == "business days"
            assert j.result.z_threshold is not None and j.result.z_threshold < 12, j.result
            found += j.severity == "ERROR"
        assert found >= 4, day


def test_a_b2b_weekend_share_is_judged_against_weekends_and_passes():
    # A group with one of Saturday's six rows, or with five of them: a closed day's ordinary swing.
    for seed in SEEDS:
        history = _shares(seed, SATURDAY, b2b_rows, 0.495)
        for tonight in (1_667.0, 8_333.0):
            j = judge(history, SATURDAY, tonight, CONFIG, calendar=BusinessCalendar(), share=4)
            assert j.severity is None, (seed, tonight, j.result)
            assert j.calibrated_on == "weekends and holidays"


def test_a_leisure_share_that_fell_on_a_busy_weekend_is_judged_against_weekends():
    # Weekends are the busy nights here: 60% of a 30%-group's rows lost on a Saturday (share 30% -> 14.6%)
    # is beyond the weekends' spread, while the weekdays' 20 rows swing by as much.
    found = 0
    for seed in SEEDS:
        history = _shares(seed, SATURDAY, leisure_rows, 0.3)
        j = judge(history, SATURDAY, 1_460, CONFIG, calendar=BusinessCalendar(), share=4)
        found += j.severity == "ERROR" and j.calibrated_on == "weekends and holidays"
        quiet = judge(
            history, FRIDAY + timedelta(days=7), 2_000, CONFIG, calendar=BusinessCalendar(), share=4
        )
        assert quiet.severity is None, (seed, quiet.result)
    assert found >= 4


def test_a_ratio_of_two_sums_is_calibrated_on_business_days():
    # An average rate (billed / hours): on a weekend of six shifts it swings with which six; on a business
    # day of 650 it holds within a percent or two. A -19% rate on a Friday is a fault.
    found = 0
    for seed in SEEDS:
        rng, history = random.Random(seed), {}
        for k in range(1, 61):
            d = FRIDAY - timedelta(days=k)
            rates = [rng.choice((3_000, 4_500, 6_200, 8_000)) for _ in range(b2b_rows(d))]
            history[d] = sum(rates) / len(rates)
        usual = sum(v for d, v in history.items() if d.weekday() < 5) / sum(d.weekday() < 5 for d in history)
        j = judge(history, FRIDAY, 0.81 * usual, CONFIG, Direction.BOTH, calendar=BusinessCalendar(), share=3)
        found += j.severity == "ERROR"
    assert found >= 4


def test_kinds_that_spread_alike_keep_one_record():
    # A business whose weekends are as busy as its weekdays: nothing to tell apart, every night calibrates.
    history = _shares(1, FRIDAY, lambda d: 650, 0.495)
    j = judge(history, FRIDAY, 4_950, CONFIG, calendar=BusinessCalendar(), share=4)
    assert j.severity is None and j.calibration is not None and j.calibrated_on is None


def test_a_total_whose_level_tells_its_rows_keeps_one_record():
    # Hours of 650 shifts a weekday and 6 at weekends: the weekends' wider spread is their level's (a sum of
    # fewer items), which the record of every night already scales by: its thresholds are as before.
    rng, history = random.Random(3), {}
    for k in range(1, 61):
        d = FRIDAY - timedelta(days=k)
        history[d] = sum(rng.uniform(4, 8) for _ in range(b2b_rows(d)))
    j = judge(history, FRIDAY - timedelta(days=1), 650 * 6, CONFIG, calendar=BusinessCalendar(), share=4)
    assert j.calibration is not None and j.calibrated_on is None


def _group_records(seed: int, day: date) -> dict[date, Recorded]:
    """A count of rows by source channel: TIME_CLOCK half of them, three others the rest; 650 rows a
    weekday, 6 at weekends."""
    rng, out = random.Random(seed), {}
    mix = {
        "SOURCE=TIME_CLOCK": 0.495,
        "SOURCE=CLIENT_PORTAL": 0.19,
        "SOURCE=MOBILE_APP": 0.2,
        "SOURCE=EDI": 0.115,
    }
    for k in range(1, 61):
        d = day - timedelta(days=k)
        n = b2b_rows(d) + rng.randint(-30, 30) * (d.weekday() < 5)
        counts = dict.fromkeys(mix, 0.0)
        for _ in range(n):
            counts[rng.choices(list(mix), weights=list(mix.values()))[0]] += 1
        out[d] = Recorded(business_date=d, value=float(n), groups=counts)
    return out


TOTAL = RecordedTotal.model_validate(
    {
        "name": "billable_entries",
        "owner": "operations",
        "asset": "core/fct_billable_hours",
        "sql": "SELECT 1 AS VALUE",
        "group_keys": ["SOURCE"],
        "hurts": "down",
        "baseline": {"weeks": 6, "min_relative_change": 0.2},
    }
)


MONTH_ENDS = BusinessCalendar.model_validate({"month_end": {"last_business_days": 1}})


@pytest.mark.parametrize(("day", "cal"), [(MONDAY, BusinessCalendar()), (FRIDAY, MONTH_ENDS)])
def test_a_group_that_fell_alone_on_a_business_day_is_found_by_its_share(day, cal):
    # 60% of CLIENT_PORTAL's rows lost (123 -> 49 rows of 650, the total -11%, within its band), on a Monday
    # and on a month-end (its share judged against ordinary business days: a share cancels the day's effect).
    found = 0
    for seed in SEEDS:
        own = _group_records(seed, day)
        groups = {
            "SOURCE=TIME_CLOCK": 322.0,
            "SOURCE=CLIENT_PORTAL": 49.0,
            "SOURCE=MOBILE_APP": 130.0,
            "SOURCE=EDI": 75.0,
        }
        value = sum(groups.values())
        total = judge(
            {d: r.value for d, r in own.items()}, day, value, TOTAL.baseline, TOTAL.hurts, calendar=cal
        )
        verdict = judge_groups(
            TOTAL, day, value, groups, own, total, calendar=cal, excluded_days=set(), rebases={}
        )
        found += total.severity is None and "CLIENT_PORTAL" in (verdict.problem or "")
    assert found >= 4


def test_a_night_the_calendar_names_is_judged_on_the_record_of_every_night():
    # A month-end's expectation carries its past month-ends' effect, whose spread the business days' own
    # errors understate: it keeps the record of every night, while the Thursday before splits.
    history = _shares(1, FRIDAY, b2b_rows, 0.495)
    assert judge(history, FRIDAY, 4_950, CONFIG, calendar=MONTH_ENDS).calibrated_on is None
    thursday = judge(history, FRIDAY - timedelta(days=1), 4_950, CONFIG, calendar=MONTH_ENDS)
    assert thursday.calibrated_on == "business days"
