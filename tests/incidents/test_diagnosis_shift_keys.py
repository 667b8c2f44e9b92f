"""A shift between groups traced to the reference row that moved it, where the fact's join key has several
columns (a lane: origin and destination) and where the group comes through a LEFT join to a lookup that
lost its row (the group turns NULL). Measured on DuckDB under fakesnow (the local Snowflake's engine) over a
small lineage graph: pickups -> lanes (two-column key, with a fee) -> carriers (the invoicing group); the
total sums weight and fee, so a key's units are read as the total's whole sum, not its first column."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db

from dw_dagster.checks.attributes import attribute_part, attribute_series, carried_attributes
from dw_dagster.checks.history import HistorySession, Recorded
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.group_shift import Judged, attribute_shift_diagnosis, judged_groups, trace_shift
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

BEFORE, TONIGHT = date(2025, 9, 24), date(2025, 9, 25)
LANES = [("N", "Z1", "C1", 20), ("S", "Z1", "C1", 20), ("N", "Z2", "C2", 20), ("S", "Z2", "C3", 5)]
CARRIERS = [("C1", "A"), ("C2", "B"), ("C3", "C")]
PICKUPS = [("N", "Z1", 60), ("S", "Z1", 40), ("N", "Z2", 50), ("S", "Z2", 30)]
DIM_JOIN = """FROM {{ ref('REF', 'LANES') }} "LANES"
LEFT JOIN {{ ref('REF', 'CARRIERS') }} "CARRIERS" ON "LANES"."CARRIER" = "CARRIERS"."CARRIER\""""
FCT_JOIN = """FROM {{ ref('RAW', 'PICKUPS') }} "PICKUPS"
INNER JOIN {{ ref('CORE', 'DIM_LANE') }} "DIM_LANE"
  ON "PICKUPS"."ORIGIN" = "DIM_LANE"."ORIGIN" AND "PICKUPS"."DEST" = "DIM_LANE"."DEST\""""
MART_JOIN = """FROM {{ ref('CORE', 'FCT') }} "FCT" GROUP BY "FCT"."GRP\""""


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


def _spec(key: str, table: str, columns: list[str], lineage: dict[str, list[tuple[str, str]]] | None = None,
          join: str | None = None) -> dg.AssetSpec:  # fmt: skip
    types = {
        c: {"KG": "NUMBER(38,0)", "AMOUNT": "NUMBER(38,0)", "DAY": "DATE"}.get(c, "VARCHAR") for c in columns
    }
    metadata = {
        "dagster/table_name": table,
        "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in types.items()]),
    }
    deps = sorted({k for ds in (lineage or {}).values() for k, _ in ds})
    if lineage:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(
            deps_by_column={
                c: [
                    dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(k), column_name=n) for k, n in ds
                ]
                for c, ds in lineage.items()
            }  # fmt: skip
        )
    if join:
        metadata["coalesce/join"] = join
        metadata["coalesce/node_type"] = "Fact"
    else:
        metadata["coalesce/node_type"] = "Source"
    return dg.AssetSpec(key, kinds={"coalesce"}, deps=deps, metadata=metadata)


def _lanes(dated: bool) -> LineageGraph:
    """The lanes' pipeline; ``dated``: the pickups and the fact keep their rows by DAY."""
    day = ["DAY"] if dated else []
    fact_day = {"DAY": [("raw/pickups", "DAY")]} if dated else {}
    return LineageGraph(
        [
            _spec("raw/pickups", "DB.RAW.PICKUPS", ["ORIGIN", "DEST", "KG", *day]),
            _spec("ref/lanes", "DB.REF.LANES", ["ORIGIN", "DEST", "CARRIER", "FEE"]),
            _spec("ref/carriers", "DB.REF.CARRIERS", ["CARRIER", "GRP"]),
            _spec("core/dim_lane", "DB.CORE.DIM_LANE", ["ORIGIN", "DEST", "CARRIER", "GRP", "FEE"],
                  {"ORIGIN": [("ref/lanes", "ORIGIN")], "DEST": [("ref/lanes", "DEST")],
                   "CARRIER": [("ref/lanes", "CARRIER")], "GRP": [("ref/carriers", "GRP")],
                   "FEE": [("ref/lanes", "FEE")]}, DIM_JOIN),
            _spec("core/fct", "DB.CORE.FCT", ["ORIGIN", "DEST", "CARRIER", "GRP", "KG", "FEE", *day],
                  {"ORIGIN": [("raw/pickups", "ORIGIN")], "DEST": [("raw/pickups", "DEST")],
                   "CARRIER": [("core/dim_lane", "CARRIER")], "GRP": [("core/dim_lane", "GRP")],
                   "KG": [("raw/pickups", "KG")], "FEE": [("core/dim_lane", "FEE")], **fact_day}, FCT_JOIN),
            _spec("mart/spend", "DB.MART.SPEND", ["GRP", "KG", "FEE"],
                  {"GRP": [("core/fct", "GRP")], "KG": [("core/fct", "KG")], "FEE": [("core/fct", "FEE")]}, MART_JOIN),
        ]
    )  # fmt: skip


