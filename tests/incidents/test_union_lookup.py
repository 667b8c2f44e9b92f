"""A lookup that unions two registers of one kind of row (``FROM (SELECT ... FROM A UNION ALL SELECT ... FROM
B) "ALL"``) and joins a parent lookup, which joins a grandparent: a row deleted two joins above the fact, or a
new key in the second register whose parent nobody added, is named where it is, not as the fact's keys. The
subquery's columns are read by position (the second register names its columns its own way), and a key is in
the reference when either register holds it. Two shapes: payments by account (retail and corporate accounts;
branch -> region) and shipments by SKU (own and marketplace listings; supplier -> country). On DuckDB under
fakesnow, the diagnosis as the job runs it (``value_loss.diagnose_fall``)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from diagnosis_db import diagnose_total_fall, diagnosis_db, node_spec

from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.context.joins import parse_node
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.records.incidents import CauseClass

TONIGHT = date(2026, 5, 12)

# fact, key, measure; register A (table, key, parent); register B (table, key, parent); parent (table, key,
# grandparent key); grandparent table; {key: (register, parent, amount)}; {parent: grandparent}
SHAPES = {
    "accounts": ("PAYMENTS", "ACCOUNT_ID", "AMOUNT", ("RETAIL_ACCOUNTS", "ACCOUNT_ID", "BRANCH_ID"),
                 ("CORPORATE_ACCOUNTS", "CORP_ACCOUNT_NO", "HOME_BRANCH"), ("BRANCHES", "BRANCH_ID", "REGION_ID"),
                 "REGIONS", {"A1": ("A", "B1", 120), "A2": ("A", "B2", 80), "A3": ("B", "B2", 300),
                             "A4": ("B", "B3", 45), "A5": ("A", "B3", 60)}, {"B1": "R1", "B2": "R2", "B3": "R2"}),
    "skus": ("SHIPMENTS", "SKU", "UNITS", ("OWN_SKUS", "SKU", "SUPPLIER_ID"),
             ("MARKETPLACE_SKUS", "LISTING_SKU", "VENDOR_ID"), ("SUPPLIERS", "SUPPLIER_ID", "COUNTRY_ID"),
             "COUNTRIES", {"S1": ("A", "V1", 14), "S2": ("B", "V2", 33), "S3": ("B", "V3", 21), "S4": ("A", "V3", 9)},
             {"V1": "C1", "V2": "C2", "V3": "C2"}),
}  # fmt: skip


def _texts(shape: str) -> tuple[str, str, str, str]:
    """The join text of the parent lookup, the key lookup (the union), the stage of the latest day's rows and
    the fact's node."""
    fact, key, _, (ra, ka, pa), (rb, kb, pb), (par, pk, gk), grand, _, _ = SHAPES[shape]
    parent = (f"FROM {{{{ ref('REF', '{par}') }}}} \"P\"\n"
              f"INNER JOIN {{{{ ref('REF', '{grand}') }}}} \"G\" ON \"P\".\"{gk}\" = \"G\".\"{gk}\"")  # fmt: skip
    keys = (f"FROM (\n  SELECT \"{ka}\", \"{pa}\", 'own' AS \"ORIGIN\" FROM {{{{ ref('REF', '{ra}') }}}}\n"
            f"  UNION ALL\n  SELECT \"{kb}\", \"{pb}\", 'other' FROM {{{{ ref('REF', '{rb}') }}}}\n) \"ALL_KEYS\"\n"
            f"INNER JOIN {{{{ ref('CORE', 'DIM_PARENT') }}}} \"DP\" ON \"ALL_KEYS\".\"{pa}\" = \"DP\".\"{pk}\"")  # fmt: skip
    stage = (f"FROM {{{{ ref('RAW', '{fact}') }}}} \"F\"\n"
             f"WHERE \"F\".\"ON_DAY\" = (SELECT MAX(\"ON_DAY\") FROM {{{{ ref('RAW', '{fact}') }}}})")  # fmt: skip
    fct = (f"FROM {{{{ ref('CORE', 'STG') }}}} \"F\"\n"
           f"INNER JOIN {{{{ ref('CORE', 'DIM_KEY') }}}} \"DK\" ON \"F\".\"{key}\" = \"DK\".\"{ka}\"")  # fmt: skip
    return parent, keys, stage, fct


