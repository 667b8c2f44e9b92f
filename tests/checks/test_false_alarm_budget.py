"""A table whose checks judge many series stays within its false-alarm rate on pure-noise history (seeded, no
fault anywhere): a table with its volume and three grouped totals, each with its rows by group, a carried
attribute and two keys of typical rows, shifts judged whenever the total holds within its own band. Two
shapes: bill payments by channel (weekdays busier, heavy-tailed amounts) and parcels by depot (every day
alike)."""

from __future__ import annotations

import importlib.util
import random
from datetime import date, timedelta
from pathlib import Path

from test_group_rows import CASES, NO_HOLIDAYS, _day
from test_row_values import _night as _typical_rows

from dw_dagster.checks.attributes import attribute_series
from dw_dagster.checks.baseline import BaselineConfig
from dw_dagster.checks.history import Reading, Recorded, group_rows_series, volume_series
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.recorded_totals import evaluate_total
from dw_dagster.checks.row_values import row_count_series, row_value_series
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue

ROOT = Path(__file__).resolve().parents[2]
ASSET = "mart/fct_table"
ATTRIBUTE = {"REGION=N": 0.4, "REGION=S": 0.35, "REGION=W": 0.25}
ITEMS = {f"ITEM=I{i}": w for i, w in enumerate([30, 20, 15, 10, 10, 5, 5, 5])}


def _bench():
    """``benchmarks/bench_false_alarms.py``: its simulated shop series is the table's row count."""
    spec = importlib.util.spec_from_file_location(
        "bench_false_alarms", ROOT / "benchmarks" / "bench_false_alarms.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _totals(shape: str, rate: float) -> list[RecordedTotal]:
    spec = CASES[shape][0]
    return [
        spec.model_copy(
            update={
                "name": f"{spec.name}_{i}",
                "asset": ASSET,
                "item_key": "ITEM",
                # No calendar: noise has no holidays, and the recurring-day learner is the slowest part.
                "baseline": spec.baseline.model_copy(update={"false_alarm_rate": rate, "calendar": False}),
            }
        )
        for i in range(3)
    ]


def _simulate(shape: str, seed: int, nights: int, rate: float):
    """Every series the table's checks read, night by night, pure noise; and its totals."""
    _, shares, count, sigma, _, _, weekend, _ = CASES[shape]
    bench = _bench()
    rng, start = random.Random(seed), bench.START
    totals = _totals(shape, rate)
    key = totals[0].group_keys[0]
    volume = bench.shop(seed, None, nights)
    past: dict[str, dict[date, Recorded]] = {volume_series(ASSET): {}}
    tonight: dict[date, dict[str, tuple]] = {}
    for k in range(nights):
        d = start + timedelta(days=k)
        past[volume_series(ASSET)][d] = Recorded(business_date=d, value=volume[d])
        level = count * (weekend if d.weekday() >= 5 else 1.0)
        tonight[d] = {}
        for t in totals:
            rows, values = _day(rng, shares, level, sigma)
            _, by_region = _day(rng, ATTRIBUTE, level, sigma)
            keyed = [
                _typical_rows(rng, "ITEM", {g.split("=")[1]: w for g, w in ITEMS.items()}, level, sigma, 4.0),
                _typical_rows(rng, key, {g.split("=")[1]: s for g, s in shares.items()}, level, sigma, 4.0),
            ]
            tonight[d][t.name] = (
                TotalValue(value=sum(values.values()), groups=values, rows=rows),
                by_region,
                keyed,
            )
            for series, value, groups in [
                (t.name, sum(values.values()), values),
                (
                    group_rows_series(t.name),
                    float(sum(rows.values())),
                    {g: float(n) for g, n in rows.items()},
                ),
                (attribute_series(t.name, "REGION"), sum(by_region.values()), by_region),
                *((row_value_series(t.name, rv.column), rv.value, dict(rv.typical)) for rv in keyed),
                *(
                    (row_count_series(t.name, rv.column), sum(rv.rows.values()), dict(rv.rows))
                    for rv in keyed
                ),
            ]:
                past.setdefault(series, {})[d] = Recorded(business_date=d, value=value, groups=groups)
    return totals, past, tonight


def false_alarms(shape: str, seeds: int, judged: int, rate: float) -> tuple[int, int]:
    """(false alarms, table-nights) over the last ``judged`` nights of ``seeds`` simulated tables."""
    alarms = table_nights = 0
    for seed in range(seeds):
        totals, past, tonight = _simulate(shape, seed, 70 + judged, rate)
        days = sorted(tonight)[-judged:]
        for day in days:
            before = {s: {d: r for d, r in h.items() if d < day} for s, h in past.items()}
            night = Night(
                context=None, run=CheckRun(day, "sim", None, None), warehouse=None, ops=None, history=None,
                cause_scopes={}, calendar=NO_HOLIDAYS, levels={}, incident_days=set(), past=before,
                reporter=lambda finding: None, shares={ASSET: 1 + len(totals)},
            )  # fmt: skip
            volume = past[volume_series(ASSET)]
            raised = (
                judge(
                    {d: r.value for d, r in before[volume_series(ASSET)].items()},
                    day,
                    volume[day].value,
                    BaselineConfig(weeks=6, min_relative_change=0.05, false_alarm_rate=rate, calendar=False),
                    calendar=NO_HOLIDAYS,
                    share=night.share(ASSET),
                ).severity
                == "ERROR"
            )
            for t in totals:
                value, by_region, keyed = tonight[day][t.name]
                for series, r in past.items():
                    if day in r and series != volume_series(ASSET):
                        night.record(series, Reading(value=r[day].value, groups=r[day].groups))
                result = evaluate_total(
                    night,
                    t,
                    {t.name: value},
                    {(t.name, "REGION"): (sum(by_region.values()), by_region)},
                    keyed,
                )
                raised += not result.passed and result.severity.value == "ERROR"
            alarms += raised
            table_nights += 1
    return alarms, table_nights


def test_a_table_of_many_judged_series_raises_at_its_rate_on_noise():
    # At 3 false alarms per 100 table-nights (the rate is a setting; at the default 0.5 a few seconds of nights
    # would show nothing either way): the table's volume and three totals, each check judging its total and
    # four families (its groups, its rows by group, an attribute, its typical rows by two keys), over 60
    # nights of noise: 0 (payments) and 1 (parcels), a shift between groups. Over 180 nights of each, 2 and 4
    # (main, shifts judged only while the total moved less than its minimum change: 1 and 4). At 10 per 100
    # both raise about 15 per 100, mostly shifts: their candidates are named at the table's rate when it is
    # above 2 per 100. Splitting the rate between the families (each family's series at its part) raised 1
    # and 1 of 60 at 10 per 100, but its loss gate missed a biller network remapped (billpay: a third of the
    # network's money moved, z -4.3 against 5.6), and the tail of a short record read at a split share hid a
    # carried attribute's value that fell 46% (adspend); at the default rate main was already within it
    # (9 and 10 of 2,000 table-nights).
    rate, nights = 0.03, 60
    for shape in ("payments", "parcels"):
        alarms, table_nights = false_alarms(shape, 1, nights, rate)
        assert table_nights == nights
        assert alarms <= rate * table_nights, (shape, alarms)
