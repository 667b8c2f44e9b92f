"""The key the drill-down names is the one whose subsets explain the gap most sharply, and the class follows
the rows: a finer key (a seller) whose rows moved entirely is named over the coarser key it falls in (the
currency it sells in) whose other rows held, the coarser one when the whole of it moved; a group whose value
fell with its own rows lost rows (volume loss), however closely the whole table's count held; a night below
its calendar-aware expectation that is still above the ordinary night before it lost rows. Two shapes:
order lines by seller within a listing currency, meter readings by meter within a region. On DuckDB under
fakesnow, with the totals' histories as the checks record them."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pandas as pd
import pytest
from diagnosis_db import diagnosis_db
from snowflake.connector import pandas_tools

from dw_dagster.checks.history import HistorySession, Reading, Recorded, group_rows_series, volume_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.drilldown import drill_groups, drill_source
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 6, 23)
NIGHTS = [TONIGHT - timedelta(days=d) for d in range(1, 8)]


class Shape:
    """A source read by a total grouped by its coarse key: (fine value, coarse value, rows a night, price)."""

    def __init__(self, key, table, fine, coarse, measure, day, members):
        self.key, self.table, self.fine, self.coarse = key, table, fine, coarse
        self.measure, self.day, self.members = measure, day, members


SHAPES = {
    "orders": Shape("raw/order_lines", "ORDER_LINES", "SELLER_ID", "CURRENCY_CODE", "UNIT_PRICE", "ORDERED_AT",
                    [("301", "AUD", 40, 20.0), ("302", "AUD", 30, 35.0), ("303", "AUD", 35, 12.0),
                     ("304", "NZD", 30, 60.0), ("306", "USD", 35, 25.0), ("307", "USD", 25, 40.0),
                     ("308", "USD", 30, 15.0)]),
    "meters": Shape("raw_meter/readings", "READINGS", "METER_ID", "REGION", "KWH", "READ_AT",
                    [("M1", "North", 36, 4.0), ("M2", "North", 30, 6.5), ("M7", "North", 32, 5.5), ("M3", "South", 40, 5.0),
                     ("M4", "South", 28, 3.0), ("M5", "East", 34, 8.0), ("M6", "East", 30, 2.5), ("M8", "West", 22, 7.0)]),
}  # fmt: skip


def _ctx(conn, shape: Shape) -> DiagnosisContext:
    sql = (
        f'SELECT "{shape.coarse}", SUM("{shape.measure}") AS "VALUE", COUNT(*) AS "ROWS" '
        f"FROM {{{{ ref('RAW', '{shape.table}') }}}} WHERE CAST(\"{shape.day}\" AS DATE) = "
        f"(SELECT MAX(CAST(\"{shape.day}\" AS DATE)) FROM {{{{ ref('RAW', '{shape.table}') }}}}) GROUP BY 1"
    )
    metrics = MetricsFile.model_validate(
        {"totals": [{"name": "day_total", "owner": "o", "asset": shape.key, "group_keys": [shape.coarse],
                     "hurts": "down", "sql": sql}]}
    )  # fmt: skip
    columns = {"LINE_ID": "NUMBER(38,0)", shape.fine: "VARCHAR", shape.coarse: "VARCHAR",
               shape.measure: "NUMBER(18,4)", shape.day: "TIMESTAMP_NTZ"}  # fmt: skip
    schema = dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in columns.items()])
    spec = dg.AssetSpec(shape.key, kinds={"coalesce"}, metadata={
        "dagster/table_name": f"DB.RAW.{shape.table}", "dagster/column_schema": schema, "coalesce/node_type": "Source"})  # fmt: skip
    conn.cursor().execute(
        f'CREATE TABLE "DB"."RAW"."{shape.table}" ({", ".join(f"{c} {t}" for c, t in columns.items())})'
    )
    return DiagnosisContext(LineageGraph([spec]), metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                            HistorySession(conn, OpsSchema("DB")), conn.cursor())  # fmt: skip


def _load(conn, ctx: DiagnosisContext, shape: Shape, tonight: dict[str, tuple[float, float]]) -> None:
    """Seven ordinary nights and tonight, each member's rows at a spread of prices; ``tonight``: a member's
    (share of its rows that arrived, factor on its prices). The totals' histories recorded as the checks do."""
    rows, line = [], 0
    for day in [TONIGHT, *NIGHTS]:
        groups: dict[str, float] = {}
        counts: dict[str, float] = {}
        for fine, coarse, n, price in shape.members:
            kept, factor = tonight.get(fine, (1.0, 1.0)) if day == TONIGHT else (1.0, 1.0)
            for i in range(round(n * kept)):
                line += 1
                value = price * (0.8 + 0.1 * (i % 5)) * factor
                rows.append((line, fine, coarse, value, datetime(day.year, day.month, day.day, 9 + i % 8)))
                label = f"{shape.coarse}={coarse}"
                groups[label] = groups.get(label, 0.0) + value
                counts[label] = counts.get(label, 0.0) + 1
        readings = {
            "day_total": Reading(value=sum(groups.values()), groups=groups),
            group_rows_series("day_total"): Reading(value=sum(counts.values()), groups=counts),
            volume_series(shape.key): Reading(value=sum(counts.values())),
        }
        ctx.history.record_night(day, readings, None, None)  # type: ignore[union-attr]
    # Written as a frame (fakesnow's write_pandas, looked up as it patches it): a statement a row is slow.
    frame = pd.DataFrame(rows, columns=["LINE_ID", shape.fine, shape.coarse, shape.measure, shape.day])
    pandas_tools.write_pandas(conn, frame, shape.table, database="DB", schema="RAW")