GRAPH = _lanes(dated=False)
METRICS = MetricsFile.model_validate(
    {
        "totals": [
            {"name": "kg_by_group", "owner": "bi", "asset": "mart/spend", "group_keys": ["GRP"],
             "sql": "SELECT \"GRP\", SUM(\"KG\" + \"FEE\") AS \"VALUE\" FROM {{ ref('MART', 'SPEND') }} GROUP BY \"GRP\""}
        ]
    }
)  # fmt: skip


def _values(rows) -> str:
    return ", ".join(
        "(" + ", ".join(f"'{v}'" if isinstance(v, (str, date)) else str(v) for v in r) + ")" for r in rows
    )


@pytest.fixture
def ctx():
    with diagnosis_db("RAW", "REF", "CORE", "MART") as conn:
        cur = conn.cursor()
        cur.execute('CREATE TABLE "DB"."RAW"."PICKUPS" (ORIGIN VARCHAR, DEST VARCHAR, KG NUMBER(38,0))')
        cur.execute(f'INSERT INTO "DB"."RAW"."PICKUPS" VALUES {_values(PICKUPS)}')
        cur.execute(
            'CREATE TABLE "DB"."REF"."LANES" (ORIGIN VARCHAR, DEST VARCHAR, CARRIER VARCHAR, FEE NUMBER(38,0))'
        )
        cur.execute('CREATE TABLE "DB"."REF"."CARRIERS" (CARRIER VARCHAR, GRP VARCHAR)')
        yield DiagnosisContext(GRAPH, METRICS, _resolve, HistorySession(conn, OpsSchema("DB")), cur)


def _build(ctx, lanes, carriers) -> Recorded:
    """Tonight's reference rows, the nodes rebuilt as Coalesce would, and the total as recorded."""
    cur = ctx.cursor
    cur.execute('DELETE FROM "DB"."REF"."LANES"')
    cur.execute(f'INSERT INTO "DB"."REF"."LANES" VALUES {_values(lanes)}')
    cur.execute('DELETE FROM "DB"."REF"."CARRIERS"')
    cur.execute(f'INSERT INTO "DB"."REF"."CARRIERS" VALUES {_values(carriers)}')
    cur.execute('CREATE OR REPLACE TABLE "DB"."CORE"."DIM_LANE" AS SELECT "LANES"."ORIGIN", "LANES"."DEST", '
                '"LANES"."CARRIER", "CARRIERS"."GRP", "LANES"."FEE" ' + DIM_JOIN.replace("{{ ref('REF', 'LANES') }}", '"DB"."REF"."LANES"')
                .replace("{{ ref('REF', 'CARRIERS') }}", '"DB"."REF"."CARRIERS"'))  # fmt: skip
    cur.execute('CREATE OR REPLACE TABLE "DB"."CORE"."FCT" AS SELECT "PICKUPS"."ORIGIN", "PICKUPS"."DEST", '
                '"DIM_LANE"."CARRIER", "DIM_LANE"."GRP", "PICKUPS"."KG", "DIM_LANE"."FEE" ' + FCT_JOIN
                .replace("{{ ref('RAW', 'PICKUPS') }}", '"DB"."RAW"."PICKUPS"')
                .replace("{{ ref('CORE', 'DIM_LANE') }}", '"DB"."CORE"."DIM_LANE"'))  # fmt: skip
    cur.execute('SELECT "GRP", SUM("KG" + "FEE") FROM "DB"."CORE"."FCT" GROUP BY "GRP"')
    groups = {f"GRP={g}": float(v) for g, v in cur.fetchall()}
    return Recorded(business_date=TONIGHT, value=sum(groups.values()), groups=groups)


