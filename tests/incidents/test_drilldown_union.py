"""A unit change on one subset is told from the rest's own noise, and placed in the input that carries it.

The rest of the rows held when their average moved within their own sampling noise, not only within a fixed
15%: one other subset of a few dozen heavy-tailed rows wobbles x1.3 by chance beside a glaring x1024, which
is a unit change, while units that moved from the rest to the subset are a shift, not one. A group of a
total over a union of two inputs of different layouts is resolved to the input whose group column holds it
(not the first input by name), and named in that input's column. An input that delivered nothing tonight,
while the other delivered, is the subset lost. Two shapes: a fact of sales over a UNION ALL of shop and web
orders (each its own region column and measure); meter readings of one source by region. On DuckDB under
fakesnow."""

from __future__ import annotations

import math
import random
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import pytest
from diagnosis_db import diagnosis_db, node_spec
from snowflake.connector import pandas_tools

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.drilldown import HELD, Moved, drill_source, unit_or_sign_diagnosis
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 9, 29)
NIGHTS = [TONIGHT - timedelta(days=d) for d in range(1, 5)]


class Source:
    """A source table: its asset, table, time column, subset column and measure column."""

    def __init__(self, key, table, time, column, measure):
        self.key, self.table, self.time, self.column, self.measure = key, table, time, column, measure


# name: the sources (the second of a union sorts after the first), the fact's table, its group column and
# measure, and the fact's join text (the pipeline selects the sources' days in it).
SHAPES = {
    "union": (
        [Source("raw/shop_sales", "SHOP_SALES", "SOLD_AT", "STORE_REGION", "AMOUNT"),
         Source("raw/web_sales", "WEB_SALES", "ORDERED_AT", "WEB_ZONE", "AMOUNT_CENTS")],
        "FCT_SALES", "REGION", "AMOUNT",
        "FROM (SELECT \"STORE_REGION\" AS \"REGION\", \"AMOUNT\", \"SOLD_AT\" AS \"AT\""
        " FROM {{ ref('RAW', 'SHOP_SALES') }} WHERE CAST(\"SOLD_AT\" AS DATE) = CURRENT_DATE - 1"
        " UNION ALL SELECT \"WEB_ZONE\", \"AMOUNT_CENTS\" / 100, \"ORDERED_AT\""
        " FROM {{ ref('RAW', 'WEB_SALES') }} WHERE CAST(\"ORDERED_AT\" AS DATE) = CURRENT_DATE - 1) \"U\"",
    ),
    "single": (
        [Source("raw/meter_reads", "METER_READS", "READ_AT", "METER_REGION", "KWH")],
        "FCT_USAGE", "REGION", "KWH",
        "FROM {{ ref('RAW', 'METER_READS') }} \"R\" WHERE CAST(\"R\".\"READ_AT\" AS DATE) = CURRENT_DATE - 1",
    ),
}  # fmt: skip


class World:
    def __init__(self, conn, shape: str):
        self.sources, fact, self.group, measure, join = SHAPES[shape]
        self.conn, self.asset = conn, f"core/{fact.lower()}"
        specs = []
        for s in self.sources:
            cols = {
                "LINE_ID": "NUMBER(38,0)",
                s.time: "TIMESTAMP_NTZ",
                s.column: "VARCHAR",
                s.measure: "NUMBER(18,4)",
            }
            specs.append(node_spec(s.key, f"DB.RAW.{s.table}", cols))
            declared = ", ".join(f'"{c}" {t}' for c, t in cols.items())
            conn.cursor().execute(f'CREATE TABLE "DB"."RAW"."{s.table}" ({declared})')
        lineage = {self.group: [(s.key, s.column) for s in self.sources],
                   measure: [(s.key, s.measure) for s in self.sources]}  # fmt: skip
        specs.append(
            node_spec(
                self.asset, f"DB.CORE.{fact}", {self.group: "VARCHAR", measure: "NUMBER(18,4)"}, lineage, join
            )
        )
        sql = (f'SELECT "{self.group}", SUM("{measure}") AS "VALUE", COUNT(*) AS "ROWS" '
               f"FROM {{{{ ref('CORE', '{fact}') }}}} GROUP BY 1")  # fmt: skip
        metrics = MetricsFile.model_validate(
            {"totals": [{"name": "day_total", "owner": "o", "asset": self.asset, "group_keys": [self.group],
                         "hurts": "down", "sql": sql}]}
        )  # fmt: skip
        self.ctx = DiagnosisContext(LineageGraph(specs), metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                                    HistorySession(conn, OpsSchema("DB")), conn.cursor())  # fmt: skip
        self.total = metrics.totals[0]
        self.line = 0

    def load(self, source: Source, nights: dict[date, dict[str, list[float]]]) -> None:
        """Each night's rows of each subset value of ``source``: their measure's values."""
        rows = []
        for day, subsets in nights.items():
            for value, amounts in subsets.items():
                for i, amount in enumerate(amounts):
                    self.line += 1
                    rows.append(
                        (self.line, datetime(day.year, day.month, day.day, 8 + i % 12), value, amount)
                    )
        frame = pd.DataFrame(rows, columns=["LINE_ID", source.time, source.column, source.measure])
        pandas_tools.write_pandas(self.conn, frame, source.table, database="DB", schema="RAW")

    def drill(self):
        return drill_source(self.ctx, self.total, TONIGHT, NIGHTS, [self.group])


