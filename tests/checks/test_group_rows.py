"""A grouped total's rows judged group by group: half of one group's rows lost (a partial load of one
partition) is found by its rows while its heavy-tailed value hides it; ordinary nights and a new group taking
rows raise nothing. Two shapes: bill payments by channel (weekday, heavy-tailed amounts) and parcels by depot
(every day, a depot opening)."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.groups import judge_groups
from dw_dagster.checks.history import Recorded, group_rows_series
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.recorded_totals import rows_by_group
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue

NO_HOLIDAYS = BusinessCalendar.model_validate({"holidays": []})


def _total(name: str, key: str, hurts: str, min_change: float) -> RecordedTotal:
    return RecordedTotal.model_validate(
        {
            "name": name,
            "owner": "ops",
            "asset": f"mart/{name}",
            "sql": f'SELECT "{key}", SUM("AMOUNT") AS "VALUE", COUNT(*) AS "ROWS" FROM t GROUP BY 1',
            "group_keys": [key],
            "hurts": hurts,
            "baseline": {"weeks": 6, "min_relative_change": min_change},
        }
    )


PAYMENTS = _total("payments", "CHANNEL", "both", 0.2)
PARCELS = _total("parcels", "DEPOT", "down", 0.1)


def _day(rng: random.Random, shares: dict[str, float], count: float, sigma: float) -> tuple[dict, dict]:
    """One night's rows and value by group: Poisson-like counts, lognormal amounts of spread ``sigma``."""
    rows, value = {}, {}
    for g, s in shares.items():
        n = max(1, round(rng.gauss(count * s, math.sqrt(count * s))))
        rows[g] = n
        # The sum of n lognormal amounts, drawn as a lognormal of the same mean and spread.
        cv = math.sqrt(math.expm1(sigma**2) / n)
        value[g] = 100 * n * rng.lognormvariate(-0.5 * math.log1p(cv**2), math.sqrt(math.log1p(cv**2)))
    return rows, value


def _history(shares, count, sigma, start: date, day: date, weekend: float, seed: int):
    rng, rows, values, d = random.Random(seed), {}, {}, start
    while d < day:
        level = count * (weekend if d.weekday() >= 5 else 1.0)
        r, v = _day(rng, shares, level, sigma)
        rows[d] = Recorded(
            business_date=d, value=float(sum(r.values())), groups={g: float(n) for g, n in r.items()}
        )
        values[d] = Recorded(business_date=d, value=sum(v.values()), groups=v)
        d += timedelta(days=1)
    return rows, values, rng


def _night(total: RecordedTotal, day: date, rows, values) -> Night:
    return Night(
        context=None, run=CheckRun(day, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=NO_HOLIDAYS, levels={}, incident_days=set(),
        past={total.name: values, group_rows_series(total.name): rows}, reporter=None, shares={total.asset: 2},
    )  # fmt: skip


CASES = {
    # Payments by channel from 27 April: amounts so heavy-tailed that a channel's dollars move 40% on their own.
    "payments": (PAYMENTS, {"CHANNEL=mobile": 0.46, "CHANNEL=web": 0.26, "CHANNEL=branch": 0.14, "CHANNEL=phone": 0.14},
                 1400, 1.4, date(2026, 4, 27), date(2026, 6, 23), 0.5, "CHANNEL=mobile"),
    # Parcels by depot every day: one depot's scanner feed stops at midday.
    "parcels": (PARCELS, {"DEPOT=LYS": 0.3, "DEPOT=MRS": 0.25, "DEPOT=TLS": 0.25, "DEPOT=NTE": 0.2},
                900, 0.6, date(2025, 3, 3), date(2025, 4, 29), 1.0, "DEPOT=TLS"),
}  # fmt: skip


def test_a_group_that_lost_half_its_rows_is_found_by_its_rows():
    for name, (total, shares, count, sigma, start, day, weekend, lost) in CASES.items():
        for seed in range(3):
            rows, values, rng = _history(shares, count, sigma, start, day, weekend, seed)
            r, v = _day(rng, shares, count, sigma)
            # An ordinary night: nothing.
            tonight = TotalValue(value=sum(v.values()), groups=v, rows=r)
            quiet, _ = rows_by_group(_night(total, day, rows, values), total, tonight, set())
            assert quiet is not None and quiet.problem is None, (name, seed, quiet.problem)
            r[lost] //= 2
            v[lost] /= 2
            partial = TotalValue(value=sum(v.values()), groups=v, rows=r)
            found, judged = rows_by_group(_night(total, day, rows, values), total, partial, set())
            # Half of one group's rows never landed: the rows say which group (fell alone while the rest held,
            # or the table's rows fell beyond their record and the fall is in that group).
            assert found is not None and found.problem and lost in found.problem, (name, seed, found)
            assert found.moves[0].group == lost and found.moves[0].status == "lost"
            assert judged is not None and judged.result.value == sum(r.values())
        # The value alone, judged as the checks always have, does not see it on the heavy-tailed payments.
        if name == "payments":
            flat = judge(
                {d: x.value for d, x in values.items()}, day, partial.value, total.baseline, total.hurts
            )
            by_value = judge_groups(total, day, partial.value, partial.groups, values, flat,
                                    calendar=NO_HOLIDAYS, excluded_days=set(), rebases={})  # fmt: skip
            assert by_value.problem is None, by_value.problem


def test_a_new_group_taking_rows_and_a_total_without_rows_raise_nothing():
    total, shares, count, sigma, start, day, weekend, _ = CASES["parcels"]
    rows, values, rng = _history(shares, count, sigma, start, day, weekend, 7)
    r, v = _day(rng, {**shares, "DEPOT=BOD": 0.15}, count * 1.0, sigma)  # a depot opened tonight
    r["DEPOT=LYS"] = round(r["DEPOT=LYS"] * 0.6)  # its parcels came from Lyon's round
    opened, _ = rows_by_group(
        _night(total, day, rows, values), total, TotalValue(value=sum(v.values()), groups=v, rows=r), set()
    )
    assert opened is not None and opened.problem is None, opened.problem
    assert any(m.status == "new" and m.group == "DEPOT=BOD" for m in opened.moves)
    # No ROWS in the total's SQL, or none on record: nothing to judge.
    assert rows_by_group(_night(total, day, rows, values), total, TotalValue(value=1.0, groups=v), set()) == (
        None,
        None,
    )
    assert rows_by_group(
        _night(total, day, {}, values), total, TotalValue(value=1.0, groups=v, rows=r), set()
    ) == (None, None)