def test_a_lane_pointed_at_another_carrier_is_named_by_both_columns_of_its_key(ctx):
    before = _build(ctx, LANES, CARRIERS).model_copy(update={"business_date": BEFORE})
    tonight = _build(ctx, [("N", "Z1", "C2", 20), *LANES[1:]], CARRIERS)
    # As the check judged each group; group A's share steady to half a point on the good nights.
    judged = Judged(frozenset({"GRP=A"}), frozenset({"GRP=B"}), {"GRP=A": 0.005})
    shift = trace_shift(ctx, METRICS.totals[0], tonight, before, judged)
    assert shift is not None and shift.reference == "ref/lanes"
    (key,) = shift.keys  # lane N -> Z2 (70 units, in B all along) is beyond that noise
    assert key.parts == [("ORIGIN", "N"), ("DEST", "Z1")] and key.label == "ORIGIN=N, DEST=Z1"
    assert (
        key.units == 80
        and "now maps it to GRP=B; its 80 units tonight are about what GRP=A lost (80)" in (key.change or "")
    )


def test_a_carrier_deleted_behind_a_left_join_is_named_deleted_not_remapped(ctx):
    before = _build(ctx, LANES, CARRIERS).model_copy(update={"business_date": BEFORE})
    tonight = _build(ctx, LANES, CARRIERS[:2])
    assert tonight.groups["GRP=None"] == 35
    judged = Judged(frozenset({"GRP=C"}), frozenset({"GRP=None"}))
    shift = trace_shift(ctx, METRICS.totals[0], tonight, before, judged)
    assert shift is not None and shift.reference == "ref/carriers"
    (key,) = shift.keys
    assert key.label == "CARRIER=C3" and key.units == 35
    assert "deleted from" in (key.change or "") and "what GRP=C lost" in (key.change or "")


BY_ORIGIN = RecordedTotal.model_validate(
    {"name": "kg_by_origin", "owner": "bi", "asset": "core/fct", "group_keys": ["ORIGIN"],
     "sql": "SELECT \"ORIGIN\", SUM(\"KG\" + \"FEE\") AS \"VALUE\" FROM {{ ref('CORE', 'FCT') }} GROUP BY \"ORIGIN\""}
)  # fmt: skip


def test_an_attribute_no_total_groups_by_is_measured_and_its_shift_traced(ctx):
    # The fact carries the carrier's invoicing group from the carriers' table (two joins up); the total
    # groups by origin only. The lineage finds the attribute, with nothing configured.
    assert carried_attributes(GRAPH, BY_ORIGIN, ["KG", "FEE"]) == ["GRP"]
    part = attribute_part(BY_ORIGIN, resolve_refs(BY_ORIGIN.sql, _resolve), "GRP")
    assert part is not None
    series = attribute_series(BY_ORIGIN.name, "GRP")
    for day, lanes in ((BEFORE, LANES), (TONIGHT, [("N", "Z1", "C2", 20), *LANES[1:]])):
        _build(ctx, lanes, CARRIERS)
        ctx.cursor.execute(part.query.sql(dialect="snowflake"))
        groups = {f"GRP={g}": float(v) for g, v in ctx.cursor.fetchall()}
        ctx.history.record_metric(series, day, sum(groups.values()), groups, None, None)
    # The lane N -> Z1 now goes to carrier C2: 80 units moved from group A to group B, origin totals flat.
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                        severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name="total_kg_by_origin", asset_key="core/fct", business_date=TONIGHT,
                      summary="a shift between groups", cause_scope="job:x",
                      evidence={"attribute_shift": {"column": "GRP", "series": series, "moves": [
                          {"group": "GRP=A", "status": "lost"}, {"group": "GRP=B", "status": "gained"}]}})  # fmt: skip
    d = attribute_shift_diagnosis(incident, finding, BY_ORIGIN, ctx)
    assert d is not None and d.classification is CauseClass.REFERENCE_DATA_CHANGE, d
    assert d.keys[0].label == "ORIGIN=N, DEST=Z1" and "now maps it to GRP=B" in (d.keys[0].change or "")
    assert d.evidence["attribute"] == "GRP"


