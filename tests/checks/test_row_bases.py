"""A subset whose per-row values moved by a common factor while the others held, whatever the factor, when its
own typical row cannot show it: read against a basis the pipeline names, and judged against that basis's own
record. Per unit of a companion measure (an amount before its conversion at a joined rate: one currency's rate
x1.37 on an aggregate of one row per currency; one region's tariff x1.2 on meter charges), and against the same
items in the other subsets tonight (one pharmacy's pack costs x0.85 among heavy-tailed products; one network's
cost per placement x0.9). Each measured by the part's own SQL, on ordinary nights quiet."""

from __future__ import annotations

import math
import random
from datetime import date, timedelta

import dagster as dg
import duckdb
import pandas
import pytest

from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.checks.recorded_totals import Totals
from dw_dagster.checks.row_values import (
    AMONG,
    PER,
    RowBases,
    judge_row_values,
    paired_part,
    row_bases,
    row_value_part,
    take_row_values,
)
from dw_dagster.context.lineage import LineageGraph

START = date(2026, 6, 1)


def _node(key: str, columns: dict[str, tuple[str, list[str]]]) -> dg.AssetSpec:
    """A node: each column with its type and the ``asset.COLUMN`` it is built from."""
    lineage = {
        c: [dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(s.rsplit(".", 1)[0]), column_name=s.rsplit(".", 1)[1]) for s in sources]
        for c, (_, sources) in columns.items()
        if sources
    }  # fmt: skip
    metadata: dict = {
        "dagster/table_name": f"DB.{key.split('/')[0].upper()}.{key.split('/')[1].upper()}",
        "dagster/column_schema": dg.TableSchema(
            columns=[dg.TableColumn(c, t) for c, (t, _) in columns.items()]
        ),
    }
    if lineage:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(deps_by_column=lineage)
    deps = sorted({s.rsplit(".", 1)[0] for _, sources in columns.values() for s in sources})
    return dg.AssetSpec(key, deps=deps, metadata=metadata)


def _total(name: str, asset: str, measure: str, keys: list[str], item: str | None = None) -> RecordedTotal:
    group = ", ".join(f'"{k}"' for k in keys)
    return RecordedTotal.model_validate(
        {
            "name": name,
            "owner": "o",
            "asset": asset,
            "sql": f'SELECT {group}, SUM("{measure}") AS "VALUE", COUNT(*) AS "ROWS" FROM t GROUP BY {group}',
            "group_keys": keys,
            **({"item_key": item} if item else {}),
            "baseline": {"weeks": 6, "min_relative_change": 0.2},
        }
    )


# Order lines converted at the day's rate joined from an FX table, summed into revenue by region and currency.
ORDERS = LineageGraph([
    _node("raw/lines", {"SELLER_ID": ("NUMBER", []), "CURRENCY": ("VARCHAR", []), "QTY": ("NUMBER", []), "PRICE": ("NUMBER", [])}),
    _node("raw/fx", {"CURRENCY": ("VARCHAR", []), "RATE": ("NUMBER", [])}),
    _node("ref/accounts", {"SELLER_ID": ("NUMBER", []), "REGION": ("VARCHAR", [])}),
    _node("core/fct_lines", {
        "SELLER_ID": ("NUMBER", ["raw/lines.SELLER_ID"]), "CURRENCY": ("VARCHAR", ["raw/lines.CURRENCY"]),
        "REGION": ("VARCHAR", ["ref/accounts.REGION"]), "QTY": ("NUMBER", ["raw/lines.QTY"]),
        "NET": ("NUMBER(16,2)", ["raw/lines.QTY", "raw/lines.PRICE"]),
        "NET_AUD": ("NUMBER(16,2)", ["raw/lines.QTY", "raw/lines.PRICE", "raw/fx.RATE"])}),
    _node("core/agg_revenue", {
        "REGION": ("VARCHAR", ["core/fct_lines.REGION"]), "CURRENCY": ("VARCHAR", ["core/fct_lines.CURRENCY"]),
        "LINES": ("NUMBER", ["core/fct_lines.SELLER_ID"]), "NET": ("NUMBER(18,2)", ["core/fct_lines.NET"]),
        "NET_AUD": ("NUMBER(18,2)", ["core/fct_lines.NET_AUD"])}),
])  # fmt: skip