def _graph(shape: str) -> LineageGraph:
    fact, key, measure, (ra, ka, pa), (rb, kb, pb), (par, pk, gk), grand, _, _ = SHAPES[shape]
    parent, keys, stage, fct = _texts(shape)
    f, a, b, p, g = (f"raw/{fact.lower()}", f"ref/{ra.lower()}", f"ref/{rb.lower()}", f"ref/{par.lower()}",
                     f"ref/{grand.lower()}")  # fmt: skip
    return LineageGraph([
        node_spec(f, f"DB.RAW.{fact}", {key: "VARCHAR", measure: "NUMBER(38,0)", "ON_DAY": "DATE"}),
        node_spec(a, f"DB.REF.{ra}", {ka: "VARCHAR", pa: "VARCHAR"}),
        node_spec(b, f"DB.REF.{rb}", {kb: "VARCHAR", pb: "VARCHAR"}),
        node_spec(p, f"DB.REF.{par}", {pk: "VARCHAR", gk: "VARCHAR"}),
        node_spec(g, f"DB.REF.{grand}", {gk: "VARCHAR", "NAME": "VARCHAR"}),
        node_spec("core/dim_parent", "DB.CORE.DIM_PARENT", {pk: "VARCHAR", gk: "VARCHAR", "NAME": "VARCHAR"},
                  {pk: [(p, pk)], gk: [(p, gk)], "NAME": [(g, "NAME")]}, parent),
        node_spec("core/dim_key", "DB.CORE.DIM_KEY", {ka: "VARCHAR", pa: "VARCHAR", "NAME": "VARCHAR"},
                  {ka: [(a, ka), (b, kb)], pa: [(a, pa), (b, pb)], "NAME": [("core/dim_parent", "NAME")]}, keys),
        node_spec("core/stg", "DB.CORE.STG", {key: "VARCHAR", measure: "NUMBER(38,0)", "ON_DAY": "DATE"},
                  {key: [(f, key)], measure: [(f, measure)], "ON_DAY": [(f, "ON_DAY")]}, stage),
        node_spec("core/fct", "DB.CORE.FCT", {key: "VARCHAR", measure: "NUMBER(38,0)", "NAME": "VARCHAR"},
                  {key: [("core/stg", key)], measure: [("core/stg", measure)], "NAME": [("core/dim_key", "NAME")]},
                  fct),
    ])  # fmt: skip


def _diagnosed(shape: str, fault: str):
    """The world of ``shape`` built tonight with ``fault`` (``grandparent_deleted``: the grandparent of the
    second register's largest key deleted; ``new_key_parent_missing``: a new key in the second register whose
    parent no table holds), and the diagnosis of the total's fall by the units lost."""
    fact, key, measure, (ra, ka, pa), (rb, kb, pb), (par, pk, gk), grand, keys, parents = SHAPES[shape]
    keys = dict(keys)
    grandparents = sorted(set(parents.values()))
    lost_grand = parents[max((v for v in keys.values() if v[0] == "B"), key=lambda v: v[2])[1]]
    if fault == "new_key_parent_missing":
        keys["N9"] = ("B", "P404", 77)
    if fault == "grandparent_deleted":
        grandparents.remove(lost_grand)
    parent_text, keys_text, stage_text, fct_text = _texts(shape)
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        cur = conn.cursor()
        cur.execute(
            f'CREATE TABLE "DB"."RAW"."{fact}" ("{key}" VARCHAR, "{measure}" NUMBER(38,0), "ON_DAY" DATE)'
        )
        for table, k, p in ((ra, ka, pa), (rb, kb, pb)):
            cur.execute(f'CREATE TABLE "DB"."REF"."{table}" ("{k}" VARCHAR, "{p}" VARCHAR)')
        cur.execute(f'CREATE TABLE "DB"."REF"."{par}" ("{pk}" VARCHAR, "{gk}" VARCHAR)')
        cur.execute(f'CREATE TABLE "DB"."REF"."{grand}" ("{gk}" VARCHAR, "NAME" VARCHAR)')
        for k, (register, parent, amount) in keys.items():
            cur.execute(
                f'INSERT INTO "DB"."REF"."{ra if register == "A" else rb}" VALUES (?, ?)', (k, parent)
            )
            for back in (0, 1, 2) if k != "N9" else (0,):
                cur.execute(f'INSERT INTO "DB"."RAW"."{fact}" VALUES (?, ?, ?)',
                            (k, amount, TONIGHT - timedelta(days=back)))  # fmt: skip
        cur.executemany(f'INSERT INTO "DB"."REF"."{par}" VALUES (?, ?)', list(parents.items()))
        cur.executemany(
            f'INSERT INTO "DB"."REF"."{grand}" VALUES (?, ?)', [(g, g.lower()) for g in grandparents]
        )
        resolve = {"RAW": "RAW", "REF": "REF", "CORE": "CORE"}
        built = (("DIM_PARENT", parent_text), ("DIM_KEY", keys_text), ("STG", stage_text), ("FCT", fct_text))
        for name, text in built:
            rendered = text
            for loc in resolve:
                rendered = rendered.replace(f"{{{{ ref('{loc}', '", f'"DB"."{loc}"."').replace("') }}", '"')
            cur.execute(f'CREATE TABLE "DB"."CORE"."{name}" AS SELECT * {rendered}')
        total = RecordedTotal(name="amount", owner="ops", asset="core/fct",
                              sql=f"SELECT SUM(\"{measure}\") AS \"VALUE\" FROM {{{{ ref('CORE', 'FCT') }}}}")  # fmt: skip
        cur.execute(f'SELECT SUM("{measure}") FROM "DB"."CORE"."FCT"')
        kept = float(cur.fetchone()[0] or 0)
        lost = sum(v[2] for v in keys.values()) - kept
        return diagnose_total_fall(conn, _graph(shape), total, TONIGHT, lost), lost, lost_grand


