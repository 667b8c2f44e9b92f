"""A series whose trend changed is expected at its recent regime: a table that keeps a rolling window filled
it over its first nights and then stayed flat is expected flat, not at the growth phase's pace, and its
threshold is not widened by the growth phase's errors (``baseline.recent_regime``). A series that keeps
growing keeps its trend."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod, change_point
from dw_dagster.checks.judge import judge

START = date(2026, 7, 30)


def _snapshot_window(nights: int = 60) -> dict[date, float]:
    """Twelve dealers' end-of-day balances, 35 days kept: 12 rows more a night until the window is full."""
    return {START + timedelta(days=i): float(min(12 * (i + 1), 12 * 35)) for i in range(nights)}


def _log_with_retention(nights: int = 70, seed: int = 3) -> dict[date, float]:
    """An event log of about 1,000 events a day (fewer at weekends) whose rows older than 30 days are purged."""
    rng = random.Random(seed)
    daily = [
        1000 * (0.8 if (START + timedelta(days=i)).weekday() >= 5 else 1.0) * math.exp(rng.gauss(0, 0.05))
        for i in range(nights)
    ]
    return {START + timedelta(days=i): round(sum(daily[max(0, i - 29) : i + 1])) for i in range(nights)}


def test_a_snapshot_window_that_filled_is_expected_flat_and_a_third_lost_is_an_error():
    history = _snapshot_window()
    config = BaselineConfig(method=BaselineMethod.SAME_WEEKDAY, weeks=6, min_relative_change=0.3)
    tonight = START + timedelta(days=60)
    steady = judge(history, tonight, 420.0, config)
    assert steady.severity is None
    # The growth phase's median error applied as bias expected 629 rows.
    assert abs(steady.result.relative_change or 0) < 0.05, steady.result.expected
    lost = judge(history, tonight, 280.0, config)
    assert lost.severity == "ERROR", (lost.result.robust_z, lost.result.z_threshold)


def test_a_log_with_retention_is_expected_at_its_window_once_full():
    history = _log_with_retention()
    config = BaselineConfig(method=BaselineMethod.WEEK_OVER_WEEK, min_relative_change=0.2)
    tonight = START + timedelta(days=70)
    level = history[tonight - timedelta(days=7)]
    steady = judge(history, tonight, level, config)
    assert steady.severity is None
    assert abs(steady.result.relative_change or 0) < 0.05, (steady.result.expected, level)
    lost = judge(history, tonight, level * 2 / 3, config)
    assert lost.severity == "ERROR", (lost.result.robust_z, lost.result.z_threshold)


def test_steady_growth_keeps_its_trend():
    rng = random.Random(7)
    history = {START + timedelta(days=i): 5000 * math.exp(0.01 * i + rng.gauss(0, 0.03)) for i in range(70)}
    tonight = START + timedelta(days=70)
    due = 5000 * math.exp(0.01 * 70)
    for config in (BaselineConfig(weeks=6), BaselineConfig(method=BaselineMethod.WEEK_OVER_WEEK)):
        j = judge(history, tonight, due, config)
        assert j.severity is None and abs(j.result.relative_change or 0) < 0.05, (config.method, j.result)
    # Same weekday: the trend the median of past weeks lags is the bias (week over week measures it).
    calibration = judge(history, tonight, due, BaselineConfig(weeks=6)).calibration
    assert calibration is not None and calibration.bias > 0


def test_a_change_point_is_found_in_a_step_and_not_in_noise():
    rng = random.Random(11)
    noise = [rng.gauss(0, 1) for _ in range(50)]
    assert change_point(noise) is None
    assert change_point([*noise[:30], *(x - 4 for x in noise[30:])]) == 30
