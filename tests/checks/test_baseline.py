"""The robust baseline: what it flags, what it leaves alone, and when it refuses to judge."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod, BaselineStatus, Direction, score

DAY = date(2026, 11, 24)  # a Tuesday


def _stock(days: int = 60, level: float = 2_090_000, sd: float = 0.001, seed: int = 7) -> dict[date, float]:
    rng = random.Random(seed)
    out, v = {}, level
    for k in range(days, 0, -1):
        v *= 1 + rng.gauss(0, sd)
        out[DAY - timedelta(days=k)] = v
    return out


def _seasonal(weeks: int = 10, seed: int = 3) -> dict[date, float]:
    rng = random.Random(seed)
    out = {}
    for k in range(weeks * 7, 0, -1):
        d = DAY - timedelta(days=k)
        base = 1000 * (0.6 if d.weekday() >= 5 else 1.0)
        out[d] = base * (1 + rng.gauss(0, 0.05))
    return out


DOD = BaselineConfig(method=BaselineMethod.DAY_OVER_DAY)


def test_day_over_day_flags_the_reference_night_drop():
    hist = _stock()
    prev = hist[DAY - timedelta(days=1)]
    r = score(hist, DAY, prev * (1 - 0.018), DOD, hurts=Direction.DOWN)
    assert r.status is BaselineStatus.ANOMALY
    assert r.relative_change == pytest.approx(-0.018, abs=0.002)
    assert r.robust_z < -4


def test_day_over_day_leaves_ordinary_moves_alone():
    hist = _stock()
    prev = hist[DAY - timedelta(days=1)]
    assert score(hist, DAY, prev * 1.002, DOD).status is BaselineStatus.OK
    assert score(hist, DAY, prev * 0.998, DOD, hurts=Direction.DOWN).status is BaselineStatus.OK


def test_direction_that_does_not_hurt_is_not_an_anomaly():
    hist = _stock()
    prev = hist[DAY - timedelta(days=1)]
    assert score(hist, DAY, prev * 1.05, DOD, hurts=Direction.DOWN).status is BaselineStatus.OK
    assert score(hist, DAY, prev * 1.05, DOD, hurts=Direction.BOTH).status is BaselineStatus.ANOMALY


def test_same_weekday_ignores_weekend_dip_and_flags_a_real_drop():
    hist = _seasonal()
    cfg = BaselineConfig()
    saturday = DAY + timedelta(days=4)
    assert score(hist, saturday, 600, cfg).status is BaselineStatus.OK
    assert score(hist, DAY, 1000, cfg).status is BaselineStatus.OK
    assert score(hist, DAY, 700, cfg, hurts=Direction.DOWN).status is BaselineStatus.ANOMALY


def test_scored_point_is_never_part_of_its_own_baseline():
    hist = _stock()
    prev = hist[DAY - timedelta(days=1)]
    bad = prev * 0.9
    with_self = {**hist, DAY: bad}
    assert score(with_self, DAY, bad, DOD) == score(hist, DAY, bad, DOD)


def test_flagged_days_are_excluded_from_training():
    hist = _seasonal()
    cfg = BaselineConfig()
    # Three past Tuesdays were incidents at a tenth of the level; excluded, they do not widen the scale.
    bad_days = [DAY - timedelta(weeks=w) for w in (1, 2, 3)]
    polluted = {**hist, **{d: 100.0 for d in bad_days}}
    assert score(polluted, DAY, 700, cfg, excluded_days=bad_days).status is BaselineStatus.ANOMALY


def test_too_little_history_is_insufficient_not_ok():
    hist = {DAY - timedelta(weeks=w): 1000.0 for w in (1, 2)}
    r = score(hist, DAY, 10.0, BaselineConfig())
    assert r.status is BaselineStatus.INSUFFICIENT and not r.is_anomaly and r.points == 2
    assert score({}, DAY, 10.0, DOD).status is BaselineStatus.INSUFFICIENT


def test_flat_series_floor_stops_trivial_alarms():
    hist = {DAY - timedelta(days=k): 500.0 for k in range(1, 60)}
    assert score(hist, DAY, 500.2, DOD).status is BaselineStatus.OK
    assert score(hist, DAY, 0.0, DOD).status is BaselineStatus.ANOMALY


def test_the_night_after_an_incident_is_compared_with_the_last_good_night():
    hist = _stock()
    yesterday = DAY - timedelta(days=1)
    bad = {**hist, yesterday: hist[yesterday] * 1.25}  # a duplicated load inflated yesterday
    recovered = hist[yesterday] * 1.001
    # Yesterday left in: the recovery looks like a 20% drop.
    assert score(bad, DAY, recovered, DOD, hurts=Direction.DOWN).status is BaselineStatus.ANOMALY
    # Yesterday excluded as an incident day: compared with the day before, all is well.
    ok = score(bad, DAY, recovered, DOD, hurts=Direction.DOWN, excluded_days={yesterday})
    assert ok.status is BaselineStatus.OK and ok.expected == pytest.approx(
        hist[DAY - timedelta(days=2)], rel=0.01
    )


def test_week_over_week_follows_a_trend_with_a_weekday_rhythm_and_bridges_a_flagged_week():
    """A level growing 1.5% a night with weekends at 60%: tonight is expected at its trend (a same-weekday
    median expects the level of weeks ago), a step is flagged, and a flagged week before is bridged."""
    hist = {d: v * 1.015 ** (70 - (DAY - d).days) for d, v in _seasonal().items()}
    trend = 1000 * 1.015**70
    wow = BaselineConfig(method=BaselineMethod.WEEK_OVER_WEEK)
    r = score(hist, DAY, trend, wow)
    # Last week's night and the weekly changes carry a 5% wobble.
    assert r.status is BaselineStatus.OK and r.expected == pytest.approx(trend, rel=0.1)
    same = score(hist, DAY, trend, BaselineConfig(weeks=8))
    assert same.expected < 0.8 * trend  # four weeks and more behind
    assert score(hist, DAY, 1.5 * trend, wow).status is BaselineStatus.ANOMALY
    bridged = score(hist, DAY, 1.5 * trend, wow, excluded_days={DAY - timedelta(weeks=1)})
    assert bridged.status is BaselineStatus.ANOMALY and (DAY - timedelta(weeks=2)) in hist
    # Neither of the last two weeks' same weekday: no judgement rather than an older level.
    gone = {DAY - timedelta(weeks=1), DAY - timedelta(weeks=2)}
    assert score(hist, DAY, trend, wow, excluded_days=gone).status is BaselineStatus.INSUFFICIENT


def _weekdays_only(
    moves_at_weekends: bool, days: int = 90, sd: float = 0.004, seed: int = 11
) -> dict[date, float]:
    """A stock recorded on weekdays only (its pipeline does not run at weekends), up to the Friday before
    ``MONDAY``: a level that moves every day (a random walk whose weekend steps add up by Monday) or only on
    business days (a business closed at weekends: Friday to Monday is one day's move)."""
    rng = random.Random(seed)
    out, v = {}, 1_000_000.0
    for k in range(days, 0, -1):
        d = MONDAY - timedelta(days=k)
        if d.weekday() < 5 or moves_at_weekends:
            v *= 1 + rng.gauss(0, sd)
        if d.weekday() < 5:
            out[d] = v
    return out


MONDAY = DAY - timedelta(days=1)


@pytest.mark.parametrize("calibrated", [False, True])
def test_a_monday_after_a_closed_weekend_reads_its_change_as_three_days_of_a_random_walk(calibrated):
    """Friday to Monday is three days, and the change per day was divided by three: a Monday fall of seven
    days' spread on a business closed at weekends (one day's move by Monday) went unseen. The change now
    carries a random walk's noise over three days (spread by the square root of three), so that fall is
    found, and a stock that moves at weekends too keeps its ordinary Mondays quiet."""
    from dw_dagster.checks.baseline import calibrate

    def judged(hist, value):
        cal = calibrate(hist, DOD, False, 0.005, Direction.DOWN) if calibrated else None
        return score(hist, MONDAY, value, DOD, hurts=Direction.DOWN, calibration=cal)

    closed = _weekdays_only(moves_at_weekends=False)
    friday = closed[MONDAY - timedelta(days=3)]
    fall = judged(closed, friday * (1 - 7 * 0.004))
    assert fall.status is BaselineStatus.ANOMALY, fall
    assert judged(closed, friday * (1 - 0.004)).status is BaselineStatus.OK

    walking = _weekdays_only(moves_at_weekends=True)
    friday = walking[MONDAY - timedelta(days=3)]
    # An ordinary Monday of a random walk: three days' steps of one spread each, the usual size by Monday.
    assert judged(walking, friday * (1 - 3**0.5 * 0.004)).status is BaselineStatus.OK
    assert judged(walking, friday * (1 - 10 * 0.004)).status is BaselineStatus.ANOMALY