def test_a_lane_of_the_gaining_carrier_nearer_in_units_is_not_named_the_one_that_moved(ctx):
    # The lane N -> Z1 (80 units) goes to carrier C2, whose own lane N -> Z2 (70) was there all along. The
    # last good night was a different day: group A lost about 70 by its share, nearer the lane that stayed.
    # Tonight's mapping cannot tell the two apart: both are named, and neither is said to have been in A.
    tonight = _build(ctx, [("N", "Z1", "C2", 20), *LANES[1:]], CARRIERS)
    before = Recorded(business_date=BEFORE, value=245, groups={"GRP=A": 130, "GRP=B": 80, "GRP=C": 35})
    judged = Judged(frozenset({"GRP=A"}), frozenset({"GRP=B"}))
    shift = trace_shift(ctx, METRICS.totals[0], tonight, before, judged)
    assert shift is not None and shift.reference == "ref/lanes"
    assert {k.label for k in shift.keys} == {"ORIGIN=N, DEST=Z1", "ORIGIN=N, DEST=Z2"}
    for key in shift.keys:
        assert "cannot tell which of them moved" in (key.change or ""), key.change
        assert "it was in" not in (key.change or "")


# A marketplace's shape: order lines -> sellers (their account) -> accounts (their region), two joins above
# the fact; the fact carries the seller, its account and the region, and keeps its rows by DAY (rebuilt whole
# each night, its rows of every day carry tonight's mapping).
SELLER_JOIN = """FROM {{ ref('REF', 'SELLERS') }} "SELLERS"
INNER JOIN {{ ref('REF', 'ACCOUNTS') }} "ACCOUNTS" ON "SELLERS"."ACCOUNT_ID" = "ACCOUNTS"."ACCOUNT_ID\""""
LINES_JOIN = """FROM {{ ref('RAW', 'LINES') }} "LINES"
INNER JOIN {{ ref('CORE', 'DIM_SELLER') }} "DIM_SELLER" ON "LINES"."SELLER_ID" = "DIM_SELLER"."SELLER_ID\""""
SELLER_GRAPH = LineageGraph(
    [
        _spec("raw/lines", "DB.RAW.LINES", ["SELLER_ID", "AMOUNT", "DAY"]),
        _spec("ref/sellers", "DB.REF.SELLERS", ["SELLER_ID", "ACCOUNT_ID"]),
        _spec("ref/accounts", "DB.REF.ACCOUNTS", ["ACCOUNT_ID", "REGION"]),
        _spec("core/dim_seller", "DB.CORE.DIM_SELLER", ["SELLER_ID", "ACCOUNT_ID", "REGION"],
              {"SELLER_ID": [("ref/sellers", "SELLER_ID")], "ACCOUNT_ID": [("ref/sellers", "ACCOUNT_ID")],
               "REGION": [("ref/accounts", "REGION")]}, SELLER_JOIN),
        _spec("core/fct_lines", "DB.CORE.FCT_LINES", ["SELLER_ID", "ACCOUNT_ID", "REGION", "AMOUNT", "DAY"],
              {"SELLER_ID": [("raw/lines", "SELLER_ID")], "ACCOUNT_ID": [("core/dim_seller", "ACCOUNT_ID")],
               "REGION": [("core/dim_seller", "REGION")], "AMOUNT": [("raw/lines", "AMOUNT")],
               "DAY": [("raw/lines", "DAY")]}, LINES_JOIN),
    ]
)  # fmt: skip
BY_REGION = RecordedTotal.model_validate(
    {"name": "amount_by_region", "owner": "fin", "asset": "core/fct_lines", "group_keys": ["REGION"],
     "sql": "SELECT \"REGION\", SUM(\"AMOUNT\") AS \"VALUE\" FROM {{ ref('CORE', 'FCT_LINES') }} GROUP BY 1"}
)  # fmt: skip
SELLERS = [("S1", "A1"), ("S2", "A2"), ("S3", "A3"), ("S4", "A3")]
LINES = [("S1", 100, TONIGHT), ("S2", 80, TONIGHT), ("S3", 95, TONIGHT), ("S4", 50, TONIGHT)]


