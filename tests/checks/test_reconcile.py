"""Reconciliation of a target that keeps a steady share of its source (a status filter, billing that leaves out
estimated readings): the share holds at any volume, a real drop still fails, and a gap of fixed units is
still judged as one. Two shapes: completed orders against all orders (in total and by channel), billed
energy against metered energy by region."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import Reconciliation
from dw_dagster.checks.reconcile import reconcile
from dw_dagster.checks.total_value import TotalValue

DAY = date(2026, 3, 12)
RULE = Reconciliation(total="source", tolerance_pct=0.1)

# name: (the source's groups on an ordinary night, the share of each the target keeps)
SHAPES = {
    "orders": ({"CHANNEL=web": 52_000.0, "CHANNEL=app": 31_000.0, "CHANNEL=store": 9_000.0}, 0.8),
    "meters": ({"REGION=North": 410_000.0, "REGION=South": 380_000.0, "REGION=East": 120_000.0}, 0.95),
}


def _night(source: dict[str, float], keep: float, volume: float, rng: random.Random) -> tuple[dict, dict]:
    s = {g: v * volume for g, v in source.items()}
    # The kept share wobbles by a few hundredths of a point from night to night, as a real filter's does.
    t = {g: v * keep * (1 + rng.gauss(0, 0.0002)) for g, v in s.items()}
    return s, t


def _history(source: dict[str, float], keep: float) -> tuple[dict, dict]:
    rng = random.Random(7)
    hist_s, hist_t = {}, {}
    for k in range(1, 8):
        d = DAY - timedelta(days=k)
        s, t = _night(source, keep, 1 + 0.15 * rng.uniform(-1, 1), rng)
        hist_s[d] = Recorded(business_date=d, value=sum(s.values()), groups=s)
        hist_t[d] = Recorded(business_date=d, value=sum(t.values()), groups=t)
    return hist_s, hist_t


def _values(groups: dict[str, float]) -> TotalValue:
    return TotalValue(value=sum(groups.values()), groups=groups)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_steady_share_holds_on_a_high_volume_night_and_a_real_drop_still_fails(shape):
    source, keep = SHAPES[shape]
    hist_s, hist_t = _history(source, keep)
    # Twice the usual volume (a sale, a cold snap): the target keeps its share.
    s, t = _night(source, keep, 2.0, random.Random(11))
    rec = reconcile(DAY, _values(t), _values(s), hist_t, hist_s, RULE)
    assert rec.passed, (rec.gap_change, rec.tolerance, rec.groups[:1])
    assert abs(rec.gap_change) <= rec.tolerance
    # A quiet night too.
    s, t = _night(source, keep, 0.5, random.Random(12))
    assert reconcile(DAY, _values(t), _values(s), hist_t, hist_s, RULE).passed
    # The same high-volume night with 2% of one group's target rows gone fails, naming that group.
    s, t = _night(source, keep, 2.0, random.Random(11))
    hit = list(source)[1]
    lost = t[hit] * 0.02
    t[hit] -= lost
    rec = reconcile(DAY, _values(t), _values(s), hist_t, hist_s, RULE)
    assert not rec.passed
    assert rec.gap_change == pytest.approx(lost, rel=0.1)
    assert rec.groups[0].group == hit and rec.groups[0].gap_change == pytest.approx(lost, rel=0.1)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_gap_of_fixed_units_is_judged_as_fixed_units(shape):
    # The target leaves out the same 500 units of one group every night (a test account), whatever the volume.
    source, _ = SHAPES[shape]
    rng = random.Random(3)
    first = list(source)[0]
    hist_s, hist_t = {}, {}
    for k in range(1, 8):
        d = DAY - timedelta(days=k)
        s = {g: v * (1 + 0.15 * rng.uniform(-1, 1)) for g, v in source.items()}
        t = {**s, first: s[first] - 500}
        hist_s[d] = Recorded(business_date=d, value=sum(s.values()), groups=s)
        hist_t[d] = Recorded(business_date=d, value=sum(t.values()), groups=t)
    s = {g: v * 2 for g, v in source.items()}
    assert reconcile(DAY, _values({**s, first: s[first] - 500}), _values(s), hist_t, hist_s, RULE).passed
    rec = reconcile(
        DAY, _values({**s, first: s[first] - 500 - 0.01 * s[first]}), _values(s), hist_t, hist_s, RULE
    )
    assert not rec.passed and rec.groups[0].group == first