# Dispensings at each product's pack price, their line cost from the quantity and the unit cost of the same
# rows; another total on the fact counts packs by pharmacy and product.
DISPENSINGS = LineageGraph([
    _node("raw/dispensings", {"PHARMACY_ID": ("NUMBER", []), "PRODUCT_ID": ("NUMBER", []), "QTY": ("NUMBER(10,0)", []), "UNIT_COST": ("NUMBER(12,2)", [])}),
    _node("core/fct_dispensings", {
        "PHARMACY_ID": ("NUMBER", ["raw/dispensings.PHARMACY_ID"]), "PRODUCT_ID": ("NUMBER", ["raw/dispensings.PRODUCT_ID"]),
        "QTY": ("NUMBER(10,0)", ["raw/dispensings.QTY"]), "UNIT_COST": ("NUMBER(12,2)", ["raw/dispensings.UNIT_COST"]),
        "LINE_COST": ("NUMBER(14,2)", ["raw/dispensings.QTY", "raw/dispensings.UNIT_COST"])}),
])  # fmt: skip


def test_the_bases_are_read_from_the_lineage_and_the_other_totals_on_the_table():
    revenue = _total("revenue_aud", "core/agg_revenue", "NET_AUD", ["CURRENCY"])
    net = _total("net", "core/fct_lines", "NET", ["CURRENCY"], item="SELLER_ID")
    # The converted amount per unit of the amount it was converted from (the rate joined from another table);
    # the other total's item key is not a column of the aggregate.
    assert row_bases(ORDERS, revenue, ["NET_AUD"], [revenue, net]) == RowBases(companion="NET", joined=True)
    # A line's net amount from the same rows' quantity and price: per unit of the quantity (a count).
    assert row_bases(ORDERS, net, ["NET"], [revenue, net]) == RowBases(item="SELLER_ID", companion="QTY")
    cost = _total("cost_by_class", "core/fct_dispensings", "LINE_COST", ["CLASS"])
    packs = _total("packs", "core/fct_dispensings", "QTY", ["PHARMACY_ID"], item="PRODUCT_ID")
    # The keys and the item key another total on the same table names; the line cost per pack (the count of
    # its two factors from the same rows).
    bases = RowBases(keys=["PHARMACY_ID", "PRODUCT_ID"], item="PRODUCT_ID", companion="QTY")
    assert row_bases(DISPENSINGS, cost, ["LINE_COST"], [cost, packs]) == bases
    # Wired into the night's parts: each key on every basis but the item key against itself; per unit of a
    # companion on its own only when it is converted at a joined factor.
    resolve = lambda db, table: f'"DW"."{db}"."{table}"'  # noqa: E731
    totals = Totals(
        MetricsFile(totals=[cost, packs]), resolve, ["total_cost_by_class"], bases={"cost_by_class": bases}
    )
    assert sorted(totals.row_value_parts) == [
        ("cost_by_class", c, b)
        for c, b in [("CLASS", ""), ("CLASS", f"{AMONG}PRODUCT_ID"), ("PHARMACY_ID", ""),
                     ("PHARMACY_ID", f"{AMONG}PRODUCT_ID"), ("PRODUCT_ID", "")]
    ]  # fmt: skip
    totals = Totals(MetricsFile(totals=[revenue]), resolve, ["total_revenue_aud"],
                    bases={"revenue_aud": RowBases(companion="NET", joined=True)})  # fmt: skip
    assert sorted(totals.row_value_parts) == [
        ("revenue_aud", "CURRENCY", ""),
        ("revenue_aud", "CURRENCY", f"{PER}NET"),
    ]


def _history(rng: random.Random, night, key: str, nights: int = 56):
    past, counts = {}, {}
    for i in range(nights):
        d = START + timedelta(days=i)
        rv = night(rng, d, {})
        past[d] = Recorded(business_date=d, value=rv.value, groups=dict(rv.typical))
        counts[d] = Recorded(business_date=d, value=sum(rv.rows.values()), groups={g: float(n) for g, n in rv.rows.items()})  # fmt: skip
    return past, counts, START + timedelta(days=nights)


def _measured(con, part, column: str, basis: str):
    return take_row_values(column, con.execute(part.query.sql(dialect="duckdb")).fetchall(), "VALUE", basis)