@pytest.fixture
def sellers_ctx():
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        cur = conn.cursor()
        cur.execute('CREATE TABLE "DB"."RAW"."LINES" (SELLER_ID VARCHAR, AMOUNT NUMBER(38,0), DAY DATE)')
        cur.execute(f'INSERT INTO "DB"."RAW"."LINES" VALUES {_values(LINES)}')
        cur.execute('CREATE TABLE "DB"."REF"."SELLERS" (SELLER_ID VARCHAR, ACCOUNT_ID VARCHAR)')
        cur.execute(f'INSERT INTO "DB"."REF"."SELLERS" VALUES {_values(SELLERS)}')
        cur.execute('CREATE TABLE "DB"."REF"."ACCOUNTS" (ACCOUNT_ID VARCHAR, REGION VARCHAR)')
        metrics = MetricsFile.model_validate({"totals": [BY_REGION.model_dump()]})
        yield DiagnosisContext(SELLER_GRAPH, metrics, _resolve, HistorySession(conn, OpsSchema("DB")), cur)


def _build_lines(ctx, accounts, day=TONIGHT) -> Recorded:
    cur = ctx.cursor
    cur.execute('DELETE FROM "DB"."REF"."ACCOUNTS"')
    cur.execute(f'INSERT INTO "DB"."REF"."ACCOUNTS" VALUES {_values(accounts)}')
    cur.execute('CREATE OR REPLACE TABLE "DB"."CORE"."DIM_SELLER" AS SELECT "SELLERS"."SELLER_ID", '
                '"SELLERS"."ACCOUNT_ID", "ACCOUNTS"."REGION" ' + SELLER_JOIN
                .replace("{{ ref('REF', 'SELLERS') }}", '"DB"."REF"."SELLERS"')
                .replace("{{ ref('REF', 'ACCOUNTS') }}", '"DB"."REF"."ACCOUNTS"'))  # fmt: skip
    cur.execute('CREATE OR REPLACE TABLE "DB"."CORE"."FCT_LINES" AS SELECT "LINES"."SELLER_ID", '
                '"DIM_SELLER"."ACCOUNT_ID", "DIM_SELLER"."REGION", "LINES"."AMOUNT", "LINES"."DAY" ' + LINES_JOIN
                .replace("{{ ref('RAW', 'LINES') }}", '"DB"."RAW"."LINES"')
                .replace("{{ ref('CORE', 'DIM_SELLER') }}", '"DB"."CORE"."DIM_SELLER"'))  # fmt: skip
    cur.execute(
        'SELECT "REGION", SUM("AMOUNT") FROM "DB"."CORE"."FCT_LINES" WHERE "DAY" = ? GROUP BY 1', (day,)
    )
    groups = {f"REGION={g}": float(v) for g, v in cur.fetchall()}
    return Recorded(business_date=day, value=sum(groups.values()), groups=groups)


def _nights(americas_shares: list[float], value: float) -> list[Recorded]:
    return [
        Recorded(business_date=date(2025, 9, 10 + i), value=value,
                 groups={"REGION=AMERICAS": s * value, "REGION=ASIA": (1 - s) * value})
        for i, s in enumerate(americas_shares)
    ]  # fmt: skip


