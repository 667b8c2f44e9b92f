"""A join key of several columns with a filter in its condition, measured on DuckDB under fakesnow (the local
Snowflake's engine): the columns that fail to match are named one label each (``COLUMN=value``,
``COLUMN IS NULL``), and a deleted or excluded reference row is told apart from a key new in the source by
the rows of the tuple itself."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import dagster as dg
import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.joins import measure_join, parse_joins
from dw_dagster.incidents.origins import key_origins
from dw_dagster.records.keys import split_labels
from dw_dagster.warehouse.ops import TABLES, OpsSchema

METRICS = Path(__file__).resolve().parent / "worlds" / "meters" / "metrics.yaml"
TONIGHT = date(2025, 10, 28)
JOIN = """FROM {{ ref('RAW', 'READINGS') }} "RD"
INNER JOIN {{ ref('REF', 'UNITS') }} "U"
  ON "RD"."SITE" = "U"."SITE" AND "RD"."TAG" = "U"."TAG" AND "U"."STATUS" = 'ACTIVE'"""


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


def _spec(key: str, table: str, columns: dict[str, str]) -> dg.AssetSpec:
    schema = dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in columns.items()])
    return dg.AssetSpec(
        key, kinds={"snowflake"}, metadata={"dagster/table_name": table, "dagster/column_schema": schema}
    )


@pytest.fixture(scope="module")
def conn():
    with fakesnow.patch():
        conn = snowflake.connector.connect(
            database="DB", schema="RAW", paramstyle="qmark"
        )  # as the product binds
        yield conn
        conn.close()


@pytest.fixture(scope="module")
def cur(conn):
    c = conn.cursor()
    for schema in ("RAW", "REF", "DW_OPS"):
        c.execute(f'CREATE SCHEMA IF NOT EXISTS "DB"."{schema}"')
    c.execute(f'CREATE TABLE "DB"."DW_OPS"."METRIC_HISTORY" ({TABLES["METRIC_HISTORY"]})')
    c.execute('CREATE TABLE "DB"."REF"."UNITS" (SITE VARCHAR, TAG VARCHAR, STATUS VARCHAR)')
    c.execute(
        "INSERT INTO \"DB\".\"REF\".\"UNITS\" VALUES ('N', 'A-1', 'ACTIVE'), ('N', 'A-2', 'ACTIVE'),"
        " ('S', 'B-1', 'ACTIVE'), ('S', 'B-2', 'RETIRED')"
    )  # N/A-3 was deleted tonight; S/B-2 was marked retired tonight
    c.execute(
        'CREATE TABLE "DB"."RAW"."READINGS" (SITE VARCHAR, TAG VARCHAR, QTY NUMBER(38,0), READ_ON DATE)'
    )
    c.execute(
        'INSERT INTO "DB"."RAW"."READINGS" VALUES'
        " ('N', 'A-1', 10, '2025-10-20'), ('N', 'A-3', 40, '2025-10-01'), ('N', 'A-3', 40, '2025-10-28'),"
        " ('S', 'B-2', 30, '2025-10-28'), ('N', 'A-9', 20, '2025-10-28'), (NULL, 'B-1', 5, '2025-10-28'),"
        " ('S', 'A-1', 7, '2025-10-28')"
    )  # A-9 is new tonight; S/A-1: both values are on the reference side, not the pair
    return c


@pytest.fixture(scope="module")
def measured(cur):
    (join,) = parse_joins(JOIN, _resolve)
    return join, measure_join(cur, "fact", join, "QTY", None)


def test_each_column_that_fails_to_match_is_named_on_its_own(measured):
    _, effect = measured
    labels = {g.label: g for g in effect.unmatched}
    assert set(labels) == {
        "TAG=A-3",
        "SITE=S, TAG=B-2",
        "TAG=A-9",
        "SITE IS NULL",
        "SITE=S, TAG=A-1",
    }
    assert labels["SITE IS NULL"].value is None and labels["SITE IS NULL"].parts == [
        ("SITE", None),
        ("TAG", "B-1"),
    ]
    assert labels["TAG=A-3"].units == 80 and labels["TAG=A-3"].values == ("N", "A-3")
    assert "excluded by the join's condition" in labels["SITE=S, TAG=B-2"].change
    assert labels["TAG=A-3"].change is None
    assert split_labels("SITE=S, TAG=B-2") == ["SITE=S", "TAG=B-2"]
    assert split_labels("SITE IS NULL, TAG=B, 2") == ["SITE IS NULL", "TAG=B, 2"]


def test_the_join_names_each_side_on_its_own_table(measured):
    # Never "SITE = SITE": each column on the alias the node's ON clause gives its table.
    _, effect = measured
    assert effect.on[:2] == ["RD.SITE = U.SITE", "RD.TAG = U.TAG"]


def test_a_deleted_or_excluded_row_is_told_from_a_new_key_by_the_whole_tuple(conn, cur, measured):
    join, effect = measured
    graph = LineageGraph(
        [
            _spec("raw/readings", "DB.RAW.READINGS", {"SITE": "VARCHAR", "TAG": "VARCHAR", "QTY": "NUMBER(38,0)", "READ_ON": "DATE"}),
            _spec("ref/units", "DB.REF.UNITS", {"SITE": "VARCHAR", "TAG": "VARCHAR", "STATUS": "VARCHAR"}),
        ]
    )  # fmt: skip
    metrics = load_metrics_file(METRICS)
    ctx = DiagnosisContext(graph, metrics, _resolve, HistorySession(conn, OpsSchema("DB")), cur)
    total = metrics.totals[0]
    origins = {
        o.key.label: o for o in key_origins(ctx, effect, join, effect.unmatched, TONIGHT, total, total)
    }
    deleted = origins["TAG=A-3"]
    assert deleted.reference_changed and "deleted from" in deleted.story and "2025-10-01" in deleted.story
    # Its rows arrived tonight only, but the reference row is there and the join's condition excludes it.
    retired = origins["SITE=S, TAG=B-2"]
    assert retired.reference_changed and "STATUS" in retired.story, retired.story
    assert not origins["TAG=A-9"].reference_changed and "is new in raw/readings" in origins["TAG=A-9"].story
    assert not origins["SITE IS NULL"].reference_changed