@pytest.mark.parametrize("shape", SHAPES)
def test_the_union_of_registers_is_a_join_left_side_read_by_position(shape):
    _, _, _, (ra, ka, pa), (rb, kb, pb), (_, pk, _), _, _, _ = SHAPES[shape]
    (join,) = parse_node("dim_key", _texts(shape)[1], lambda loc, name: f'"DB"."{loc}"."{name}"').joins
    assert join.derived is not None and join.kind == "INNER" and join.on == [(pa, pk)]
    assert join.left_sources(pa) == [(f'"DB"."REF"."{ra}"', pa), (f'"DB"."REF"."{rb}"', pb)]
    assert join.derived.column_for(f'"DB"."REF"."{rb}"', kb) == ka
    assert join.left_from().startswith("(SELECT") and "UNION ALL" in join.left_from()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_row_deleted_two_joins_above_a_union_of_registers_is_named_where_it_was_deleted(shape):
    d, lost, grand = _diagnosed(shape, "grandparent_deleted")
    assert d is not None, "no join or filter explained the fall"
    gk, grand_table = SHAPES[shape][5][2], SHAPES[shape][6]
    assert d.classification == CauseClass.REFERENCE_DATA_CHANGE, d.cause
    assert d.keys[0].label == f"{gk}={grand}", [k.label for k in d.keys]
    assert "deleted from" in d.keys[0].change and grand_table in d.keys[0].change, d.keys[0].change
    # The keys that hold nine tenths of the fall are listed after it, each a key of either register.
    assert d.evidence["lookup_node"] == "core/dim_parent" and lost >= d.keys[0].units >= 0.9 * lost


@pytest.mark.parametrize("shape", SHAPES)
def test_a_new_key_of_the_second_register_whose_parent_is_missing_is_named_by_its_parent(shape):
    d, lost, _ = _diagnosed(shape, "new_key_parent_missing")
    assert d is not None and lost == 77, "no join or filter explained the fall"
    pa = SHAPES[shape][3][2]
    assert d.keys[0].label == f"{pa}=P404", [k.label for k in d.keys]
    assert "deleted" not in d.keys[0].change and "new" in d.keys[0].change, d.keys[0].change
    assert d.evidence["lookup_node"] == "core/dim_key"


def test_a_join_on_the_union_that_other_conditions_also_filter_is_not_read_as_a_plain_join():
    """A WHERE on the union, or an ON that also equates another table's column, drops rows the join's
    equality alone would not: the join is not measured as if it were plain."""
    union = (
        "FROM (SELECT \"K\", \"P\" FROM {{ ref('REF', 'A') }} UNION ALL SELECT \"K2\", \"P2\" FROM {{ ref('REF', 'B') }})"
        ' "U"\nINNER JOIN {{ ref(\'REF\', \'C\') }} "C" ON "U"."P" = "C"."P"'
    )
    resolve = lambda loc, name: f'"DB"."{loc}"."{name}"'  # noqa: E731
    assert [j.derived is not None for j in parse_node("n", union, resolve).joins] == [True]
    assert parse_node("n", union + '\nWHERE "U"."K" <> \'Z\'', resolve).joins == []
    also = union + '\nINNER JOIN {{ ref(\'REF\', \'D\') }} "D" ON "D"."K" = "U"."K" AND "D"."Y" = "C"."Y"'
    assert [j.right_table for j in parse_node("n", also, resolve).joins] == ['"DB"."REF"."C"']


