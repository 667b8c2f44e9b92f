"""Thresholds from each series' own errors: how often an ordinary night raises an alarm is a setting
(``BaselineConfig.false_alarm_rate``), not an accident of the spread of a few same-weekday nights."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

from dw_dagster.checks.baseline import (
    BaselineConfig,
    BaselineMethod,
    Direction,
    calibrate,
    one_step_errors,
    score,
    tail_threshold,
)
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
