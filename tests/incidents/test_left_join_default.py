"""A LEFT join whose measure reads the right side through a default (``COALESCE(R.X, 1)``) keeps the rows that
find no right row, with the default: it drops none of their value, so a fall is not put on it. The same join
whose measure reads the right side bare drops them (NULL) and is still measured. Two shapes: a sales credit
split by account (COALESCE) and a freight charge priced by lane (IFNULL). On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import date

import dagster as dg
import pytest
from diagnosis_db import diagnose_total_fall, diagnosis_db, node_spec

from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.coalesce.transforms import read_transform
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.records.incidents import CauseClass

TONIGHT = date(2026, 2, 17)

# name: (left, right, key, measure, right column, node column, defaulted, bare, left rows, right rows, unmatched)
SHAPES = {
    "credit": ("DEALS", "SPLITS", "ACCOUNT_ID", "AMOUNT", "SPLIT", "CREDIT",
               '"L"."AMOUNT" * COALESCE("R"."SPLIT", 1)', '"L"."AMOUNT" * "R"."SPLIT"',
               [("A1", 500), ("A2", 300), ("A3", 200), ("A3", 100)], [("A1", 1.0), ("A2", 1.0)], "A3"),
    "freight": ("SHIPMENTS", "TARIFFS", "LANE", "KG", "RATE", "CHARGE",
                'IFNULL("R"."RATE", 0.8) * "L"."KG"', '"R"."RATE" * "L"."KG"',
                [("HAM-OSL", 900), ("HAM-CPH", 400), ("RTM-GDN", 250)], [("HAM-OSL", 1.1), ("HAM-CPH", 0.9)],
                "RTM-GDN"),
}  # fmt: skip


def _diagnose(conn, shape, transform: str):
    left, right, key, measure, rate, out, _, _, left_rows, right_rows, _ = shape
    join = (f"FROM {{{{ ref('RAW', '{left}') }}}} \"L\"\n"
            f"LEFT JOIN {{{{ ref('REF', '{right}') }}}} \"R\" ON \"L\".\"{key}\" = \"R\".\"{key}\"")  # fmt: skip
    left_k, right_k = f"raw/{left.lower()}", f"ref/{right.lower()}"
    node = node_spec("mart/fct", "DB.MART.FCT", {key: "VARCHAR", out: "NUMBER(18,4)"},
                     {key: [(left_k, key)], out: [(left_k, measure), (right_k, rate)]}, join)  # fmt: skip
    read = read_transform(transform)
    if read is not None:
        node = node.merge_attributes(
            metadata={"coalesce/column_transforms": dg.MetadataValue.json({out: read.as_json()})}
        )
    graph = LineageGraph([
        node_spec(left_k, f"DB.RAW.{left}", {key: "VARCHAR", measure: "NUMBER(38,0)"}),
        node_spec(right_k, f"DB.REF.{right}", {key: "VARCHAR", rate: "NUMBER(9,4)"}),
        node,
    ])  # fmt: skip
    cur = conn.cursor()
    cur.execute(f'CREATE TABLE "DB"."RAW"."{left}" ({key} VARCHAR, {measure} NUMBER(38,0))')
    cur.execute(f'CREATE TABLE "DB"."REF"."{right}" ({key} VARCHAR, {rate} NUMBER(9,4))')
    for row in left_rows:
        cur.execute(f'INSERT INTO "DB"."RAW"."{left}" VALUES (?, ?)', row)
    for row in right_rows:
        cur.execute(f'INSERT INTO "DB"."REF"."{right}" VALUES (?, ?)', row)
    built = join.replace(f"{{{{ ref('RAW', '{left}') }}}}", f'"DB"."RAW"."{left}"').replace(
        f"{{{{ ref('REF', '{right}') }}}}", f'"DB"."REF"."{right}"'
    )
    cur.execute(f'CREATE TABLE "DB"."MART"."FCT" AS SELECT "L"."{key}", {transform} AS "{out}" {built}')
    total = RecordedTotal(name=out.lower(), owner="finance", asset="mart/fct",
                          sql=f"SELECT SUM(\"{out}\") AS \"VALUE\" FROM {{{{ ref('MART', 'FCT') }}}}")  # fmt: skip
    unmatched = sum(v for k, v in left_rows if k == shape[-1])
    return diagnose_total_fall(conn, graph, total, TONIGHT, float(unmatched))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_left_join_whose_measure_defaults_the_right_side_is_not_a_loss(shape):
    with diagnosis_db("RAW", "REF", "MART") as conn:
        d = _diagnose(conn, SHAPES[shape], SHAPES[shape][6])
    # The unmatched rows are kept with the default: no join or filter on the path drops any value.
    assert d is None, d.cause if d else None


@pytest.mark.parametrize("shape", SHAPES)
def test_a_left_join_whose_measure_reads_the_right_side_bare_still_drops_rows(shape):
    left, _, key, *_, left_rows, _, unmatched = SHAPES[shape]
    with diagnosis_db("RAW", "REF", "MART") as conn:
        d = _diagnose(conn, SHAPES[shape], SHAPES[shape][7])
    assert d is not None and d.classification in (CauseClass.VALUE_LOSS, CauseClass.REFERENCE_DATA_CHANGE)
    assert d.joins[0].join_type == "LEFT"
    (gap,) = d.keys
    assert gap.label == f"{key}={unmatched}" and gap.units == sum(v for k, v in left_rows if k == unmatched)
