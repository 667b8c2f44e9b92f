"""A subset whose values of one column switched sign wholesale (``checks/signs.py``). Two shapes: a meter
model's export register read negative after a firmware update (net energy summed as import less export, the
model's other meters exporting nothing), and a channel's refunds posted positive (a payments total summing
amount less refunds). Neither moves its total or its group beyond their spread; the signs tell it. And what
is no flip: a column with both signs in a subset, a subset too new or too small, half a subset's rows, one
stray row of the old sign."""

from __future__ import annotations

import random
from datetime import date, timedelta

import dagster as dg
import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.history import Reading, Recorded
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.checks.recorded_totals import Totals, check_name, evaluate_total
from dw_dagster.checks.row_values import row_value_part
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.signs import (
    flipped,
    numeric_columns,
    signed_by,
    signs_groups,
    signs_series,
    summed_columns,
)
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.drilldown import from_finding
from dw_dagster.records.incidents import Finding

DAY = date(2026, 10, 29)
# name, asset, group key, the column that flips, the other column, {subset: (rows a night, non-zero rows of the
# flipping column, its sign)}.
SHAPES = {
    "meters": ("hes_net_energy", "raw/ami_reads", "METER_MODEL", "EXPORT_KWH", "IMPORT_KWH",
               {"LANDIS": (1350, 135, 1), "CONLOG": (1050, 105, 1), "HEXING": (600, 60, 1)}),
    "payments": ("net_takings", "raw/payments", "CHANNEL", "REFUND_AMOUNT", "AMOUNT",
                 {"web": (900, 40, -1), "store": (1500, 70, -1), "phone": (300, 12, -1)}),
}  # fmt: skip


def _groups(
    shape: str, subsets: dict, flip: str | None = None, keep: int = 0, extra=None
) -> dict[str, float]:
    """A night's signs series groups; ``flip``: the subset whose flipping column switched sign (``keep`` of
    its rows keeping the old one)."""
    _, _, key, column, other, _ = SHAPES[shape]
    out: dict[str, float] = {}
    for subset, (rows, nonzero, sign) in {**subsets, **(extra or {})}.items():
        label = f"{key}={subset}"
        flipped = nonzero - keep if subset == flip else 0
        counts = {column: {sign: nonzero - flipped, -sign: flipped}, other: {1: rows, -1: 0}}
        for c, by_sign in counts.items():
            for s, n in by_sign.items():
                mark = "<0" if s < 0 else ">0"
                if n:  # as recorded: a sign no row had is left out
                    out[f"{label} {c}{mark}"] = float(n)
                    out[f"{label} {c}{mark} sum"] = float(n) * 12.0 * s
    return out


def _check(shape: str, tonight: dict[str, float], *, history=None, nights: int = 20):
    name, asset, key, column, other, subsets = SHAPES[shape]
    total = RecordedTotal.model_validate(
        {"name": name, "owner": "ops", "asset": asset, "group_keys": [key], "sql": "SELECT 1 AS VALUE",
         "baseline": {"calendar": False, "method": "day_over_day"}}
    )  # fmt: skip
    rng = random.Random(3)
    own, signs = {}, {}
    for d in range(nights, 0, -1):
        day = DAY - timedelta(days=d)
        level = 10_000 * rng.uniform(0.97, 1.03)
        own[day] = Recorded(business_date=day, value=level, groups={f"{key}={s}": level / 3 for s in subsets})
        groups = history(day) if history else _groups(shape, subsets)
        signs[day] = Recorded(business_date=day, value=3000, groups=groups)
    found = []
    night = Night(
        context=None, run=CheckRun(DAY, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}), levels={},
        incident_days=set(), past={name: own, signs_series(name, key): signs}, reporter=found.append,
        shares={asset: 2},
    )  # fmt: skip
    value = TotalValue(value=10_000.0, groups={f"{key}={s}": 10_000 / 3 for s in subsets})
    night.record(name, Reading(value=value.value, groups=value.groups))
    night.record(signs_series(name, key), Reading(value=0.0, groups=tonight))  # as the checks record it first
    result = evaluate_total(night, total, {name: value}, signs={key: tonight}, signed=[other, column])
    return result, found


