"""A subset whose per-row values moved by a common factor while the others held, whatever the factor: one
payee code's payments journalled at a quarter of their amount (within its heavy-tailed total's spread), one
campaign's spend x6.3 in another shape; ordinary nights, a common move and a subset new tonight raise nothing.
The night's part reads the typical row from the total's own SQL."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

import duckdb
import pytest

from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.row_values import (
    MAX_SUBSETS,
    SCALE,
    RowValues,
    as_one,
    judge_row_values,
    of_one,
    paired_part,
    row_value_part,
    take_row_values,
)


def _total(name: str, key: str, item: str | None, min_change: float) -> RecordedTotal:
    return RecordedTotal.model_validate(
        {
            "name": name,
            "owner": "ops",
            "asset": f"core/{name}",
            "sql": f'SELECT "{key}", SUM("AMOUNT") AS "VALUE", COUNT(*) AS "ROWS" FROM t GROUP BY "{key}"',
            "group_keys": [key],
            **({"item_key": item} if item else {}),
            "baseline": {"weeks": 6, "min_relative_change": min_change},
        }
    )


# Bill payments by payee code (weekdays busier; lognormal amounts of spread 1.4, a median of $110, every payee
# code alike); ad spend by campaign, every day alike (spread 0.8, uneven campaigns).
PAYMENTS = (
    _total("posted_payments", "CHANNEL", "PAYEE_CODE", 0.1),
    "PAYEE_CODE",
    dict(zip(["HQRES", "HQBUS", "ENERGIR", "VIDEOTRON", "BELLMOB", "BELLHOME", "MTLTAX", "QCTAX", "RQTAX", "SAAQ", "CBVISA"],
             [20, 4, 6, 11, 9, 5, 6, 3, 5, 6, 25], strict=True)),
    1400, 1.4, math.log(110), date(2026, 4, 27), date(2026, 6, 23), 0.5,
)  # fmt: skip
SPEND = (
    _total("spend", "NETWORK", None, 0.2),
    "CAMPAIGN",
    {f"C{i}": w for i, w in enumerate([30, 20, 15, 10, 10, 5, 5, 5])},
    600, 0.8, math.log(40), date(2025, 1, 6), date(2025, 3, 4), 1.0,
)  # fmt: skip


def _night(rng: random.Random, key: str, weights: dict[str, int], count: float, sigma: float, mu: float):
    """One night's rows and typical row by subset: the mean log of n lognormal amounts is normal, of spread
    sigma / sqrt(n)."""
    total = sum(weights.values())
    rows, typical, spread = {}, {}, {}
    for v, w in weights.items():
        n = max(2, round(rng.gauss(count * w / total, math.sqrt(count * w / total))))
        rows[f"{key}={v}"] = n
        typical[f"{key}={v}"] = SCALE * math.exp(rng.gauss(mu, sigma / math.sqrt(n)))
        spread[f"{key}={v}"] = sigma * math.sqrt(rng.gammavariate((n - 1) / 2, 2) / (n - 1))  # chi-square
    return RowValues(column=key, typical=typical, rows=rows, spread=spread, measure="AMOUNT")


def _history(shape, seed: int):
    total, key, weights, count, sigma, mu, start, day, weekend = shape
    rng, past, rows, d = random.Random(seed), {}, {}, start
    while d < day:
        rv = _night(rng, key, weights, count * (weekend if d.weekday() >= 5 else 1.0), sigma, mu)
        past[d] = Recorded(business_date=d, value=rv.value, groups=dict(rv.typical))
        rows[d] = Recorded(
            business_date=d, value=sum(rv.rows.values()), groups={g: float(n) for g, n in rv.rows.items()}
        )
        d += timedelta(days=1)
    return (past, rows), rng


def _judge(shape, day: date, tonight: RowValues, past):
    return judge_row_values(shape[0], day, tonight, *past, excluded_days=set(), share=2)


def _scaled(rv: RowValues, label: str, factor: float) -> RowValues:
    return rv.model_copy(update={"typical": {**rv.typical, label: rv.typical[label] * factor}})


@pytest.mark.parametrize(
    ("shape", "label", "factor"), [(PAYMENTS, "PAYEE_CODE=MTLTAX", 0.25), (SPEND, "CAMPAIGN=C5", 6.3)]
)
def test_one_subset_scaled_by_any_factor_is_found_and_ordinary_nights_are_not(shape, label, factor):  # fmt: skip
    day = shape[7]
    for seed in range(4):
        past, rng = _history(shape, seed)
        quiet = [_judge(shape, day, _night(rng, *shape[1:6]), past) for _ in range(10)]
        assert quiet == [None] * 10, (seed, quiet)
        tonight = _night(rng, *shape[1:6])
        found = _judge(shape, day, _scaled(tonight, label, factor), past)
        assert found is not None and found.subset == label, (seed, found)
        assert abs(math.log(found.factor / factor)) < math.log(1.5), found
        assert abs(math.log(found.others)) < math.log(1.15)
        assert label in found.describe("AMOUNT") and "AMOUNT" in found.describe("AMOUNT")


def test_a_common_move_and_a_subset_new_tonight_raise_nothing():
    shape = PAYMENTS
    day = shape[7]
    past, rng = _history(shape, 11)
    tonight = _night(rng, *shape[1:6])
    # Every payee code x0.8 (a currency, a fee netted everywhere): the business or the calendar, not a unit.
    common = tonight.model_copy(update={"typical": {g: v * 0.8 for g, v in tonight.typical.items()}})
    assert _judge(shape, day, common, past) is None
    # A payee code first seen tonight, at any level, has no record to move from.
    new = tonight.model_copy(
        update={
            "typical": {**tonight.typical, "PAYEE_CODE=NEWCO": tonight.typical["PAYEE_CODE=HQRES"] * 20},
            "rows": {**tonight.rows, "PAYEE_CODE=NEWCO": 40},
        }
    )
    assert _judge(shape, day, new, past) is None
    # A payee newly mapped into an existing code brings its rows, a tenth the size: the code's typical row moves
    # by what the newcomer's rows are like, and its rows are far beyond its usual share. The business, not a unit.
    label = "PAYEE_CODE=VIDEOTRON"
    n = tonight.rows[label]
    merged = tonight.model_copy(
        update={
            "typical": {**tonight.typical, label: tonight.typical[label] * 0.1 ** (1.5 * n / (2.5 * n))},
            "rows": {**tonight.rows, label: round(2.5 * n)},
        }
    )
    assert _judge(shape, day, merged, past) is None
    # The same move with the code's rows held is a unit change.
    assert _judge(shape, day, merged.model_copy(update={"rows": tonight.rows}), past) is not None


def test_the_part_reads_the_typical_row_from_the_totals_own_sql():
    con = duckdb.connect()
    con.execute('CREATE TABLE t ("CHANNEL" VARCHAR, "PAYEE_CODE" VARCHAR, "AMOUNT" DOUBLE, "PAID" DATE)')
    con.execute(
        "INSERT INTO t VALUES ('web', 'A', 100, DATE '2026-06-23'), ('web', 'A', 400, DATE '2026-06-23'),"
        " ('app', 'B', 0, DATE '2026-06-23'), ('app', 'B', -50, DATE '2026-06-23'),"
        " ('app', 'A', 1e6, DATE '2026-06-22')"
    )
    sql = (
        'SELECT "CHANNEL", SUM("AMOUNT") AS "VALUE", COUNT(*) AS "ROWS" FROM t '
        'WHERE "PAID" = (SELECT MAX("PAID") FROM t) GROUP BY "CHANNEL" ORDER BY 1'
    )
    part = row_value_part(PAYMENTS[0], sql, "PAYEE_CODE")
    assert part is not None and part.shape == "row_value"
    rows = con.execute(part.query.sql(dialect="duckdb")).fetchall()
    got = take_row_values("PAYEE_CODE", rows, "AMOUNT")
    assert got is not None
    # The total's filter kept (the 22nd's row is out); a zero has no log: not a row of the mean.
    assert got.rows == {"PAYEE_CODE=A": 2, "PAYEE_CODE=B": 1}
    assert got.typical["PAYEE_CODE=A"] == pytest.approx(SCALE * 200)  # the geometric mean of 100 and 400
    assert got.typical["PAYEE_CODE=B"] == pytest.approx(SCALE * 50)
    assert got.spread["PAYEE_CODE=A"] == pytest.approx(math.log(4) / math.sqrt(2))  # the sample's, of 2 rows
    # A count has no per-row value; a join is not regrouped.
    assert (
        row_value_part(PAYMENTS[0], 'SELECT "CHANNEL", COUNT(*) AS "VALUE" FROM t GROUP BY 1', "PAYEE_CODE")
        is None
    )
    assert (
        row_value_part(
            PAYMENTS[0], 'SELECT SUM(t."AMOUNT") AS "VALUE" FROM t JOIN u ON t.x = u.x', "PAYEE_CODE"
        )
        is None
    )


@pytest.mark.parametrize(
    ("key", "measure", "item"),
    [("LOADED_AT", "AMOUNT", "PAYEE_CODE"), ("SHIPMENT_ID", "WEIGHT_KG", "LANE")],
)
def test_a_key_of_every_row_reads_one_subset_beyond_the_limit_and_is_not_judged(key, measure, item):
    # A key with a value per row (a load stamp, a shipment id) is not judged value by value: the night's
    # statement sends back one value beyond the limit, not every row's, for each basis.
    con = duckdb.connect()
    con.execute(f'CREATE TABLE t ("{key}" VARCHAR, "{item}" VARCHAR, "{measure}" DOUBLE)')
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(f"k{i}", f"i{i % 7}", 1.0 + i) for i in range(400)])
    sql = f'SELECT "{item}", SUM("{measure}") AS "VALUE" FROM t GROUP BY "{item}"'
    for part in (row_value_part(PAYMENTS[0], sql, key), paired_part(PAYMENTS[0], sql, key, item)):
        assert part is not None
        rows = con.execute(part.query.sql(dialect="duckdb")).fetchall()
        assert len(rows) == MAX_SUBSETS + 1
        assert take_row_values(key, rows, measure) is None
    # A key of few values reads them all.
    few = row_value_part(PAYMENTS[0], sql, item)
    assert len(con.execute(few.query.sql(dialect="duckdb")).fetchall()) == 7


def test_the_diagnosis_takes_the_subset_the_check_measured():
    from dw_dagster.incidents.drilldown import from_finding
    from dw_dagster.records.incidents import Finding

    total = PAYMENTS[0]
    shape = PAYMENTS
    past, rng = _history(shape, 3)
    move = _judge(shape, shape[7], _scaled(_night(rng, *shape[1:6]), "PAYEE_CODE=MTLTAX", 0.25), past)
    assert move is not None
    finding = Finding(
        check_name="total_posted_payments",
        asset_key=total.asset,
        business_date=shape[7],
        summary=move.describe("AMOUNT"),
        evidence={
            "row_values_moved": {
                "series": "row_value:posted_payments:PAYEE_CODE",
                **move.model_dump(mode="json"),
            }
        },
        cause_scope="job:nightly",
    )
    moved = from_finding(finding, total)
    assert moved is not None and (moved.column, moved.value) == ("PAYEE_CODE", "MTLTAX")
    assert moved.factor == pytest.approx(move.factor) and moved.from_history and not moved.sign
    assert moved.after < moved.before
    # A finding without it (another check's, or a total's that raised on something else): nothing.
    assert from_finding(finding.model_copy(update={"evidence": {}}), total) is None


def _subsets(seed: int, *, rows: int = 60, sigma: float = 0.9, nights: int = 56, jumps: float = 0.0):
    """A history of five subsets of ``rows`` rows a night whose typical row strays by the sampling error of a
    mean of log-values (``sigma`` over the square root of the rows); subset C's, on a share ``jumps`` of the
    nights, by x2.2 or /2.2 besides (a big customer's batch some nights, none on others)."""
    total = _total("spend", "NETWORK", None, 0.2)
    rng, past, counts, start = random.Random(seed), {}, {}, date(2025, 1, 6)

    def night() -> RowValues:
        typical, spread, n = {}, {}, {}
        for g in ["A", "B", "C", "D", "E"]:
            jump = math.log(2.2) * rng.choice([-1, 1]) if g == "C" and rng.random() < jumps else 0.0
            n[f"K={g}"] = rows
            typical[f"K={g}"] = SCALE * math.exp(math.log(40) + rng.gauss(0, sigma / math.sqrt(rows)) + jump)
            spread[f"K={g}"] = sigma
        return RowValues(column="K", typical=typical, rows=n, spread=spread, measure="AMOUNT")

    for i in range(nights):
        d = start + timedelta(days=i)
        rv = night()
        past[d] = Recorded(business_date=d, value=rv.value, groups=dict(rv.typical))
        counts[d] = Recorded(
            business_date=d, value=rows * 5.0, groups={g: float(n) for g, n in rv.rows.items()}
        )
    return total, start + timedelta(days=nights), night(), (past, counts)


def test_a_subset_whose_own_record_holds_moves_that_size_is_not_raised_on_one():
    # Subset C's typical row doubles or halves on one night in ten: its record holds moves of x2. A x2 tonight,
    # 7 spreads of a mean of 100 log-values, is a unit change to a fixed least threshold of 6, not to the record.
    for seed in range(10):
        total, day, tonight, past = _subsets(seed, rows=100, jumps=0.1)
        if abs(math.log(tonight.typical["K=C"] / SCALE / 40)) > 0.5:
            continue  # tonight is one of C's own jumps
        found = judge_row_values(
            total, day, _scaled(tonight, "K=C", 2.0), *past, excluded_days=set(), share=2
        )
        assert found is None, (seed, found)


def test_the_threshold_is_read_from_the_record_at_the_configured_rate():
    # A quiet record (the sampling error alone) at a false-alarm rate of 5 per 100 table-nights: its threshold is
    # what the record shows at that rate (under a fixed least threshold of 6).
    total, day, tonight, past = _subsets(5, rows=200, sigma=0.6)
    lenient = total.model_copy(
        update={"baseline": total.baseline.model_copy(update={"false_alarm_rate": 0.05})}
    )
    moved = _scaled(tonight, "K=B", 1.6)
    found = judge_row_values(lenient, day, moved, *past, excluded_days=set(), share=1)
    assert found is not None and found.subset == "K=B", found
    assert found.threshold < 6 and found.nights == 56, found
    # At the default rate, 0.5 per 100, the same record asks more of the same move.
    strict = judge_row_values(total, day, moved, *past, excluded_days=set(), share=1)
    assert strict is None or strict.threshold > found.threshold
    # Ordinary nights of the same record raise nothing at either rate.
    for seed in range(6, 12):
        total, day, tonight, past = _subsets(seed, rows=200, sigma=0.6)
        assert judge_row_values(total, day, tonight, *past, excluded_days=set(), share=1) is None
        assert judge_row_values(lenient, day, tonight, *past, excluded_days=set(), share=1) is None


def test_the_largest_of_many_subsets_is_read_as_one_deviation_as_rare_far_into_the_tail():
    # The largest of 11 standard normal deviations at 3 is as rare as one at 2.18 (Sidak), and back again.
    assert as_one(3.0, 11) == pytest.approx(2.1794, abs=1e-3)
    for z in (1.0, 3.0, 6.0, 9.0, 20.0, 30.0):
        assert as_one(of_one(z, 11), 11) == pytest.approx(z, rel=1e-6)
        assert of_one(z, 11) > z and of_one(z, 1) == pytest.approx(z)


def test_a_total_that_cannot_be_regrouped_says_which_columns_went_undrilled_and_why():
    """A total over a join, a CTE or a union gets no attribute drill and no typical rows (its SQL cannot be
    measured again by another column); its check says so, on two shapes, instead of leaving it unseen."""
    from dw_dagster.checks.attributes import not_regrouped
    from dw_dagster.checks.metrics import MetricsFile
    from dw_dagster.checks.recorded_totals import Totals

    assert not_regrouped('SELECT "CHANNEL", SUM("AMOUNT") AS "VALUE" FROM t GROUP BY 1') is None
    assert (
        not_regrouped('SELECT SUM(t."AMOUNT") AS "VALUE" FROM t JOIN u ON t.x = u.x')
        == "its SQL joins tables"
    )
    assert not_regrouped('WITH c AS (SELECT * FROM t) SELECT SUM("AMOUNT") AS "VALUE" FROM c') == (
        "its SQL has a CTE"
    )
    assert "set operation" in not_regrouped('SELECT 1 AS "VALUE" UNION ALL SELECT 2 AS "VALUE"')
    assert "subquery" in not_regrouped('SELECT SUM("X") AS "VALUE" FROM (SELECT 1 AS "X")')

    shapes = {
        # payments by channel, the payee's network joined from a reference table
        "payments": (
            'SELECT p."CHANNEL", SUM(p."AMOUNT") AS "VALUE" FROM {{ ref(\'BILLING\', \'PAYMENTS\') }} p '
            'JOIN {{ ref(\'BILLING\', \'PAYEES\') }} y ON y."PAYEE_CODE" = p."PAYEE_CODE" GROUP BY 1',
            ["CHANNEL"], "PAYEE_CODE", "its SQL joins tables",
        ),
        # meter readings of the latest day, by region, through a CTE
        "readings": (
            'WITH d AS (SELECT * FROM {{ ref(\'USAGE\', \'READINGS\') }}) '
            'SELECT "REGION", SUM("KWH") AS "VALUE" FROM d GROUP BY 1',
            ["REGION"], "METER_ID", "its SQL has a CTE",
        ),
        # the same readings over the one table: drilled, no note
        "plain": (
            'SELECT "REGION", SUM("KWH") AS "VALUE" FROM {{ ref(\'USAGE\', \'READINGS\') }} GROUP BY 1',
            ["REGION"], "METER_ID", None,
        ),
    }  # fmt: skip
    metrics = MetricsFile.model_validate(
        {
            "totals": [
                {"name": n, "owner": "o", "asset": f"a/{n}", "sql": sql, "group_keys": keys, "item_key": item}
                for n, (sql, keys, item, _) in shapes.items()
            ]
        }
    )
    totals = Totals(metrics, lambda db, table: f'"DW"."{db}"."{table}"', [f"total_{n}" for n in shapes])
    for name, (_, keys, item, why) in shapes.items():
        if why is None:
            assert name not in totals.undrilled and (name, item, "") in totals.row_value_parts
        else:
            assert totals.undrilled[name] == f"{item}, {keys[0]} not drilled: {why}"
            assert not [k for k in totals.row_value_parts if k[0] == name]