def _per_unit(subsets: dict[str, float], rows: int, drift: float):
    """Amounts converted at a rate per subset that drifts by ``drift`` a night (a rounding's worth, or a market's):
    ``rows`` aggregated rows a night per subset, each a sum of lines of lognormal amounts."""
    total = _total("revenue_aud", "core/agg_revenue", "NET_AUD", ["CURRENCY"])
    con = duckdb.connect()

    def night(rng: random.Random, d: date, factors: dict[str, float]):
        con.execute(
            'CREATE OR REPLACE TABLE t ("CURRENCY" VARCHAR, "REGION" VARCHAR, "NET" DOUBLE, "NET_AUD" DOUBLE)'
        )
        for g, rate in subsets.items():
            for r in range(rows):
                net = sum(
                    rng.lognormvariate(math.log(60), 0.8) * rng.randint(1, 24)
                    for _ in range(rng.randint(150, 400))
                )
                aud = round(net * rate * math.exp(rng.gauss(0, drift)) * factors.get(g, 1.0), 2)
                con.execute("INSERT INTO t VALUES (?, ?, ?, ?)", [g, f"R{r}", round(net, 2), aud])
        return _measured(con, row_value_part(total, total.sql, "CURRENCY", "NET"), "CURRENCY", f"{PER}NET")

    return total, night


@pytest.mark.parametrize(
    ("subsets", "rows", "drift", "moved", "factor"),
    [
        # Five listing currencies, one aggregated row each a night, the rates fixed: EUR x1.37.
        ({"AUD": 1.0, "NZD": 0.9135, "SGD": 1.1712, "USD": 1.5284, "EUR": 1.781}, 1, 1e-7, "EUR", 1.37),
        # Eight regions' tariffs, three rows each, drifting 0.5% a night: one region's x1.2.
        ({f"REG{i}": 0.2 + 0.03 * i for i in range(8)}, 3, 0.005, "REG5", 1.2),
    ],
)
def test_a_subsets_measure_per_unit_of_its_companion_moved_by_any_factor(subsets, rows, drift, moved, factor):
    total, night = _per_unit(subsets, rows, drift)
    rng = random.Random(7)
    past, counts, day = _history(rng, night, "CURRENCY", nights=42)
    for _ in range(4):
        quiet = night(rng, day, {})
        assert judge_row_values(total, day, quiet, past, counts, excluded_days=set(), share=2) is None
    found = judge_row_values(
        total, day, night(rng, day, {moved: factor}), past, counts, excluded_days=set(), share=2
    )
    assert found is not None and found.subset == f"CURRENCY={moved}", found
    assert found.factor == pytest.approx(factor, rel=0.02) and found.basis == f"{PER}NET"
    assert f"VALUE per NET of CURRENCY={moved} moved x{factor:.3g}" in found.describe("VALUE")


def _paired(subsets: dict[str, int], items: int, sigma: float, rows: int):
    """Rows of items each at its own heavy-tailed price (spread ``sigma``), times a quantity of 1 to 4, in
    subsets of the given weights; the total grouped by another column, the item key another total's, the
    quantity the cost's companion."""
    total = _total("cost_by_class", "core/fct", "COST", ["CLASS"])
    prices = {p: math.exp(random.Random(p).gauss(math.log(6), sigma)) for p in range(items)}
    con = duckdb.connect()
    names, weights = list(subsets), list(subsets.values())

    def night(rng: random.Random, d: date, factors: dict[str, float]):
        n = round(rows * (0.45 if d.weekday() >= 5 else 1.0) * math.exp(rng.gauss(0, 0.05)))
        values = []
        for _ in range(n):
            g, p, q = rng.choices(names, weights)[0], rng.randrange(items), rng.randint(1, 4)
            values.append((g, p, p % 8, q, round(round(prices[p] * factors.get(g, 1.0), 2) * q, 2)))
        frame = pandas.DataFrame(values, columns=["SITE", "ITEM", "CLASS", "QTY", "COST"])  # noqa: F841 - read by name
        con.execute("CREATE OR REPLACE TABLE t AS SELECT * FROM frame")
        return (
            _measured(con, paired_part(total, total.sql, "SITE", "ITEM", "QTY"), "SITE", f"{AMONG}ITEM"),
            _measured(con, row_value_part(total, total.sql, "SITE"), "SITE", ""),
        )

    return total, night