def _flipping(shape: str) -> str:
    subsets = SHAPES[shape][5]
    return min(subsets, key=lambda s: subsets[s][0])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_subsets_column_that_switched_sign_is_a_sign_change_named_by_the_subset(shape):
    name, _, key, column, _, subsets = SHAPES[shape]
    flip = _flipping(shape)
    result, (finding,) = _check(shape, _groups(shape, subsets, flip))
    assert result.passed is False and "a subset's values switched sign" in (result.description or "")
    assert f"{key}={flip}: {subsets[flip][1]} rows of {column}" in (result.description or "")
    found = finding.evidence["sign_flipped"]
    assert found["subset"] == f"{key}={flip}" and found["measure"] == column and found["factor"] == -1.0
    # Its usual value per row before, and tonight's, of opposite signs.
    assert found["before"] * found["after"] < 0
    # The diagnosis reads it as that subset's column times -1.
    moved = from_finding(finding, RecordedTotal.model_validate(
        {"name": name, "owner": "ops", "asset": "raw/x", "sql": "SELECT 1 AS VALUE"}))  # fmt: skip
    assert (
        moved is not None and moved.sign and (moved.column, moved.value, moved.measure) == (key, flip, column)
    )
    # One stray row of the old sign (a late row of yesterday's) does not hide it.
    assert not _check(shape, _groups(shape, subsets, flip, keep=1))[0].passed