def test_an_account_moved_two_joins_up_is_named_not_a_seller_of_its_new_region_nearer_in_units(sellers_ctx):
    # Account A2 (seller S2, 80 units tonight) is pointed at ASIA, where account A3's seller S3 (95) sold
    # all along. AMERICAS' share swings from night to night, so what it lost against the last good night
    # (about 97) is known only to that noise: S3 is nearer, within 15%, A2 is not, yet A2 is the one key of
    # the furthest lookup up that carries the loss within the noise of AMERICAS' share.
    tonight = _build_lines(sellers_ctx, [("A1", "AMERICAS"), ("A2", "ASIA"), ("A3", "ASIA")])
    assert tonight.groups == {"REGION=AMERICAS": 100, "REGION=ASIA": 225}
    before = Recorded(business_date=BEFORE, value=330, groups={"REGION=AMERICAS": 200, "REGION=ASIA": 130})
    moves = [{"group": "REGION=AMERICAS", "status": "lost"}, {"group": "REGION=ASIA", "status": "gained"}]
    judged = judged_groups(moves, None, lambda: _nights([0.55, 0.6, 0.65, 0.58, 0.62], 330), tonight)
    shift = trace_shift(sellers_ctx, BY_REGION, tonight, before, judged)
    assert shift is not None and shift.reference == "ref/accounts"
    (key,) = shift.keys
    assert key.label == "ACCOUNT_ID=A2" and key.units == 80
    assert "now maps it to REGION=ASIA" in (key.change or "") and "it was in" not in (key.change or "")


def _three_regions(ctx, lines, accounts, before: dict[str, float], shares: list[tuple[float, float]]):
    """Tonight's lines and accounts (seller S5 of account A4 in EUROPE added), the last good night's groups,
    and good nights at ``shares`` of AMERICAS and ASIA (EUROPE the rest): the shift traced as the job does."""
    cur = ctx.cursor
    cur.execute('INSERT INTO "DB"."REF"."SELLERS" VALUES (\'S5\', \'A4\')')
    cur.execute('DELETE FROM "DB"."RAW"."LINES"')
    cur.execute(f'INSERT INTO "DB"."RAW"."LINES" VALUES {_values([(s, n, TONIGHT) for s, n in lines])}')
    tonight = _build_lines(ctx, accounts)
    value = sum(before.values())
    nights = [
        Recorded(business_date=date(2025, 9, 10 + i), value=value,
                 groups={"REGION=AMERICAS": value * a, "REGION=ASIA": value * b, "REGION=EUROPE": value * (1 - a - b)})
        for i, (a, b) in enumerate(shares)
    ]  # fmt: skip
    last = Recorded(business_date=BEFORE, value=value, groups={f"REGION={g}": v for g, v in before.items()})
    moves = [{"group": "REGION=AMERICAS", "status": "lost"}, {"group": "REGION=ASIA", "status": "gained"}]
    return trace_shift(ctx, BY_REGION, tonight, last, judged_groups(moves, None, lambda: nights, tonight))


def test_an_account_moved_on_a_busy_night_of_its_old_region_is_named_by_what_its_new_region_gained(
    sellers_ctx,
):
    # Account A2 (seller S2, 80 units) is pointed at ASIA on a night AMERICAS' other seller sold 50 more and
    # EUROPE's 50 less: by its share AMERICAS lost only 30, which no account now in ASIA carries, but which is
    # within AMERICAS' own noise of ASIA's sellers S4 (40) and S3 (60). ASIA, steady on the good nights,
    # gained 80: A2's, the account of the furthest lookup up, is named, not a seller that never moved.
    shift = _three_regions(
        sellers_ctx,
        [("S1", 150), ("S2", 80), ("S3", 60), ("S4", 40), ("S5", 70)],
        [("A1", "AMERICAS"), ("A2", "ASIA"), ("A3", "ASIA"), ("A4", "EUROPE")],
        {"AMERICAS": 180, "ASIA": 100, "EUROPE": 120},
        [(0.40, 0.25), (0.45, 0.251), (0.50, 0.249), (0.42, 0.25), (0.48, 0.25)],
    )
    assert shift is not None and shift.reference == "ref/accounts", shift and shift.keys
    (key,) = shift.keys
    assert key.label == "ACCOUNT_ID=A2" and key.units == 80
    assert "now maps it to REGION=ASIA; its 80 units tonight are about what REGION=ASIA gained (80)" in (
        key.change or ""
    ), key.change


