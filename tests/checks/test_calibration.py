"""Thresholds from each series' own errors: how often an ordinary night raises an alarm is a setting
(``BaselineConfig.false_alarm_rate``), not an accident of the spread of a few same-weekday nights."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

import pytest
from draws import poisson

from dw_dagster.checks.baseline import (
    BaselineConfig,
    BaselineMethod,
    Direction,
    calibrate,
    one_step_errors,
    score,
    tail_threshold,
)
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.judge import judge, judgement_metadata


def _t(rng: random.Random, dof: int) -> float:
    """A Student-t draw: business numbers have heavier tails than a Gaussian."""
    return rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(dof)) / dof)


def _shop(seed: int, nights: int = 70, sd: float = 0.07) -> dict[date, float]:
    """A shop's daily revenue (the e-commerce world's shape): a weekend dip, heavy-tailed noise."""
    rng, start = random.Random(seed), date(2025, 3, 3)
    return {
        start + timedelta(days=k): 40_000
        * (0.75 if (start + timedelta(days=k)).weekday() >= 5 else 1.0)
        * math.exp(sd * _t(rng, 4))
        for k in range(nights)
    }


def _stock(seed: int, nights: int = 70) -> dict[date, float]:
    """An on-hand stock (the distributor world's shape), judged day over day: small heavy-tailed moves."""
    rng, value, out = random.Random(seed), 2_000_000.0, {}
    for k in range(nights):
        value *= math.exp(0.004 * _t(rng, 3))
        out[date(2025, 3, 3) + timedelta(days=k)] = value
    return out


DOD = BaselineConfig(method=BaselineMethod.DAY_OVER_DAY)


def _alarms(shape, config: BaselineConfig) -> tuple[int, int]:
    """(ERRORs, nights judged) over the last 25 ordinary nights of 8 series of ``shape``."""
    errors = nights = 0
    for seed in range(8):
        series = shape(seed)
        for day in sorted(series)[-25:]:
            errors += judge(series, day, series[day], config).severity == "ERROR"
            nights += 1
    return errors, nights


def test_the_false_alarm_rate_is_a_setting_on_two_shapes():
    for shape, config in ((_shop, BaselineConfig()), (_stock, DOD)):
        errors, nights = _alarms(shape, config)
        # 0.5 per 100 by default: a night or two in 200 at most (a fixed robust z of 4 raised 10 to 15).
        assert errors <= 2, (shape.__name__, errors, nights)
        loose, _ = _alarms(shape, config.model_copy(update={"false_alarm_rate": 0.1}))
        assert loose >= errors + 4, (shape.__name__, errors, loose)


def test_an_ordinary_move_of_a_wide_spread_total_passes_and_a_fault_does_not():
    series = _shop(3, nights=66)
    day = max(series)  # a Wednesday
    history = {d: v for d, v in series.items() if d < day}
    expected = score(history, day, 0, BaselineConfig()).expected
    # +11% over the same weekday's median: a robust z of 5.8 against eight Wednesdays' spread ...
    fixed = score(history, day, expected * 1.11, BaselineConfig())
    assert fixed.robust_z > 4
    # ... a move this series makes once in a few weeks, as its own errors say.
    ordinary = judge(history, day, expected * 1.11, BaselineConfig())
    assert ordinary.severity is None and ordinary.calibration is not None
    assert ordinary.calibration.residuals >= 40 and ordinary.result.calibrated
    shown = judgement_metadata(ordinary)
    assert (
        "past nights' one-step errors, at 0.5 false alarms per 100 nights" in shown["baseline_threshold_from"]
    )
    # Four tenths of the day's revenue missing is still news.
    fault = judge(history, day, expected * 0.6, BaselineConfig(), Direction.DOWN)
    assert fault.severity == "ERROR" and fault.result.calibrated


def test_the_table_shares_its_rate_between_the_series_judged_on_it():
    series = _shop(5)
    day = max(series)
    alone = judge(series, day, series[day], BaselineConfig())
    shared = judge(series, day, series[day], BaselineConfig(), share=4)
    assert shared.calibration.alpha == alone.calibration.alpha / 4
    assert shared.calibration.threshold > alone.calibration.threshold


def test_small_counts_keep_their_absolute_rule():
    rng = random.Random(2)
    small = {date(2025, 3, 3) + timedelta(days=k): float(30 + rng.randint(-3, 3)) for k in range(70)}
    day = max(small) + timedelta(days=1)
    j = judge(small, day, 31, BaselineConfig())
    assert j.result.absolute and j.calibration is None and j.severity is None
    assert judge(small, day, 0, BaselineConfig()).severity == "ERROR"  # emptied: whatever the spread


@pytest.mark.parametrize(
    ("shape", "mean"),
    [("refunds a day", 2.0), ("payments a day returned by the bank", 4.0)],
)
def test_a_small_count_that_is_sometimes_zero_is_not_emptied_by_a_zero(shape: str, mean: float) -> None:
    """A zero is an anomaly whatever the spread only where the series' recent nights never came near it: a
    small count of rare events raises on none of its zeros (the old rule raised on every one, at their
    frequency: about one night in seven, and one in fifty)."""
    rng = random.Random(7)
    start = date(2025, 3, 3)
    series = {start + timedelta(days=k): poisson(rng, mean) for k in range(120)}
    zeros = [d for d in sorted(series)[60:] if series[d] == 0]
    assert zeros, shape
    for d in zeros:
        assert judge(series, d, 0, BaselineConfig()).severity is None, (shape, d)
    # The same count never below 2 in its last four weeks: an empty night is an anomaly.
    held = {d: max(v, 2.0) for d, v in series.items()}
    day = max(held) + timedelta(days=1)
    assert judge(held, day, 0, BaselineConfig()).severity == "ERROR", shape


def test_the_tail_is_read_from_the_errors_and_extrapolated_beyond_them():
    rng = random.Random(4)
    gaussian = [abs(rng.gauss(0, 1)) for _ in range(60)]
    heavy = [abs(_t(rng, 2)) for _ in range(60)]
    # Beyond what 60 errors can show (p = 0.005): extrapolated, about the Gaussian 2.8 for Gaussian errors
    # and well beyond it for heavy-tailed ones.
    assert 2.5 < tail_threshold(gaussian, 0.005) < 4.0
    assert tail_threshold(heavy, 0.005) > 5
    # Where n is large enough the split-conformal quantile itself.
    many = [abs(rng.gauss(0, 1)) for _ in range(999)]
    assert tail_threshold(many, 0.05) == sorted(many)[949]


def test_too_short_a_record_falls_back_to_the_fixed_robust_z():
    series = _stock(1, nights=12)
    assert len(one_step_errors(series, DOD, absolute=False)) < 10
    assert calibrate(series, DOD, False, 0.005, Direction.BOTH) is None
    day = max(series)
    j = judge({d: v for d, v in series.items() if d < day}, day, series[day], DOD)
    assert j.calibration is None and j.result.z_threshold == 4.0


def _payments(seed: int, end: date, start: date = date(2026, 5, 4)) -> dict[date, float]:
    """A bill-payment day: weekends at half, the last two days of a month at 1.8 times, 5% noise."""
    rng, out, d = random.Random(seed), {}, start
    while d <= end:
        v = 1400.0 * (0.5 if d.weekday() >= 5 else 1.0)
        if (d + timedelta(days=2)).month != d.month:
            v *= 1.8
        out[d] = v * math.exp(0.05 * rng.gauss(0, 1))
        d += timedelta(days=1)
    return out


def _invoicing(seed: int, end: date) -> dict[date, float]:
    """A wholesaler open every day from 3 June, its month's last day a billing run (x2.5), heavy-tailed
    noise."""
    rng, out, d = random.Random(seed), {}, date(2025, 6, 3)
    while d <= end:
        v = 20_000.0 * (2.5 if (d + timedelta(days=1)).month != d.month else 1.0)
        out[d] = v * math.exp(0.06 * _t(rng, 5))
        d += timedelta(days=1)
    return out


NO_HOLIDAYS = BusinessCalendar.model_validate({"holidays": []})
EVERY_DAY = BusinessCalendar.model_validate(
    {"holidays": [], "business_days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}
)


@pytest.mark.parametrize(
    ("make", "day", "calendar", "loss"),
    [
        (
            _payments,
            date(2026, 6, 23),
            NO_HOLIDAYS,
            0.25,
        ),  # Tuesday: 57 nights, two month-ends, one unmeasured
        (_invoicing, date(2025, 7, 22), EVERY_DAY, 0.4),  # a Tuesday: 55 nights, two month-ends
    ],
    ids=["weekday-payments", "every-day-invoicing"],
)
def test_period_ends_that_moved_the_series_are_set_aside_from_its_errors(make, day, calendar, loss):
    config = BaselineConfig(weeks=6)
    for seed in range(4):
        series = make(seed, day)
        history = {d: v for d, v in series.items() if d < day}
        j = judge(history, day, series[day], config, calendar=calendar, share=2)
        # One month-end is no pattern to learn; left among the ordinary nights, it and the nights compared with it
        # were the record's largest errors and put the threshold at tens of spreads; set aside, it is a few.
        assert j.severity is None and j.calibration is not None, (seed, j.describe())
        assert j.calibration.set_aside and j.result.z_threshold < 9, (seed, j.calibration)
        assert "period-end nights that moved the series set aside" in str(
            judgement_metadata(j)["baseline_threshold_from"]
        )
        # A quarter of an ordinary day missing (four tenths of a heavy-tailed one) is news again.
        fault = judge(
            history, day, (1 - loss) * series[day], config, Direction.DOWN, calendar=calendar, share=2
        )
        assert fault.severity == "ERROR", (seed, fault.result)


def test_a_short_record_extrapolates_with_a_bounded_tail_index():
    rng = random.Random(7)
    p, n = 0.0025, 44
    k = round(n * 0.2)
    ordinary = sorted(abs(rng.gauss(0, 1)) for _ in range(n - 4))
    # Four errors of unmodelled calendar nights among 40 ordinary ones: Hill's index from the largest nine
    # reads about 1, and an unbounded extrapolation put the threshold at tens of spreads.
    contaminated = ordinary + [9.0, 8.0, 6.0, 5.0]
    u = sorted(contaminated)[n - k - 1]
    assert tail_threshold(contaminated, p) <= u * (k / (n * p)) ** 0.5 + 1e-9
    assert tail_threshold(contaminated, p) < 15
    # Errors whose largest happen to agree read almost no tail: still extrapolated as a Student-t with 4
    # degrees of freedom would be, not as a Gaussian.
    flat = [0.1 * i for i in range(1, n - k)] + [3.0 + 0.01 * i for i in range(k)]
    u = sorted(flat)[n - k - 1]
    assert tail_threshold(flat, p) >= u * (k / (n * p)) ** 0.25 - 1e-9