@pytest.fixture
def conn():
    with diagnosis_db("RAW") as conn:
        yield conn


def _diagnose(ctx: DiagnosisContext, shape: Shape, evidence=None):
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                        severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name="total_day_total", asset_key=shape.key, business_date=TONIGHT,
                      summary="day_total moved", cause_scope="job:x", evidence=evidence or {})  # fmt: skip
    return diagnose(incident, [finding], ctx)


def _fine(shape: Shape, coarse: str) -> list[str]:
    return [m[0] for m in shape.members if m[1] == coarse]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_unit_change_of_one_member_is_named_on_it_not_on_the_coarser_key_it_falls_in(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    coarse = max({m[1] for m in s.members}, key=lambda c: len(_fine(s, c)))
    one = _fine(s, coarse)[0]  # one of its coarse key's members: the others held
    _load(conn, ctx, s, {one: (1.0, 100.0)})
    d = _diagnose(ctx, s)
    assert d.classification is CauseClass.UNIT_CHANGE, d.cause
    assert [k.label for k in d.keys] == [f"{s.fine}={one}"], d.cause
    assert d.keys[0].factor == pytest.approx(100.0)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_unit_change_of_a_whole_coarse_key_is_named_on_the_coarse_key(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    coarse = max({m[1] for m in s.members}, key=lambda c: len(_fine(s, c)))
    _load(conn, ctx, s, {m: (1.0, 100.0) for m in _fine(s, coarse)})
    moved = drill_source(ctx, ctx.metrics.totals[0], TONIGHT, NIGHTS, [s.coarse]).moved
    assert moved is not None and (moved.column, moved.value) == (s.coarse, coarse)


@pytest.mark.parametrize("shape", SHAPES)
def test_rows_lost_by_two_members_are_named_on_them_not_on_the_coarser_key_they_fall_in(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    first = s.members[0][1]
    two = _fine(s, first)[:2]  # two of the three members of the first coarse key lost 70% of their rows
    _load(conn, ctx, s, {m: (0.3, 1.0) for m in two})
    d = _diagnose(ctx, s)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert {k.label for k in d.keys} == {f"{s.fine}={m}" for m in two}, d.cause
    assert all(k.rows == round(0.7 * n) for k in d.keys for f, _, n, _ in s.members if f == k.value)
    assert f"{s.fine}={two[0]} (-" in d.cause and " rows)" in d.cause, d.cause


@pytest.mark.parametrize("shape", SHAPES)
def test_rows_lost_by_a_whole_coarse_key_are_named_on_it(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    first = s.members[0][1]
    _load(conn, ctx, s, {m: (0.3, 1.0) for m in _fine(s, first)})
    found = drill_source(ctx, ctx.metrics.totals[0], TONIGHT, NIGHTS, [s.coarse])
    assert found.moved is None and found.lost is not None
    assert (found.lost.column, [v for v, _ in found.lost.values]) == (s.coarse, [first])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_groups_rows_lost_within_the_tables_noise_are_volume_loss_not_a_unit_change(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    # The smallest group lost 60% of its rows; the other groups' rows rose a little (within their noise): the
    # table's count is within 2% of the last good night's, the group's value fell by x0.4, the others held.
    alone = min({m[1] for m in s.members}, key=lambda c: sum(m[2] for m in s.members if m[1] == c))
    lost = {m: (0.4, 1.0) for m in _fine(s, alone)}
    short = sum(n * 0.6 for f, _, n, _ in s.members if f in lost)
    others = sum(n for f, _, n, _ in s.members if f not in lost)
    _load(
        conn, ctx, s, {**lost, **{f: (1 + short / others, 1.0) for f, _, _, _ in s.members if f not in lost}}
    )
    d = _diagnose(ctx, s)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert {k.label for k in d.keys} == {f"{s.coarse}={alone}"}, d.cause


@pytest.mark.parametrize("shape", SHAPES)
def test_a_night_below_its_calendar_expectation_but_above_the_night_before_lost_rows(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    # A month-end night at three times an ordinary one, 45% of its rows missing: above the last good night.
    _load(conn, ctx, s, {f: (3 * 0.55, 1.0) for f, *_ in s.members})
    rows = sum(round(n * 3 * 0.55) for _, _, n, _ in s.members)
    expected = sum(3 * n for _, _, n, _ in s.members)
    d = _diagnose(ctx, s, {"rows_baseline": {"value": rows, "expected": expected}})
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert (
        "fell to" not in d.cause and f"its rows {rows:,} against {expected:,} expected tonight" in d.cause
    ), d.cause
    assert _diagnose(ctx, s).classification is CauseClass.UNKNOWN  # no judgement of the rows: nothing said


@pytest.mark.parametrize("shape", SHAPES)
def test_a_month_end_missing_a_key_above_the_night_before_is_not_said_to_have_fallen(conn, shape):
    """A month-end at three times an ordinary night with one coarse key's rows all missing stands above the
    last good night: the cause says what it is against tonight's expectation, not that it "fell" from it."""
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    coarse = [c for c in {m[1] for m in s.members} if len(_fine(s, c)) == 1][0]
    _load(conn, ctx, s, {f: ((0.0 if c == coarse else 3.0), 1.0) for f, c, *_ in s.members})
    ordinary = sum(p * (0.8 + 0.1 * (i % 5)) for _, _, n, p in s.members for i in range(n))
    tonight = sum(p * (0.8 + 0.1 * (i % 5)) for _, c, n, p in s.members if c != coarse for i in range(3 * n))
    d = _diagnose(ctx, s, {"baseline": {"expected": 3 * ordinary, "value": tonight}})
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert f"{s.coarse}={coarse}" in [k.label for k in d.keys], d.cause
    assert "fell to" not in d.cause and f"{3 * ordinary:,.0f} expected tonight" in d.cause, d.cause
    # The expectation of another figure (a month-to-date total's judged increment) is not put against it.
    d = _diagnose(ctx, s, {"baseline": {"expected": 50.0, "value": 40.0}})
    assert "fell to" not in d.cause and "expected tonight" not in d.cause, d.cause


@pytest.mark.parametrize(
    "groups",
    [
        {
            "REGION=N": (5_000, 500),
            "REGION=S": (5_000, 520),
            "REGION=E": (4_000, 380),
            "REGION=W": (1_500, 150),
        },
        {"PHARMACY_ID=1": (900, 300), "PHARMACY_ID=2": (700, 240), "PHARMACY_ID=3": (400, 120)},
    ],
)
def test_a_group_whose_rows_fell_with_its_value_is_no_unit_change(groups):
    before = Recorded(business_date=NIGHTS[0], value=0, groups={g: v for g, (v, _) in groups.items()})
    rows0 = Recorded(business_date=NIGHTS[0], value=0, groups={g: n for g, (_, n) in groups.items()})
    moved = list(groups)[-1]
    tonight = before.model_copy(update={"groups": {**before.groups, moved: before.groups[moved] * 0.4}})
    lost = rows0.model_copy(update={"groups": {**rows0.groups, moved: rows0.groups[moved] * 0.4}})
    assert drill_groups(tonight, before, True, "mart/x", (lost, rows0)) is None
    # Its rows held and its value fell: a unit change, as without the rows on record.
    found = drill_groups(tonight, before, True, "mart/x", (rows0, rows0))
    assert found is not None and found.factor == pytest.approx(0.4)
    assert drill_groups(tonight, before, True, "mart/x") is not None