def test_a_seller_re_pointed_into_a_noisy_region_is_named_not_the_account_it_joined(sellers_ctx):
    # Seller S2 (80 units) is re-pointed from account A2 (AMERICAS) to A3 (ASIA, 60 units of its own).
    # AMERICAS' share is steady on the good nights, ASIA's is not: what AMERICAS lost (80) is the nearer
    # measure, and A3's 140 units now in ASIA, within ASIA's own noise of what it gained, moved nothing.
    sellers_ctx.cursor.execute(
        'UPDATE "DB"."REF"."SELLERS" SET "ACCOUNT_ID" = \'A3\' WHERE "SELLER_ID" = \'S2\''
    )
    shift = _three_regions(
        sellers_ctx,
        [("S1", 100), ("S2", 80), ("S3", 60), ("S5", 60)],
        [("A1", "AMERICAS"), ("A2", "AMERICAS"), ("A3", "ASIA"), ("A4", "EUROPE")],
        {"AMERICAS": 180, "ASIA": 60, "EUROPE": 60},
        [(0.6, 0.1), (0.601, 0.3), (0.599, 0.15), (0.6, 0.25), (0.6, 0.2)],
    )
    assert shift is not None and shift.reference == "ref/sellers", shift and shift.keys
    (key,) = shift.keys
    assert key.label == "SELLER_ID=S2" and "about what REGION=AMERICAS lost (80)" in (key.change or ""), key


def test_no_key_is_named_where_none_carries_the_loss_within_its_noise(sellers_ctx):
    # The same night, AMERICAS' share steady on the good nights: what it lost is known to the unit, and no
    # key now in ASIA carries it (S3, in ASIA all along, comes nearest). None is named rather than S3, and
    # a shift named by no row is none: the finding's other evidence is read instead.
    tonight = _build_lines(sellers_ctx, [("A1", "AMERICAS"), ("A2", "ASIA"), ("A3", "ASIA")])
    before = Recorded(business_date=BEFORE, value=330, groups={"REGION=AMERICAS": 200, "REGION=ASIA": 130})
    moves = [{"group": "REGION=AMERICAS", "status": "lost"}, {"group": "REGION=ASIA", "status": "gained"}]
    judged = judged_groups(moves, None, lambda: _nights([0.606, 0.606, 0.606], 330), tonight)
    assert trace_shift(sellers_ctx, BY_REGION, tonight, before, judged) is None


def test_the_last_good_nights_rows_show_which_account_moved_though_a_seller_is_nearer_in_units(sellers_ctx):
    # The fact keeps every day's lines, each rebuilt with tonight's mapping. A2 (seller S2) is pointed at
    # ASIA; AMERICAS' S1 sold more tonight, so what AMERICAS lost by its share (about 40) is nearest S4's 40
    # units, in ASIA all along, and A2's 60 are beyond 15% of it. The last good night's rows, mapped as
    # tonight, put A2's 60 units of that night in ASIA where AMERICAS recorded them: A2 alone is named.
    cur = sellers_ctx.cursor
    cur.execute('DELETE FROM "DB"."RAW"."LINES"')
    night = [("S1", 100, BEFORE), ("S2", 60, BEFORE), ("S3", 95, BEFORE), ("S4", 50, BEFORE)]
    cur.execute(f'INSERT INTO "DB"."RAW"."LINES" VALUES {_values(night)}')
    before = _build_lines(sellers_ctx, [("A1", "AMERICAS"), ("A2", "AMERICAS"), ("A3", "ASIA")], BEFORE)
    night = [("S1", 130, TONIGHT), ("S2", 60, TONIGHT), ("S3", 95, TONIGHT), ("S4", 40, TONIGHT)]
    cur.execute(f'INSERT INTO "DB"."RAW"."LINES" VALUES {_values(night)}')
    tonight = _build_lines(sellers_ctx, [("A1", "AMERICAS"), ("A2", "ASIA"), ("A3", "ASIA")])
    judged = Judged(frozenset({"REGION=AMERICAS"}), frozenset({"REGION=ASIA"}))
    shift = trace_shift(sellers_ctx, BY_REGION, tonight, before, judged)
    assert shift is not None and shift.reference == "ref/accounts"
    (key,) = shift.keys
    assert key.label == "ACCOUNT_ID=A2" and key.units == 60
    assert (
        "now maps it to REGION=ASIA; on 2025-09-24 its 60 units were in REGION=AMERICAS's recorded total"
        in (key.change or "")
    ), key.change


