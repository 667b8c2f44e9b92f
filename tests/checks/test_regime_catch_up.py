"""A lag closing after a change of regime (``baseline.recent_regime``): a table that keeps a rolling window
fills it and stops growing, or a level that climbed stops, and the median of past like nights catches up with
it over the next weeks, dropping the rest of its lag in one night when its middle reaches the new level. The
ordinary nights of those weeks are no ERROR, and a real fall after the fill still is. Three shapes: snapshots
of 35 and 60 days filling, and a level that climbed for 50 days and stopped."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig, recent_regime
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile

START = date(2025, 6, 3)
NIGHTS = 130
CONFIG = BaselineConfig(weeks=6)
EVERY_DAY = MetricsFile.model_validate(
    {"calendar": {"holidays": [], "business_days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}}
).calendar


def _snapshot(kept: int, seed: int) -> dict[date, float]:
    """Forty rows a day kept for ``kept`` days: the window fills, then holds ``40 x kept`` rows."""
    rng = random.Random(seed)
    return {
        START + timedelta(days=i): 40.0 * min(i + 1, kept) * (1 + rng.gauss(0, 0.002)) for i in range(NIGHTS)
    }


def _climb_that_stops(seed: int) -> dict[date, float]:
    """A level that climbs by 30 a night for 50 nights from 1,000, then holds."""
    rng = random.Random(seed)
    return {
        START + timedelta(days=i): (1000.0 + 30 * min(i, 50)) * (1 + rng.gauss(0, 0.002))
        for i in range(NIGHTS)
    }


SHAPES = [
    pytest.param(_snapshot(35, 35), 35, id="35-day snapshot"),
    pytest.param(_snapshot(60, 60), 60, id="60-day snapshot"),
    pytest.param(_climb_that_stops(9), 50, id="climb that stops"),
]


def _before(series: dict[date, float], day: date) -> dict[date, float]:
    return {d: v for d, v in series.items() if d < day}


@pytest.mark.parametrize(("series", "stopped"), SHAPES)
def test_the_weeks_a_lag_closes_raise_no_error(series, stopped):
    # The old line carried the closing lag's bias (~0.16) onto the nights its median had reached the new
    # level, against the line's spread of ~0.002: runs of up to 7 ordinary nights read at z about -12.
    errors = []
    for k in range(1, 36):
        day = START + timedelta(days=stopped + k)
        j = judge(_before(series, day), day, series[day], CONFIG, calendar=EVERY_DAY)
        if j.severity == "ERROR":
            errors.append((k, round(j.result.robust_z or 0, 1), round(j.result.relative_change or 0, 4)))
    assert not errors, errors


@pytest.mark.parametrize(("series", "stopped"), SHAPES)
@pytest.mark.parametrize(("factor", "after"), [(0.7, 7), (0.7, 21), (1.4, 28), (0.9, 28), (0.9, 42)])
def test_a_fault_after_the_fill_is_still_an_error(series, stopped, factor, after):
    day = START + timedelta(days=stopped + after)
    j = judge(_before(series, day), day, series[day] * factor, CONFIG, calendar=EVERY_DAY)
    assert j.severity == "ERROR", (j.result.robust_z, j.result.z_threshold, j.result.relative_change)


def test_a_closing_lag_is_expected_short_of_zero_and_never_beyond_it():
    rng = random.Random(5)
    before = [0.5 + rng.gauss(0, 0.002) for _ in range(30)]
    closing = [0.3 - 0.02 * i + rng.gauss(0, 0.002) for i in range(12)]
    regime = recent_regime([*before, *closing])
    # The line reached 0.08 at the latest error; a week of its pace (0.14) would cross zero.
    assert regime.catching_up > 0
    assert regime.bias - regime.catching_up == pytest.approx(0.0, abs=1e-9)
    assert regime.bias + regime.catching_up == pytest.approx(0.08, abs=0.01)
    crossed = [0.3 - 0.04 * i + rng.gauss(0, 0.002) for i in range(12)]
    regime = recent_regime([*before, *crossed])
    assert (regime.bias, regime.catching_up) == (0.0, 0.0)
