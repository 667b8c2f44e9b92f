"""A business open every day, one of whose groups closes for a public holiday (an industrial segment, a
branch of offices), met the first weekday holiday on its record: the group went to nothing while the total
held. Its record has no night to tell a closure from a lost partition, so the check is a WARN naming the
group, never an ERROR; the night stays in the history and the next holiday is judged against it. Two shapes:
readings by tariff class on a South African Heritage Day (the other classes 20% lower), and takings by region
on Portugal's Republic Day (the others 10% lower, a weekend holiday, Assumption on a Saturday, on record).
Guards: the same group gone on an ordinary weekday is an ERROR, and so is a group gone on a holiday when it
traded on an earlier weekday holiday on its record."""

from __future__ import annotations

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

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


class Shape:
    def __init__(self, country, key, rows, closed, dip, holiday, ordinary, history_days):
        self.calendar = BusinessCalendar.model_validate(
            {"business_days": EVERY_DAY, "holidays": [{"country": country}]}
        )
        self.key, self.rows, self.closed, self.dip = key, rows, closed, dip
        self.holiday, self.ordinary, self.history_days = holiday, ordinary, history_days

    def total(self) -> RecordedTotal:
        return RecordedTotal.model_validate(
            {"name": "amount", "owner": "o", "asset": "core/fct", "sql": "SELECT 1 AS VALUE",
             "group_keys": [self.key], "hurts": "both", "baseline": {"method": "same_weekday", "weeks": 6}}
        )  # fmt: skip

    def night(self, rng: random.Random, d: date, gone: str | None, trades_on_holidays: bool):
        """Each group's rows (Poisson) and amount (heavy-tailed: log-normal, sigma 1.3). The closed group
        trades on a holiday that falls on a weekend, as on any weekend."""
        holiday = self.calendar.holiday(d) is not None
        values, rows = {}, {}
        for g, n in self.rows.items():
            closes = holiday and d.weekday() < 5 and not trades_on_holidays
            if g == gone or (g == self.closed and closes):
                continue
            k = poisson(rng, n * (self.dip if holiday else 1.0))
            values[f"{self.key}={g}"] = sum(rng.lognormvariate(3.5, 1.3) for _ in range(k))
            rows[f"{self.key}={g}"] = k
        return values, rows


SHAPES = {
    # Thursday 24 September 2026; Women's Day (observed Monday 10 August) is before the history starts.
    "readings by tariff class": Shape(
        "ZA", "TARIFF_CLASS", {"RES": 30, "COM": 30, "AGRI": 20, "MUNI": 20, "IND": 15}, "IND", 0.8,
        date(2026, 9, 24), date(2026, 9, 23), 40,
    ),
    # Monday 5 October 2026; Assumption (Saturday 15 August) is on record.
    "takings by region": Shape(
        "PT", "REGION", {"N": 20, "S": 20, "E": 20, "W": 20, "C": 20, "X": 8}, "X", 0.9,
        date(2026, 10, 5), date(2026, 9, 28), 60,
    ),
}  # fmt: skip


def _checked(shape: Shape, tonight: date, seed: int, *, earlier_holiday_traded: bool = False):
    """The total's check on ``tonight`` with the closed group gone, as the checks run evaluates it."""
    rng = random.Random(seed)
    total = shape.total()
    values, rows = {}, {}
    d = tonight - timedelta(days=shape.history_days)
    while d < tonight:
        v, r = shape.night(rng, d, None, trades_on_holidays=earlier_holiday_traded)
        values[d] = Recorded(business_date=d, value=sum(v.values()), groups=v)
        rows[d] = Recorded(business_date=d, value=sum(r.values()), groups=r)
        d += timedelta(days=1)
    v, r = shape.night(rng, tonight, shape.closed, trades_on_holidays=False)
    value = TotalValue(value=sum(v.values()), groups=v, rows=r)
    night = Night(
        context=None, run=CheckRun(tonight, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=shape.calendar, levels={}, incident_days=set(),
        past={total.name: values, group_rows_series(total.name): rows},
        reporter=lambda finding: None, shares={total.asset: 2},
    )  # fmt: skip
    night.record(total.name, Reading(value=value.value, groups=value.groups))
    return evaluate_total(night, total, {total.name: value})


@pytest.mark.parametrize("shape", SHAPES)
def test_a_group_closed_on_the_first_weekday_holiday_on_record_is_a_warn_naming_it(shape):
    s = SHAPES[shape]
    warned = []
    for seed in range(8):
        result = _checked(s, s.holiday, seed)
        assert result.passed or result.severity == dg.AssetCheckSeverity.WARN, (seed, result.description)
        # Not silent: the check says which group and why it cannot tell (where the group's own record held it
        # anyway, the check passes).
        warned.append(
            not result.passed
            and f"{s.key}={s.closed} went to nothing on" in result.description
            and "first weekday holiday on its record" in result.description
        )
    assert sum(warned) >= 6, warned


@pytest.mark.parametrize("shape", SHAPES)
def test_the_same_group_gone_on_an_ordinary_day_or_after_trading_on_a_holiday_is_an_error(shape):
    s = SHAPES[shape]
    for seed in range(8):
        ordinary = _checked(s, s.ordinary, seed)
        assert not ordinary.passed and ordinary.severity == dg.AssetCheckSeverity.ERROR, (
            seed,
            ordinary.description,
        )
        assert f"{s.key}={s.closed} (" in ordinary.description
    # With a history long enough to hold an earlier weekday holiday on which the group traded, its record
    # tells: gone tonight is a finding.
    traded = Shape(
        "ZA" if s.key == "TARIFF_CLASS" else "PT", s.key, s.rows, s.closed, s.dip, s.holiday, s.ordinary, 120
    )
    found = []
    for seed in range(8):
        result = _checked(traded, s.holiday, seed, earlier_holiday_traded=True)
        assert result.passed or result.severity == dg.AssetCheckSeverity.ERROR, (seed, result.description)
        found.append(not result.passed and f"{s.key}={s.closed} (" in result.description)
    # A heavy-tailed group's own holiday record is thin (one or two like nights): it may hold tonight.
    assert sum(found) >= 6, found


def test_a_group_gone_on_a_weekend_holiday_is_an_error_as_on_any_weekend():
    """German Unity Day on a Saturday (3 October 2026), a business open every day whose record holds no
    weekday holiday: the group trades on every weekend, so its absence on this one is told by its weekends."""
    s = Shape(
        "DE", "REGION", {"N": 20, "S": 20, "E": 20, "W": 20, "C": 20, "X": 20}, "X", 0.9,
        date(2026, 10, 3), date(2026, 9, 30), 120,
    )  # fmt: skip
    for seed in range(6):
        result = _checked(s, s.holiday, seed, earlier_holiday_traded=True)
        assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR, (
            seed,
            result.description,
        )
        assert "REGION=X (" in result.description and "first weekday holiday" not in result.description