@pytest.mark.parametrize("shape", SHAPES)
def test_what_is_no_flip_raises_nothing(shape):
    _, _, _, _, _, subsets = SHAPES[shape]
    flip = _flipping(shape)
    assert _check(shape, _groups(shape, subsets))[0].passed
    # Half its rows of the other sign: a subset that now takes both, not one that switched.
    assert _check(shape, _groups(shape, subsets, flip, keep=subsets[flip][1] // 2))[0].passed
    # A column that took both signs in the subset on the nights before (a meter importing and exporting by
    # turns, a refund beside a sale).
    mixed = lambda day: _groups(shape, subsets, flip, keep=subsets[flip][1] - 3)  # noqa: E731
    assert _check(shape, _groups(shape, subsets, flip), history=mixed)[0].passed
    # Too few nights on record, and a subset of too few non-zero rows.
    assert _check(shape, _groups(shape, subsets, flip), nights=10)[0].passed
    tiny = {"new": (50, 3, next(iter(subsets.values()))[2])}
    few = lambda day: _groups(shape, subsets, extra=tiny)  # noqa: E731
    assert _check(shape, _groups(shape, subsets, "new", extra=tiny), history=few)[0].passed


@pytest.mark.parametrize("shape", SHAPES)
def test_the_nights_statement_counts_and_sums_each_sign_by_subset(shape):
    name, _, key, column, other, subsets = SHAPES[shape]
    total = RecordedTotal.model_validate(
        {"name": name, "owner": "ops", "asset": "raw/x", "group_keys": [key],
         "sql": f'SELECT "{key}", SUM("{other}" - "{column}") AS "VALUE" FROM "DB"."RAW"."T" GROUP BY 1'}
    )  # fmt: skip
    # Read with the subset's typical row, of the same rows by the same key: its columns after the four.
    part = row_value_part(total, total.sql, key, more=signed_by([other, column]))
    assert part is not None and part.width == 4 + 8
    with fakesnow.patch():
        conn = snowflake.connector.connect(database="DB", schema="RAW", paramstyle="qmark")
        cur = conn.cursor()
        cur.execute('CREATE SCHEMA IF NOT EXISTS "DB"."RAW"')
        cur.execute(
            f'CREATE TABLE "DB"."RAW"."T" ("{key}" VARCHAR, "{other}" NUMBER(12,3), "{column}" NUMBER(12,3))'
        )
        rows = [("a", 9.5, 12.0), ("a", 4.0, 0.0), ("a", 3.0, -18.0), ("b", 7.0, None), ("b", 2.5, 0.0)]
        cur.executemany('INSERT INTO "DB"."RAW"."T" VALUES (?, ?, ?)', rows)
        rows = measure(cur, [part], Binds())[part.key]
        groups = signs_groups(key, [other, column], [(r[0], *r[4:]) for r in rows])
        conn.close()
    assert groups is not None
    assert groups[f"{key}=a {column}>0"] == 1 and groups[f"{key}=a {column}<0"] == 1
    assert groups[f"{key}=a {column}<0 sum"] == -18 and groups[f"{key}=a {column}>0 sum"] == 12
    # A sign no row of the subset had is left out.
    assert f"{key}=b {column}>0" not in groups and groups[f"{key}=b {other}>0"] == 2


def _two_keys(shape: str, flip_in_every: bool = False):
    """The flipping subset's rows read by a finer key too (each of its items)."""
    name, _, key, column, _, subsets = SHAPES[shape]
    flip = _flipping(shape)
    items = {
        f"{flip}-{i}": (subsets[flip][0] // 4, subsets[flip][1] // 4, subsets[flip][2]) for i in range(4)
    }
    return flip, items


@pytest.mark.parametrize("shape", SHAPES)
def test_the_coarsest_key_that_holds_the_flip_is_reported_and_a_flip_everywhere_is_none(shape):
    name, asset, key, column, other, subsets = SHAPES[shape]
    flip, items = _two_keys(shape)
    # The same rows read by the subset's items: four items flipped, against one subset.
    item_groups = {
        label.replace(f"{key}=", "ITEM="): v
        for label, v in _groups(shape, {**{k: v for k, v in subsets.items() if k != flip}, **items},
                                flip=None).items()
    }  # fmt: skip
    flipped_items = {
        label.replace(f"{key}=", "ITEM="): v
        for i in items
        for label, v in _groups(shape, {**{k: v for k, v in subsets.items() if k != flip}, **items}, flip=i).items()
        if label.startswith(f"{key}={i} ")
    }  # fmt: skip
    tonight_items = {**item_groups, **flipped_items}
    past = {DAY - timedelta(days=d): Recorded(business_date=DAY - timedelta(days=d), value=0, groups=g)
            for d in range(1, 21) for g in [_groups(shape, subsets)]}  # fmt: skip
    past_items = {d: Recorded(business_date=d, value=0, groups=item_groups) for d in past}
    total = RecordedTotal.model_validate(
        {"name": name, "owner": "ops", "asset": asset, "group_keys": [key], "sql": "SELECT 1 AS VALUE",
         "baseline": {"calendar": False, "method": "day_over_day"}}
    )  # fmt: skip
    own = {
        d: Recorded(business_date=d, value=10_000, groups={f"{key}={s}": 10_000 / 3 for s in subsets})
        for d in past
    }
    night = Night(
        context=None, run=CheckRun(DAY, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}), levels={}, incident_days=set(),
        past={name: own, signs_series(name, key): past, signs_series(name, "ITEM"): past_items},
        reporter=lambda f: None, shares={asset: 2},
    )  # fmt: skip
    value = TotalValue(value=10_000.0, groups={f"{key}={s}": 10_000 / 3 for s in subsets})
    tonight = {"ITEM": tonight_items, key: _groups(shape, subsets, flip)}
    for k, g in tonight.items():
        night.record(signs_series(name, k), Reading(value=0.0, groups=g))
    night.record(name, Reading(value=value.value, groups=value.groups))
    result = evaluate_total(night, total, {name: value}, signs=tonight, signed=[other, column])
    assert not result.passed and f"{key}={flip}:" in (result.description or "")
    assert "ITEM=" not in (result.description or "")
    # Every subset of the key switched: no subset's, the others did not hold (a whole column's sign is the
    # total's own to see).
    everywhere = _groups(shape, subsets)
    for subset in subsets:
        everywhere.update(
            {k: v for k, v in _groups(shape, subsets, subset).items() if k.startswith(f"{key}={subset} ")}
        )
        everywhere = {k: v for k, v in everywhere.items() if not (k.startswith(f"{key}={subset} {column}") and
                      k.split(" ", 1)[1].startswith(f"{column}{'>0' if subsets[subset][2] > 0 else '<0'}"))}  # fmt: skip
    assert flipped(key, [other, column], DAY, everywhere, past, 10_000.0) == []


def test_a_column_a_condition_reads_is_not_signed():
    sql = 'SELECT "C", SUM(IFF("DAYS_PAST_DUE" > 0, "PENALTY", 0) + "FEE") AS "VALUE" FROM "T" GROUP BY 1'
    assert sorted(summed_columns(sql)) == ["FEE", "PENALTY"]
    assert summed_columns('SELECT COUNT(*) AS "VALUE" FROM "T"') == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_subset_that_took_both_signs_in_the_window_and_a_persisting_flip(shape):
    name, _, key, column, other, subsets = SHAPES[shape]
    flip = _flipping(shape)
    # A month-end reversal three weeks ago: the subset takes either sign, never judged.
    reversal = DAY - timedelta(days=21)
    monthly = lambda day: _groups(shape, subsets, flip) if day == reversal else _groups(shape, subsets)  # noqa: E731
    assert _check(shape, _groups(shape, subsets, flip), history=monthly, nights=30)[0].passed
    # A flip that persists: the night it was raised is left out, and the next night is judged against the
    # nights before it, so the fault stays in view.
    past = {DAY - timedelta(days=d): Recorded(business_date=DAY - timedelta(days=d), value=0,
                                              groups=_groups(shape, subsets, flip if d == 1 else None))
            for d in range(1, 22)}  # fmt: skip
    tonight = _groups(shape, subsets, flip)
    assert flipped(key, [other, column], DAY, tonight, past, 10_000.0) == []
    (again,) = flipped(key, [other, column], DAY, tonight, past, 10_000.0, {DAY - timedelta(days=1)})
    assert again.subset == f"{key}={flip}"


def test_the_row_values_finding_keeps_the_summed_expression_as_its_measure():
    total = RecordedTotal.model_validate(
        {"name": "payments", "owner": "ops", "asset": "raw/x", "sql": "SELECT 1 AS VALUE"}
    )
    finding = Finding(check_name="total_payments", asset_key="raw/x", business_date=DAY, summary="moved",
                      cause_scope="job", evidence={"row_values_moved": {
                          "subset": "PAYEE_CODE=MTLTAX", "column": "PAYEE_CODE", "factor": 0.25, "rows": 86,
                          "before": 400.0, "after": 100.0}})  # fmt: skip
    moved = from_finding(finding, total)
    assert moved is not None and moved.measure == "" and moved.column == "PAYEE_CODE"


def test_the_totals_read_each_subsets_signs_with_its_typical_row_in_the_nights_statement():
    total = RecordedTotal.model_validate(
        {"name": "hes_net_energy", "owner": "ops", "asset": "raw/reads", "group_keys": ["METER_MODEL"],
         "sql": 'SELECT "METER_MODEL", SUM("IMPORT_KWH" - "EXPORT_KWH") AS "VALUE" FROM "DB"."RAW"."READS" GROUP BY 1'}
    )  # fmt: skip
    totals = Totals(MetricsFile.model_validate({"totals": [total.model_dump()]}), lambda loc, name: name,
                    [check_name(total)], signed={total.name: ["IMPORT_KWH", "EXPORT_KWH"]})  # fmt: skip
    assert [p.key for p in totals.parts()].count(("row_value", total.name, "METER_MODEL", "")) == 1
    assert signs_series(total.name, "METER_MODEL") in totals.series()
    with fakesnow.patch():
        conn = snowflake.connector.connect(database="DB", schema="RAW", paramstyle="qmark")
        cur = conn.cursor()
        cur.execute('CREATE SCHEMA IF NOT EXISTS "DB"."RAW"')
        cur.execute(
            'CREATE TABLE "DB"."RAW"."READS" ("METER_MODEL" VARCHAR, "IMPORT_KWH" FLOAT, "EXPORT_KWH" FLOAT)'
        )
        cur.executemany('INSERT INTO "DB"."RAW"."READS" VALUES (?, ?, ?)',
                        [("HEXING", 9.0, -12.0), ("HEXING", 4.0, 0.0), ("LANDIS", 7.5, 18.0)])  # fmt: skip
        totals.take(measure(cur, totals.parts(), Binds()), cur)
        conn.close()
    signs = totals.signs[total.name]["METER_MODEL"]
    assert signs["METER_MODEL=HEXING EXPORT_KWH<0"] == 1 and signs["METER_MODEL=LANDIS EXPORT_KWH>0"] == 1
    # And the typical row is read from the same rows as before.
    (rv,) = totals.row_values[total.name]
    assert rv.rows == {"METER_MODEL=HEXING": 2, "METER_MODEL=LANDIS": 1}


def test_every_numeric_type_of_snowflake_is_signed_and_no_other():
    types = {"A": "SMALLINT", "B": "BYTEINT", "C": "TINYINT", "D": "DECFLOAT", "E": "DEC(10,2)", "F": "NUMBER(38,0)",
             "G": "FLOAT8", "H": "VARCHAR", "I": "DATE", "J": "TIMESTAMP_NTZ"}  # fmt: skip
    schema = dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in types.items()])
    spec = dg.AssetSpec("raw/t", metadata={"dagster/table_name": "DB.RAW.T", "dagster/column_schema": schema})
    graph = LineageGraph([spec])
    assert numeric_columns(graph, "raw/t", list(types)) == list("ABCDEFG")
