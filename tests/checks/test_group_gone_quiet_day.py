"""A group of a few rows a night that has none on a day the whole table is quiet (a business day between
Christmas and New Year at two fifths of an ordinary one) went to nothing by chance: its rows' expectation is
tonight's share of the day's level, not an ordinary night's. A group gone while the table's rows held is still
a finding. Two shapes: sites' write-offs under a US calendar on 26 December, regions' takings under an English
calendar on 29 December; rows counted (the total's SQL returns ``ROWS``)."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest
from draws import poisson

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.groups import judge_groups
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal

START = date(2025, 3, 3)


def _calendar(country: str, subdivision: str | None = None) -> BusinessCalendar:
    holiday = {"country": country, **({"subdivision": subdivision} if subdivision else {})}
    return MetricsFile.model_validate({"calendar": {"holidays": [holiday]}}).calendar


SHAPES = {
    "write-offs by site, US": ("SITE", 6, 40, _calendar("US"), date(2025, 12, 26)),
    "takings by region, England": ("REGION", 5, 45, _calendar("GB", "ENG"), date(2025, 12, 29)),
}
QUIET = 0.4  # the holiday period's business days, against an ordinary one


def _factor(calendar: BusinessCalendar, d: date) -> float:
    if not calendar.is_business_day(d):
        return 0.25
    kind = calendar.day(d)
    return QUIET if kind is not None and kind.kind == "holiday_period" else 1.0


def _night(rng: random.Random, shape, d: date, gone: str | None = None) -> tuple[dict, dict]:
    key, groups, rows, calendar, _ = shape
    values, counts = {}, {}
    for g in range(1, groups + 1):
        label = f"{key}={g}"
        n = 0 if label == gone else poisson(rng, rows * _factor(calendar, d) / groups)
        if n:
            values[label] = sum(rng.lognormvariate(3.5, 1.3) for _ in range(n))
            counts[label] = float(n)
    return values, counts


def _judged(shape, seed: int, gone: str | None = None):
    key, _, _, calendar, tonight = shape
    rng = random.Random(seed)
    own, rows = {}, {}
    d = START
    while d < tonight:
        values, counts = _night(rng, shape, d)
        own[d] = Recorded(business_date=d, value=sum(values.values()), groups=values)
        rows[d] = Recorded(business_date=d, value=sum(counts.values()), groups=counts)
        d += timedelta(days=1)
    values, counts = _night(rng, shape, tonight, gone)
    total = RecordedTotal.model_validate(
        {"name": "day_amount", "owner": "o", "asset": "core/fct", "sql": "SELECT 1 AS VALUE", "group_keys": [key],
         "hurts": "both", "baseline": {"method": "same_weekday", "weeks": 6, "min_relative_change": 0.3}}
    )  # fmt: skip
    out = []
    for series, tonight_groups in ((own, values), (rows, counts)):
        value = sum(tonight_groups.values())
        verdict = judge({k: r.value for k, r in series.items()}, tonight, value, total.baseline, total.hurts,
                        calendar=calendar)  # fmt: skip
        out.append(judge_groups(total, tonight, value, tonight_groups, series, verdict, calendar=calendar,
                                excluded_days=set(), rebases={}, rows=rows,
                                rows_tonight=sum(counts.values())))  # fmt: skip
    return out


@pytest.mark.parametrize("shape", SHAPES)
def test_a_small_group_with_no_rows_on_a_quiet_day_went_to_nothing_by_chance(shape):
    """By the value (its rows counted beside it) and by the rows. A shift between two such groups (one large
    amount against another's few) is another question, left open (docs/watch.md)."""
    gone = [
        found.problem
        for seed in range(20)
        for found in _judged(SHAPES[shape], seed)
        if found.problem is not None and "went to nothing" in found.problem
    ]
    assert gone == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_larger_group_gone_on_an_ordinary_day_is_still_a_finding(shape):
    key, groups, rows, calendar, tonight = SHAPES[shape]
    ordinary = (key, groups, rows * 4, calendar, tonight - timedelta(days=14))
    assert calendar.day(ordinary[4]) is None and calendar.is_business_day(ordinary[4])
    for seed in range(5):
        found = _judged(ordinary, seed, gone=f"{key}=2")
        assert any(f.problem and f"{key}=2" in f.problem for f in found), [f.problem for f in found]
