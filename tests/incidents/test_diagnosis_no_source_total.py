"""A total with no source total to reconcile with, which fell while its rows held: the joins of the nodes it is
built from are still measured (a left join to a lookup the measure is read from), and each dropped key is
told apart as a reference row deleted or a key new in the source. On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import RecordedTotal, load_metrics_file
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.value_loss import diagnose_fall
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import TABLES, OpsSchema

METRICS = Path(__file__).resolve().parent / "worlds" / "meters" / "metrics.yaml"
TONIGHT = date(2025, 10, 28)


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


def _dep(key: str, column: str) -> dg.TableColumnDep:
    return dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(key), column_name=column)


def _spec(key: str, table: str, columns: dict[str, str], **more) -> dg.AssetSpec:
    schema = dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in columns.items()])
    metadata = {"dagster/table_name": table, "dagster/column_schema": schema, **more.pop("metadata", {})}
    return dg.AssetSpec(dg.AssetKey.from_user_string(key), metadata=metadata, **more)


@pytest.fixture(scope="module")
def conn():
    with fakesnow.patch():
        conn = snowflake.connector.connect(
            database="DB", schema="RAW", paramstyle="qmark"
        )  # as the product binds
        c = conn.cursor()
        for schema in ("RAW", "REF", "DW_OPS"):
            c.execute(f'CREATE SCHEMA IF NOT EXISTS "DB"."{schema}"')
        c.execute(f'CREATE TABLE "DB"."DW_OPS"."METRIC_HISTORY" ({TABLES["METRIC_HISTORY"]})')
        c.execute('CREATE TABLE "DB"."REF"."COSTS" (PART_NO NUMBER(38,0), COST NUMBER(18,4))')
        c.execute('INSERT INTO "DB"."REF"."COSTS" VALUES (1, 2.5), (2, 4.0)')  # part 3's cost was deleted
        c.execute('CREATE TABLE "DB"."RAW"."LINES" (PART_NO NUMBER(38,0), QTY NUMBER(38,0), MADE_ON DATE)')
        c.execute(
            'INSERT INTO "DB"."RAW"."LINES" VALUES (1, 100, \'2025-10-28\'), (2, 50, \'2025-10-28\'),'
            " (3, 70, '2025-10-02'), (3, 90, '2025-10-28'), (4, 30, '2025-10-28')"
        )  # part 4 is new tonight
        yield conn
        conn.close()


@pytest.fixture(scope="module")
def graph():
    lineage = dg.TableColumnLineage(
        deps_by_column={
            "PART_NO": [_dep("raw/lines", "PART_NO")],
            "VALUE_EUR": [_dep("raw/lines", "QTY"), _dep("ref/costs", "COST")],
        }
    )
    join = (
        "FROM {{ ref('RAW', 'LINES') }} \"L\"\n"
        'LEFT JOIN {{ ref(\'REF\', \'COSTS\') }} "C" ON "L"."PART_NO" = "C"."PART_NO"'
    )
    return LineageGraph(
        [
            _spec("raw/lines", "DB.RAW.LINES", {"PART_NO": "NUMBER(38,0)", "QTY": "NUMBER(38,0)", "MADE_ON": "DATE"}),
            _spec("ref/costs", "DB.REF.COSTS", {"PART_NO": "NUMBER(38,0)", "COST": "NUMBER(18,4)"}),
            _spec("mart/fct", "DB.MART.FCT", {"PART_NO": "NUMBER(38,0)", "VALUE_EUR": "NUMBER(38,4)"},
                  kinds={"coalesce", "snowflake"}, deps=["raw/lines", "ref/costs"],
                  metadata={"coalesce/join": join, "coalesce/node_type": "Fact", "dagster/column_lineage": lineage}),
        ]
    )  # fmt: skip


def test_a_fall_with_rows_held_is_traced_through_the_left_join_the_measure_is_read_from(conn, graph):
    total = RecordedTotal(
        name="value_eur",
        owner="finance",
        asset="mart/fct",
        sql="SELECT SUM(\"VALUE_EUR\") AS \"VALUE\" FROM {{ ref('MART', 'FCT') }}",
    )
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", title="value fell",
                        business_date=TONIGHT, severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name="total_value_eur", asset_key="mart/fct", business_date=TONIGHT,
                      summary="value_eur fell", cause_scope="job")  # fmt: skip
    ctx = DiagnosisContext(
        graph, load_metrics_file(METRICS), _resolve, HistorySession(conn, OpsSchema("DB")), conn.cursor()
    )
    d = diagnose_fall(incident, finding, total, ctx, 500.0, {"total": "value_eur"})
    assert d is not None
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
    keys = {k.label: k for k in d.keys}
    assert set(keys) == {"PART_NO=3", "PART_NO=4"}
    assert keys["PART_NO=3"].units == 160 and "deleted from" in keys["PART_NO=3"].change
    assert "new in raw/lines" in keys["PART_NO=4"].change
    assert d.joins[0].join_type == "LEFT" and d.evidence["fall_units"] == 500.0
