"""A join key measured as an attribute (``attributes.carried_keys``) raises a shift when one of its values went
to nothing while another gained, the total holding: the rows that held the key were re-pointed upstream.
Its values moving by part (a new key mapped below one value takes a share from all the others) is the
business: nothing is raised. Two shapes: megabytes by region with the subscribers' plan id, amounts by
channel with the stores' district id."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest

from dw_dagster.checks.attributes import attribute_series
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.history import Reading, Recorded
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.recorded_totals import evaluate_total
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue

DAY = date(2026, 5, 20)
SHAPES = {
    "plans": ("usage_mb", "core/fct_usage", "REGION", ["N", "S", "W"], "PLAN_ID", {"11": 0.3, "12": 0.25, "13": 0.25, "15": 0.2}),
    "districts": ("sales", "core/fct_sales", "CHANNEL", ["web", "store"], "DISTRICT_ID", {"3": 0.35, "4": 0.2, "5": 0.25, "7": 0.2}),
}  # fmt: skip


def _split(rng: random.Random, level: float, shares: dict[str, float], label: str) -> dict[str, float]:
    return {f"{label}={k}": level * s * rng.uniform(0.97, 1.03) for k, s in shares.items()}


def _check(shape: str, tonight_keys: dict[str, float], keys: tuple[str, ...]):
    name, asset, group, groups, key, shares = SHAPES[shape]
    total = RecordedTotal.model_validate(
        {"name": name, "owner": "bi", "asset": asset, "group_keys": [group], "sql": "SELECT 1 AS VALUE",
         "baseline": {"calendar": False}}
    )  # fmt: skip
    rng = random.Random(7)
    own, by_key = {}, {}
    for d in range(1, 43):
        day = DAY - timedelta(days=d)
        level = 1000 * rng.uniform(0.95, 1.05)
        own[day] = Recorded(business_date=day, value=level, groups=_split(rng, level, dict.fromkeys(groups, 1 / len(groups)), group))  # fmt: skip
        keyed = _split(rng, level, shares, key)
        by_key[day] = Recorded(business_date=day, value=sum(keyed.values()), groups=keyed)
    series = attribute_series(name, key)
    night = Night(
        context=None, run=CheckRun(DAY, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}), levels={},
        incident_days=set(), past={name: own, series: by_key}, reporter=lambda finding: None, shares={asset: 2},
    )  # fmt: skip
    value = TotalValue(value=1000.0, groups={f"{group}={g}": 1000.0 / len(groups) for g in groups})
    night.record(name, Reading(value=value.value, groups=value.groups))
    keyed = {f"{key}={k}": v for k, v in tonight_keys.items()}
    night.record(series, Reading(value=sum(keyed.values()), groups=keyed))
    return evaluate_total(night, total, {name: value}, {(name, key): (sum(keyed.values()), keyed)}, keys=keys)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_key_that_went_to_another_is_a_shift(shape):
    _, _, _, _, key, shares = SHAPES[shape]
    gone, to = sorted(shares, key=lambda k: shares[k])[0], max(shares, key=lambda k: shares[k])
    moved = {k: 1000 * s for k, s in shares.items() if k != gone}
    moved[to] += 1000 * shares[gone]
    result = _check(shape, moved, (key,))
    assert not result.passed and "a shift between groups" in (result.description or "")
    assert f"lost {key}={gone}" in (result.description or "") and f"({key} is carried" in (
        result.description or ""
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_a_new_key_below_one_value_taking_a_share_from_all_raises_nothing(shape):
    # A new campaign of an existing advertiser, a new subscriber on an existing plan: 8% of every value's
    # units now go to the new key's value.
    _, _, _, _, key, shares = SHAPES[shape]
    to = min(shares, key=lambda k: shares[k])
    diluted = {k: 1000 * s * 0.92 for k, s in shares.items()}
    diluted[to] += 80
    assert _check(shape, diluted, (key,)).passed
