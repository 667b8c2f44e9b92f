"""A group that went to nothing on a night its history learned to be unusual (a month-end several times an
ordinary night) is judged on its absence, as on any night: against its own nights of tonight's kind, on which
it was never absent. Its share of a heavy-tailed value (a few large amounts among many small ones) spreads
too widely for its fall to be told from noise, so the share's record must not excuse an absence. Two shapes:
write-offs by site (a weekday business, a month-end at fifteen times an ordinary night) and takings by region
(open every day, a month-end at four times). A group that is often absent on such nights, and a month-end
with every group present, raise nothing."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest
from draws import poisson
from test_calendar_learned import NO_CALENDAR, SHOP_DAYS

from dw_dagster.checks.groups import judge_groups
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import RecordedTotal

START = date(2025, 8, 4)  # a Monday


class Shape:
    def __init__(self, key, groups, rows, weekend, month_end, calendar, tonight, sparse=None):
        self.key, self.groups, self.rows, self.weekend = key, groups, rows, weekend
        self.month_end, self.calendar, self.tonight, self.sparse = month_end, calendar, tonight, sparse

    def total(self) -> RecordedTotal:
        return RecordedTotal.model_validate(
            {"name": "day_amount", "owner": "o", "asset": "core/fct", "sql": "SELECT 1 AS VALUE",
             "group_keys": [self.key], "hurts": "both",
             "baseline": {"method": "same_weekday", "weeks": 6, "min_relative_change": 0.3}}
        )  # fmt: skip

    def night(self, rng: random.Random, d: date, gone: str | None = None) -> dict[str, float]:
        """Each group's amount: its rows (Poisson) of heavy-tailed amounts (log-normal, sigma 1.3)."""
        factor = self.month_end if self.calendar.business_days_left(d, False) == 0 else 1.0
        if not self.calendar.is_business_day(d) and d.weekday() >= 5:
            factor *= self.weekend
        out = {}
        for g in self.groups:
            if g == gone or (g == self.sparse and rng.random() < 0.5):
                continue
            n = poisson(rng, self.rows * factor / len(self.groups))
            out[f"{self.key}={g}"] = sum(rng.lognormvariate(3.5, 1.3) for _ in range(n))
        return out


SHAPES = {
    # 28 November 2025, a Friday: November's last business day, not its last day.
    "write-offs by site": Shape(
        "SITE_ID", ["1", "2", "3", "4", "5", "6"], 40, 0.25, 15, NO_CALENDAR, date(2025, 11, 28)
    ),
    "takings by region": Shape(
        "REGION", ["N", "S", "E", "W", "C"], 60, 1.0, 4, SHOP_DAYS, date(2025, 11, 30)
    ),
}


def _judged(shape: Shape, seed: int, gone: str | None):
    rng = random.Random(seed)
    own = {}
    d = START
    while d < shape.tonight:
        groups = shape.night(rng, d)
        own[d] = Recorded(business_date=d, value=sum(groups.values()), groups=groups)
        d += timedelta(days=1)
    groups = shape.night(rng, shape.tonight, gone=gone)
    value = sum(groups.values())
    total = shape.total()
    verdict = judge({d: r.value for d, r in own.items()}, shape.tonight, value, total.baseline, total.hurts,
                    calendar=shape.calendar)  # fmt: skip
    found = judge_groups(total, shape.tonight, value, groups, own, verdict, calendar=shape.calendar,
                         excluded_days=set(), rebases={})  # fmt: skip
    return verdict, found


@pytest.mark.parametrize("shape", SHAPES)
def test_a_group_gone_on_a_learned_month_end_is_a_finding(shape):
    s = SHAPES[shape]
    caught = []
    for seed in range(10):
        verdict, found = _judged(s, seed, gone=s.groups[2])
        assert verdict.calendar_day is not None, verdict.describe()
        caught.append(found.problem is not None and f"{s.key}={s.groups[2]}" in found.problem)
    assert all(caught), caught


@pytest.mark.parametrize("shape", SHAPES)
def test_a_month_end_with_every_group_or_a_sparse_one_absent_raises_nothing(shape):
    s = SHAPES[shape]
    sparse = Shape(s.key, s.groups, s.rows, s.weekend, s.month_end, s.calendar, s.tonight, sparse=s.groups[1])
    for seed in range(10):
        assert _judged(s, seed, gone=None)[1].problem is None
        verdict, found = _judged(sparse, seed, gone=s.groups[1])
        assert found.problem is None, found.problem