def test_an_appended_facts_last_good_night_shows_the_lane_that_moved_not_the_nearer_one_of_its_carrier():
    # A fact appended nightly: the last good night's rows keep that night's mapping. Lane N -> Z1 goes to
    # carrier C2 (group B); B's own lane N -> Z2 grew tonight and is nearer what A lost by its share.
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        cur = conn.cursor()
        cur.execute(
            'CREATE TABLE "DB"."RAW"."PICKUPS" (ORIGIN VARCHAR, DEST VARCHAR, KG NUMBER(38,0), DAY DATE)'
        )
        cur.execute(
            'CREATE TABLE "DB"."REF"."LANES" (ORIGIN VARCHAR, DEST VARCHAR, CARRIER VARCHAR, FEE NUMBER(38,0))'
        )
        cur.execute('CREATE TABLE "DB"."REF"."CARRIERS" (CARRIER VARCHAR, GRP VARCHAR)')
        cur.execute(f'INSERT INTO "DB"."REF"."CARRIERS" VALUES {_values(CARRIERS)}')
        cur.execute('CREATE TABLE "DB"."CORE"."FCT" (ORIGIN VARCHAR, DEST VARCHAR, CARRIER VARCHAR, GRP VARCHAR,'
                    ' KG NUMBER(38,0), FEE NUMBER(38,0), DAY DATE)')  # fmt: skip
        total = RecordedTotal.model_validate(
            {"name": "kg_by_group", "owner": "bi", "asset": "core/fct", "group_keys": ["GRP"],
             "sql": "SELECT \"GRP\", SUM(\"KG\" + \"FEE\") AS \"VALUE\" FROM {{ ref('CORE', 'FCT') }} GROUP BY 1"}
        )  # fmt: skip
        metrics = MetricsFile.model_validate({"totals": [total.model_dump()]})
        ctx = DiagnosisContext(
            _lanes(dated=True), metrics, _resolve, HistorySession(conn, OpsSchema("DB")), cur
        )
        recorded = {}
        for day, lanes, kg in (
            (BEFORE, LANES, [60, 40, 50, 30]),
            (TONIGHT, [("N", "Z1", "C2", 20), *LANES[1:]], [50, 45, 65, 30]),
        ):
            picks = [(o, d, k, day) for (o, d, _), k in zip(PICKUPS, kg, strict=True)]
            cur.execute(f'INSERT INTO "DB"."RAW"."PICKUPS" VALUES {_values(picks)}')
            cur.execute('DELETE FROM "DB"."REF"."LANES"')
            cur.execute(f'INSERT INTO "DB"."REF"."LANES" VALUES {_values(lanes)}')
            cur.execute(
                'INSERT INTO "DB"."CORE"."FCT" SELECT P."ORIGIN", P."DEST", L."CARRIER", C."GRP", P."KG", L."FEE",'
                ' P."DAY" FROM "DB"."RAW"."PICKUPS" P JOIN "DB"."REF"."LANES" L ON P."ORIGIN" = L."ORIGIN"'
                ' AND P."DEST" = L."DEST" LEFT JOIN "DB"."REF"."CARRIERS" C ON L."CARRIER" = C."CARRIER"'
                ' WHERE P."DAY" = ?',
                (day,),
            )
            cur.execute(
                'SELECT "GRP", SUM("KG" + "FEE") FROM "DB"."CORE"."FCT" WHERE "DAY" = ? GROUP BY 1', (day,)
            )
            groups = {f"GRP={g}": float(v) for g, v in cur.fetchall()}
            recorded[day] = Recorded(business_date=day, value=sum(groups.values()), groups=groups)
        tonight, before = recorded[TONIGHT], recorded[BEFORE]
        assert tonight.groups == {"GRP=A": 65, "GRP=B": 155, "GRP=C": 35}
        shift = trace_shift(ctx, total, tonight, before, Judged(frozenset({"GRP=A"}), frozenset({"GRP=B"})))
        assert shift is not None and shift.reference == "ref/lanes"
        (key,) = shift.keys
        assert key.label == "ORIGIN=N, DEST=Z1" and key.units == 70
        assert "on 2025-09-24 its 80 units were in GRP=A's recorded total, not GRP=B's" in (key.change or "")
