"""A load applied twice to one subset of a table (one channel's file replayed, one comms path's reads
re-sent) is named by the column that tells that subset, not by the group key of the totals, whose every
value then holds a share of the copies. The whole load applied twice is still named by the group key. Two
shapes: order lines by channel (totals by currency) and meter reads by comms path (totals by tariff). On
DuckDB under fakesnow, as the diagnosis reads the table (``duplication.exact_duplicates``)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.duplication import exact_duplicates
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = datetime(2026, 10, 27, 6, 0)

# table, id column, group key and its values, subset column and its values (the first is replayed), measure
SHAPES = {
    "orders": ("ORDER_LINES", "ORDER_LINE_ID", "CURRENCY", ["EUR", "PLN", "CHF", "CZK"], "ORDER_CHANNEL",
               ["edi", "webshop", "field_sales", "counter"], "NET_AMOUNT"),
    "reads": ("READS", "READ_ID", "TARIFF", ["HOME", "BUSINESS", "SOLAR"], "COMMS_PATH",
              ["PLC", "RF_MESH", "GPRS"], "KWH"),
}  # fmt: skip


def _copies(shape: str, replayed: str | None, limit: int | None = None) -> list:
    """The table's keys named for its copies: tonight's load with the rows of ``replayed`` (a value of the
    subset column; ``*``: every row; the first ``limit`` of them) there twice, after two earlier loads."""
    table, ident, group, groups, column, values, measure = SHAPES[shape]
    rng = random.Random(5)
    rows = []
    for back in (2, 1, 0):
        loaded = TONIGHT - timedelta(days=back)
        for i in range(400):
            row = (f"{back}-{i}", rng.choice(groups), rng.choice(values), round(rng.lognormvariate(4, 1), 2),
                   loaded + timedelta(seconds=i))  # fmt: skip
            rows.append(row)
            if back == 0 and replayed in (row[2], "*") and (limit is None or limit > 0):
                rows.append(row)
                limit = None if limit is None else limit - 1
    graph = LineageGraph([
        node_spec(f"raw/{table.lower()}", f"DB.RAW.{table}", {ident: "VARCHAR", group: "VARCHAR", column: "VARCHAR",
                  measure: "NUMBER(12,2)", "_LOADED_AT": "TIMESTAMP_NTZ"}),
    ])  # fmt: skip
    metrics = MetricsFile.model_validate(
        {"totals": [{"name": "amount", "owner": "o", "asset": f"raw/{table.lower()}", "group_keys": [group],
                     "sql": f"SELECT \"{group}\", SUM(\"{measure}\") AS \"VALUE\" FROM {{{{ ref('RAW', '{table}') }}}} GROUP BY 1"}]}
    )  # fmt: skip
    with diagnosis_db("RAW") as conn:
        cur = conn.cursor()
        cur.execute(f'CREATE TABLE "DB"."RAW"."{table}" ("{ident}" VARCHAR, "{group}" VARCHAR, "{column}" VARCHAR,'
                    f' "{measure}" NUMBER(12,2), "_LOADED_AT" TIMESTAMP_NTZ)')  # fmt: skip
        cur.executemany(f'INSERT INTO "DB"."RAW"."{table}" VALUES (?, ?, ?, ?, ?)', rows)
        ctx = DiagnosisContext(graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                               HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip
        found = exact_duplicates(ctx, f"raw/{table.lower()}")
    assert found is not None
    return found.keys


@pytest.mark.parametrize("shape", SHAPES)
def test_one_subset_loaded_twice_is_named_by_the_column_that_tells_it(shape):
    _, _, group, groups, column, values, _ = SHAPES[shape]
    (key,) = _copies(shape, values[0])
    assert key.label == f"{column}={values[0]}" and key.rows > 50, key
    assert "rows in the load are there twice" in (key.change or "")
    # The whole load twice: every value of every column holds copies, so the group key names them; so it
    # does a few stray copies, which tell no subset from a row.
    assert {k.column for k in _copies(shape, "*")} == {group}
    assert {k.column for k in _copies(shape, values[0], limit=3)} == {group}