@pytest.mark.parametrize("shape", SHAPES)
def test_a_fact_that_unions_two_sources_loses_its_measure_not_a_count_of_rows(shape):
    """The fact's own FROM is the union (two regions' feeds of one layout, the second naming its columns its
    own way) and it joins the key lookup: what the join drops is counted in the total's units, read from
    whichever input carries the measure, and a key new in the second feed is new there."""
    fact, key, measure, (ra, ka, _), _, _, _, keys, _ = SHAPES[shape]
    a, b, dim = f"raw/{fact.lower()}_a", f"raw/{fact.lower()}_b", f"ref/{ra.lower()}"
    text = (f"FROM (SELECT \"{key}\", \"{measure}\" FROM {{{{ ref('RAW', '{fact}_A') }}}}\n"
            f"  UNION ALL SELECT \"OTHER_KEY\", \"OTHER_{measure}\" FROM {{{{ ref('RAW', '{fact}_B') }}}}) \"U\"\n"
            f"INNER JOIN {{{{ ref('REF', '{ra}') }}}} \"D\" ON \"U\".\"{key}\" = \"D\".\"{ka}\"")  # fmt: skip
    graph = LineageGraph([
        node_spec(a, f"DB.RAW.{fact}_A", {key: "VARCHAR", measure: "NUMBER(38,0)", "ON_DAY": "DATE"}),
        node_spec(b, f"DB.RAW.{fact}_B", {"OTHER_KEY": "VARCHAR", f"OTHER_{measure}": "NUMBER(38,0)", "ON_DAY": "DATE"}),
        node_spec(dim, f"DB.REF.{ra}", {ka: "VARCHAR"}),
        node_spec("core/fct", "DB.CORE.FCT", {key: "VARCHAR", measure: "NUMBER(38,0)"},
                  {key: [(a, key), (b, "OTHER_KEY")], measure: [(a, measure), (b, f"OTHER_{measure}")]}, text),
    ])  # fmt: skip
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        cur = conn.cursor()
        cur.execute(
            f'CREATE TABLE "DB"."RAW"."{fact}_A" ("{key}" VARCHAR, "{measure}" NUMBER(38,0), "ON_DAY" DATE)'
        )
        cur.execute(
            f'CREATE TABLE "DB"."RAW"."{fact}_B" ("OTHER_KEY" VARCHAR, "OTHER_{measure}" NUMBER(38,0), "ON_DAY" DATE)'
        )
        cur.execute(f'CREATE TABLE "DB"."REF"."{ra}" ("{ka}" VARCHAR)')
        for i, (k, (_, _, amount)) in enumerate(keys.items()):
            cur.execute(
                f'INSERT INTO "DB"."RAW"."{fact}_{"AB"[i % 2]}" VALUES (?, ?, ?)',
                (k, amount, TONIGHT - timedelta(days=3)),
            )
            cur.execute(f'INSERT INTO "DB"."REF"."{ra}" VALUES (?)', (k,))
        cur.execute(f'INSERT INTO "DB"."RAW"."{fact}_B" VALUES (?, ?, ?)', ("N9", 77, TONIGHT))
        rendered = (
            text.replace("{{ ref('RAW', '", '"DB"."RAW"."')
            .replace("{{ ref('REF', '", '"DB"."REF"."')
            .replace("') }}", '"')
        )
        cur.execute(f'CREATE TABLE "DB"."CORE"."FCT" AS SELECT "U".* {rendered}')
        total = RecordedTotal(name="amount", owner="ops", asset="core/fct",
                              sql=f"SELECT SUM(\"{measure}\") AS \"VALUE\" FROM {{{{ ref('CORE', 'FCT') }}}}")  # fmt: skip
        d = diagnose_total_fall(conn, graph, total, TONIGHT, 77.0)
    assert d is not None and d.joins[0].dropped_units == 77 and d.joins[0].dropped_rows == 1, d and d.joins
    (gap,) = d.keys
    assert gap.label == f"{key}=N9" and f"is new in raw/{fact.lower()}_b" in gap.change, gap.change