@pytest.mark.parametrize(
    ("subsets", "items", "sigma", "rows", "moved", "factor"),
    [
        # Six pharmacies, 320 products of a spread of 2.4 (GBP 6 typical, one in a hundred over GBP 900): one
        # pharmacy's pack costs x0.85.
        ({f"PH{i}": w for i, w in enumerate([22, 14, 24, 20, 12, 8])}, 320, 2.4, 1800, "PH2", 0.85),
        # Five networks, 150 placements of a spread of 1.5: one network's cost per placement x0.9 (a fee netted).
        ({f"NET{i}": w for i, w in enumerate([30, 25, 20, 15, 10])}, 150, 1.5, 1500, "NET0", 0.9),
    ],
)
def test_a_subsets_rows_moved_against_the_same_items_elsewhere(subsets, items, sigma, rows, moved, factor):
    total, night = _paired(subsets, items, sigma, rows)
    rng = random.Random(3)
    history = {}
    for basis in (0, 1):
        history[basis] = ({}, {})
    for i in range(42):
        d = START + timedelta(days=i)
        for basis, rv in enumerate(night(rng, d, {})):
            history[basis][0][d] = Recorded(business_date=d, value=rv.value, groups=dict(rv.typical))
            history[basis][1][d] = Recorded(business_date=d, value=sum(rv.rows.values()), groups={g: float(n) for g, n in rv.rows.items()})  # fmt: skip
    day = START + timedelta(days=42 + (7 - (START + timedelta(days=42)).weekday()) % 7)  # a Monday
    counts = history[1][1]

    def judged(tonight, basis):
        return judge_row_values(total, day, tonight, history[basis][0], counts, excluded_days=set(), share=2)

    for _ in range(4):
        paired, plain = night(rng, day, {})
        assert judged(paired, 0) is None and judged(plain, 1) is None
    paired, plain = night(rng, day, {moved: factor})
    found = judged(paired, 0)
    assert found is not None and found.subset == f"SITE={moved}", found
    assert (found.factor < 1) == (factor < 1) and found.basis == f"{AMONG}ITEM"
    assert "against the same ITEM elsewhere" in found.describe("COST")
    # Its own typical row is within the spread its mix of heavy-tailed items gives it.
    assert judged(plain, 1) is None


def _attribute_history(rng: random.Random, shares: dict[str, float], nights: int = 56):
    """A total's value by an attribute's values each night: a level moving 30% night to night, each value's
    share steady within 3%."""
    past = {}
    for i in range(nights):
        d = START + timedelta(days=i)
        level = 1e6 * math.exp(rng.gauss(0, 0.3))
        groups = {g: level * s * math.exp(rng.gauss(0, 0.03)) for g, s in shares.items()}
        past[d] = Recorded(business_date=d, value=sum(groups.values()), groups=groups)
    return past, START + timedelta(days=nights)


@pytest.mark.parametrize(
    ("column", "shares", "source", "target"),
    [
        # Sales regions; one account of 9% of the money re-pointed from AMERICAS to ASIA.
        ("SALES_REGION", {"ANZ": 0.38, "ASIA": 0.17, "AMERICAS": 0.2, "EMEA": 0.25}, "AMERICAS", "ASIA"),
        # A carrier's invoicing groups; one lane of 9% re-pointed from group B to group E.
        ("GRP", {"A": 0.3, "B": 0.25, "C": 0.2, "D": 0.15, "E": 0.1}, "B", "E"),
    ],
)
def test_a_shift_between_an_attributes_values_is_read_on_their_shares(column, shares, source, target):
    from dw_dagster.checks.attributes import shifted_shares

    total = _total("t", "core/f", "AMOUNT", ["CURRENCY"])
    past, day = _attribute_history(random.Random(5), {f"{column}={g}": s for g, s in shares.items()})
    # Tonight at x3 (a month-end the calendar learned, its level judged on its like nights alone).
    tonight = {g: 3e6 * s for g, s in shares.items()}
    moved = {**tonight, source: tonight[source] - 0.09 * 3e6, target: tonight[target] + 0.09 * 3e6}

    def judged(groups):
        return shifted_shares(total, day, {f"{column}={g}": v for g, v in groups.items()}, past, excluded_days=set(), share=2)  # fmt: skip

    found = judged(moved)
    assert {(m.group, m.status) for m in found} == {
        (f"{column}={source}", "lost"),
        (f"{column}={target}", "gained"),
    }
    assert judged(tonight) == []
    # A newcomer mapped into the target brings as much: every other value's share falls alike, nothing shifted.
    assert judged({**tonight, target: tonight[target] + 0.4 * 3e6}) == []