@pytest.fixture
def conn():
    with diagnosis_db("RAW", "CORE") as conn:
        yield conn


def _steady(rng: random.Random, values: list[str], rows: int = 40) -> dict[date, dict[str, list[float]]]:
    """Light-tailed amounts of every value on every night, tonight included."""
    return {d: {v: [rng.uniform(20, 60) for _ in range(rows)] for v in values} for d in [TONIGHT, *NIGHTS]}


def _heavy(rng: random.Random, rows: int) -> list[float]:
    """Heavy-tailed amounts (lognormal, sigma 1.6: a few rows carry most of the units)."""
    return [round(15 * rng.lognormvariate(0, 1.6), 4) for _ in range(rows)]


def _with_subsets(
    world: World,
    rng: random.Random,
    moved: str,
    factor: float,
    rest: list[str],
    drift: float,
    kept: float = 1.0,
):
    """The last source: ``moved``'s light-tailed rows scaled by ``factor`` tonight (only the ``kept`` share of
    them with the smallest amounts arrived), the ``rest`` heavy-tailed (a few dozen rows each, the same every
    night), their amounts drifting by ``drift`` tonight. The other sources steady."""
    for s in world.sources[:-1]:
        world.load(s, _steady(rng, ["NORTH", "SOUTH", "EAST"]))
    usual = {v: _heavy(rng, 60 // len(rest)) for v in rest}
    nights = {}
    for d in [TONIGHT, *NIGHTS]:
        scale, move = (drift, factor) if d == TONIGHT else (1.0, 1.0)
        nights[d] = {moved: [move * rng.uniform(20, 60) for _ in range(40)]}
        if d == TONIGHT:
            nights[d][moved] = sorted(nights[d][moved])[: round(40 * kept)]
        nights[d].update({v: [scale * a for a in amounts] for v, amounts in usual.items()})
    world.load(world.sources[-1], nights)
    return nights


def _rest_ratio(nights, rest: list[str]) -> float:
    tonight = [a for v in rest for a in nights[TONIGHT][v]]
    before = [a for d in NIGHTS for v in rest for a in nights[d][v]]
    return (sum(tonight) / len(tonight)) / (sum(before) / len(before))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_glaring_factor_beside_a_rest_that_wobbled_by_its_own_noise_is_a_unit_change(conn, shape):
    world = World(conn, shape)
    rest = ["MADEIRA"] if shape == "union" else ["UPPER", "LOWER"]
    nights = _with_subsets(world, random.Random(3), "AZORES", 1024.0, rest, drift=1.3)
    # The rest moved beyond a fixed 15% (what rejected the x1024 before), by its own noise.
    assert abs(math.log(_rest_ratio(nights, rest))) > HELD
    moved = world.drill().moved
    assert moved is not None, "the x1024 was rejected"
    assert (moved.asset, moved.column, moved.value) == (
        world.sources[-1].key,
        world.sources[-1].column,
        "AZORES",
    )
    assert moved.factor == pytest.approx(1024, rel=0.25)


@pytest.mark.parametrize("shape", SHAPES)
def test_units_moved_from_a_noisy_rest_to_a_subset_are_a_shift_not_a_unit_change(conn, shape):
    world = World(conn, shape)
    rest = ["MADEIRA"] if shape == "union" else ["UPPER", "LOWER"]
    rng = random.Random(5)
    nights = _with_subsets(world, rng, "AZORES", 2.0, rest, drift=1.0)
    # Tonight the rest lost what the subset gained (its rows carried to it): within the rest's noise.
    gained = sum(nights[TONIGHT]["AZORES"]) / 2
    rest_sum = sum(a for v in rest for a in nights[TONIGHT][v])
    world.conn.cursor().execute(
        f'UPDATE "DB"."RAW"."{world.sources[-1].table}" SET "{world.sources[-1].measure}" = '
        f'"{world.sources[-1].measure}" * ? WHERE CAST("{world.sources[-1].time}" AS DATE) = ? '
        f'AND "{world.sources[-1].column}" <> ?',
        ((rest_sum - gained) / rest_sum, TONIGHT, "AZORES"),
    )
    assert (rest_sum - gained) / rest_sum < math.exp(-HELD)  # the rest fell beyond 15%
    assert world.drill().moved is None


@pytest.mark.parametrize("shape", SHAPES)
def test_a_partial_load_that_kept_the_smaller_rows_of_a_subset_lost_rows_and_changed_no_unit(conn, shape):
    world = World(conn, shape)
    rest = ["AZORES"] if shape == "union" else ["UPPER", "LOWER"]
    # A fifth of the subset's rows arrived, its smallest (the night's first files): their average is x0.6 of
    # its usual rows', far beyond their noise, while the rest held.
    _with_subsets(world, random.Random(3), "MADEIRA", 1.0, rest, drift=1.0, kept=0.2)
    drill = world.drill()
    assert drill.moved is None, drill.moved
    assert drill.lost is not None and [v for v, _ in drill.lost.values] == ["MADEIRA"]
    assert drill.lost.column == world.sources[-1].column


@pytest.mark.parametrize("shape", SHAPES)
def test_cents_on_one_subset_of_steady_ones_stay_a_unit_change(conn, shape):
    world = World(conn, shape)
    rng = random.Random(8)
    for s in world.sources:
        nights = _steady(rng, ["NORTH", "SOUTH", "EAST", "WEST"])
        if s is world.sources[-1]:
            nights[TONIGHT]["WEST"] = [100 * a for a in nights[TONIGHT]["WEST"]]
        world.load(s, nights)
    moved = world.drill().moved
    assert moved is not None and (moved.asset, moved.value) == (world.sources[-1].key, "WEST")
    assert moved.factor == pytest.approx(100, rel=0.2)


def _recorded_move(world: World, value: str) -> tuple:
    """A unit change of the total's group ``value`` as the recorded groups show it: its diagnosis."""
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                        severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name="total_day_total", asset_key=world.asset, business_date=TONIGHT,
                      summary="day_total moved", cause_scope="job:x")  # fmt: skip
    moved = Moved(world.group, value, "", 1024.0, 0, world.asset, 10.0, 10240.0, from_history=True)
    return unit_or_sign_diagnosis(incident, finding, world.total, moved, world.ctx, {})


@pytest.mark.parametrize("shape", SHAPES)
def test_a_recorded_group_is_placed_in_the_input_that_holds_it_and_named_in_its_column(conn, shape):
    world = World(conn, shape)
    rng = random.Random(2)
    world.load(world.sources[0], _steady(rng, ["NORTH", "SOUTH"]))
    if shape == "union":
        world.load(world.sources[1], _steady(rng, ["AZORES", "MADEIRA"]))
    for value, source in [("AZORES", world.sources[-1]), ("NORTH", world.sources[0])]:
        d = _recorded_move(world, value)
        assert d.classification is CauseClass.UNIT_CHANGE
        assert (d.evidence["measure_source"], d.evidence["measure"]) == (source.key, source.measure), d.cause
        assert [k.label for k in d.keys] == [f"{source.column}={value}"], d.cause
        assert d.evidence["key_source_column"] == source.column
        if shape == "single":
            break


@pytest.mark.parametrize("shape", SHAPES)
def test_an_input_that_delivered_nothing_tonight_is_the_subset_lost(conn, shape):
    world = World(conn, shape)
    rng = random.Random(4)
    for s in world.sources:
        nights = _steady(rng, ["AZORES", "MADEIRA"] if s is world.sources[-1] else ["NORTH", "SOUTH", "EAST"])
        if s is world.sources[-1]:
            del nights[TONIGHT]
        world.load(s, nights)
    drill = world.drill()
    assert drill.moved is None
    if shape == "single":
        # The only source of the total delivered nothing: the total's own fall, no subset of it.
        assert drill.lost is None
        return
    lost = drill.lost
    assert lost is not None, "the input with no rows tonight was skipped"
    assert (lost.asset, lost.column, lost.kept) == (world.sources[-1].key, world.sources[-1].column, 0.0)
    assert sorted(v for v, _ in lost.values) == ["AZORES", "MADEIRA"]
    assert all(short == pytest.approx(40) for _, short in lost.values)
