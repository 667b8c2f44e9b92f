"""A total with a group that is negative every night (a net export of solar meters in net metering, refunds
in net takings): the group is judged from its own side of zero. Gone (no rows) or turned positive while the
total holds, it is a finding; a usually positive group turned negative is said to have changed sign, not to
have gone to nothing; ordinary nights raise nothing. Two shapes: net kWh by tariff class, net takings by
transaction type. Before, every past night of a negative group counted as "nothing", so its absence or its
flip was excused as usual."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

import dagster as dg
import pytest
from draws import poisson

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.history import Reading, Recorded, group_rows_series
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.recorded_totals import evaluate_total
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue

EVERY_DAY = BusinessCalendar.model_validate(
    {"business_days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "holidays": []}
)
TONIGHT = date(2026, 3, 18)  # a Wednesday


# Each group: rows a night (Poisson) and a row's typical value (log-normal, sigma 0.5, with its sign).
SHAPES = {
    "net kWh by tariff class": (
        "TARIFF_CLASS", {"RES": (60, 12.0), "COM": (30, 40.0), "AGRI": (25, 18.0), "SOLAR_NET": (25, -18.0)},
        "SOLAR_NET", "AGRI",
    ),
    "net takings by transaction type": (
        "TXN_TYPE", {"SALE": (120, 25.0), "VOUCHER": (30, 15.0), "REFUND": (20, -22.0), "FEE": (40, 9.0)},
        "REFUND", "VOUCHER",
    ),
}  # fmt: skip


def _night(rng: random.Random, key: str, groups, fault: tuple[str, str] | None, extra=None, added=None):
    """``extra``: groups replaced or new tonight; ``added``: rows added to a group tonight (a count, a value)."""
    values, rows = {}, {}
    for g, (n, typical) in {**groups, **(extra or {})}.items():
        k = poisson(rng, n)
        amounts = [math.copysign(abs(typical) * rng.lognormvariate(0, 0.5), typical) for _ in range(k)]
        amounts += [(added or {}).get(g, (0, 0.0))[1]] * (added or {}).get(g, (0, 0.0))[0]
        if fault and fault[0] == g:
            amounts = [] if fault[1] == "gone" else [-a for a in amounts]
        if amounts or not fault or fault[0] != g:
            values[f"{key}={g}"] = sum(amounts)
            rows[f"{key}={g}"] = len(amounts)
    return values, rows


def _checked(
    shape: str,
    seed: int,
    fault: tuple[str, str] | None,
    *,
    extra=None,
    groups=None,
    with_rows=True,
    added=None,
):
    """``extra``: groups new tonight; ``groups``: the shape's groups replaced."""
    key, usual, _, _ = SHAPES[shape]
    groups = groups or usual
    rng = random.Random(seed)
    total = RecordedTotal.model_validate(
        {"name": "net", "owner": "o", "asset": "core/fct", "sql": "SELECT 1 AS VALUE", "group_keys": [key],
         "hurts": "both", "baseline": {"method": "same_weekday", "weeks": 6}}
    )  # fmt: skip
    values, rows = {}, {}
    d = TONIGHT - timedelta(days=56)
    while d < TONIGHT:
        v, r = _night(rng, key, groups, None)
        values[d] = Recorded(business_date=d, value=sum(v.values()), groups=v)
        rows[d] = Recorded(business_date=d, value=sum(r.values()), groups=r)
        d += timedelta(days=1)
    v, r = _night(rng, key, groups, fault, extra, added)
    value = TotalValue(value=sum(v.values()), groups=v, rows=r if with_rows else {})
    night = Night(
        context=None, run=CheckRun(TONIGHT, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=EVERY_DAY, levels={}, incident_days=set(),
        past={total.name: values, **({group_rows_series(total.name): rows} if with_rows else {})},
        reporter=lambda finding: None, shares={total.asset: 2},
    )  # fmt: skip
    night.record(total.name, Reading(value=value.value, groups=value.groups))
    return evaluate_total(night, total, {total.name: value})


def _error(result) -> str:
    return result.description if not result.passed and result.severity == dg.AssetCheckSeverity.ERROR else ""


@pytest.mark.parametrize("shape", SHAPES)
def test_a_negative_group_gone_or_turned_positive_is_a_finding(shape):
    key, _, negative, _ = SHAPES[shape]
    for seed in range(8):
        gone = _error(_checked(shape, seed, (negative, "gone")))
        assert f"{key}={negative} (" in gone and "went to nothing" in gone, (seed, gone)
        flipped = _error(_checked(shape, seed, (negative, "flipped")))
        assert f"{key}={negative} (" in flipped and "changed sign" in flipped, (seed, flipped)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_positive_group_turned_negative_changed_sign_and_ordinary_nights_raise_nothing(shape):
    key, _, _, positive = SHAPES[shape]
    for seed in range(8):
        flipped = _error(_checked(shape, seed, (positive, "flipped")))
        # Named: where the total moved with it, by the total; where another group's noise moved the other way,
        # as a shift; otherwise as a change of sign.
        assert f"{key}={positive} (" in flipped and "went to nothing" not in flipped, (seed, flipped)
        assert any(w in flipped for w in ("changed sign", "net = ", "a shift between groups")), (
            seed,
            flipped,
        )
        assert _error(_checked(shape, seed, None)) == "", seed


@pytest.mark.parametrize("shape", SHAPES)
def test_a_negative_group_gone_on_the_night_a_new_key_opens_is_still_a_finding(shape):
    """A new key's positive value is not where a negative group's value went: the groups' value moved the same
    way. Without rows counted, the value alone must say so."""
    key, _, negative, _ = SHAPES[shape]
    found = 0
    for seed in range(8):
        gone = _error(
            _checked(shape, seed, (negative, "gone"), extra={"NEW_KEY": (5, 25.0)}, with_rows=False)
        )
        found += f"{key}={negative} (" in gone
    assert found >= 4, found


def test_a_small_catch_all_just_below_zero_that_gains_a_new_key_raises_nothing():
    """A group of a few write-offs (about -24 a night, below 1% of the total) into which a new store's sales
    are mapped: a gain, as for any group, not a change of sign."""
    shape = "net takings by transaction type"
    groups = {"SALE": (120, 25.0), "VOUCHER": (30, 15.0), "FEE": (40, 9.0), "OTHER": (6, -4.0)}
    for seed in range(8):
        result = _checked(shape, seed, None, groups=groups, extra=None)
        assert _error(result) == "", seed
    for seed in range(8):
        gained = _checked(shape, seed, None, groups=groups, extra={"OTHER": (10, 25.0)})
        assert "changed sign" not in _error(gained), (seed, gained.description)
    # A key of two or three rows added to it (a reversed write-off, a small new store): its rows stay within
    # their record and its value within a few times its size, yet it gained; no side of zero is read from it.
    for seed in range(16):
        for added in ((2, 25.0), (3, 20.0), (1, 60.0)):
            small = _checked(shape, seed, None, groups=groups, added={"OTHER": added})
            assert "changed sign" not in _error(small), (seed, added, small.description)
