"""Copies an earlier duplicate load left in a source (nobody removed them) explain nothing of a later night: a
partial load of one group on the same source is volume loss on that group, not duplication; copies the
night's own load brought are still duplication. Two shapes: payments read from a replicated journal, meter
readings by region; each source declares its loader's stamp in a freshness rule. On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import dagster as dg
import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import TABLES, OpsSchema

TONIGHT = date(2026, 6, 23)

# name: (source key, source table, its columns, fact key, fact table, group column, measure, loader's stamp)
SHAPES = {
    "payments": ("raw/journal", ("RAW", "JOURNAL"), {"PAYMENT_ID": "NUMBER(38,0)", "CHANNEL": "VARCHAR",
                 "AMOUNT": "NUMBER(18,2)", "_LOADED_AT": "TIMESTAMP_NTZ"},
                 "core/fct_payments", ("CORE", "FCT_PAYMENTS"), "CHANNEL", "AMOUNT", "_LOADED_AT"),
    "meters": ("raw_meter/readings", ("RAW", "READINGS"), {"READING_ID": "NUMBER(38,0)", "REGION": "VARCHAR",
               "KWH": "FLOAT", "_SYNCED_AT": "TIMESTAMP_NTZ"},
               "grid/fct_readings", ("GRID", "FCT_READINGS"), "REGION", "KWH", "_SYNCED_AT"),
}  # fmt: skip
GROUPS = ["a", "b", "c", "d"]
USUAL = {"a": 40_000.0, "b": 30_000.0, "c": 20_000.0, "d": 10_000.0}


def _spec(key, table, columns, deps=(), lineage=None) -> dg.AssetSpec:
    schema = dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in columns.items()])
    metadata = {"dagster/table_name": table, "dagster/column_schema": schema,
                "coalesce/node_type": "Fact" if deps else "Source"}  # fmt: skip
    if lineage:
        metadata["dagster/column_lineage"] = lineage
    return dg.AssetSpec(key, kinds={"coalesce"}, deps=list(deps), metadata=metadata)


def _ctx(conn, shape: str) -> DiagnosisContext:
    src, (ss, st), cols, fact, (fs, ft), group, measure, stamp = SHAPES[shape]
    sql = f'SELECT "{group}", SUM("{measure}") AS "VALUE" FROM {{{{ ref(\'{fs}\', \'{ft}\') }}}} GROUP BY 1'
    metrics = MetricsFile.model_validate({
        "totals": [{"name": "daily_value", "owner": "ops", "asset": fact, "group_keys": [group], "hurts": "both", "sql": sql}],
        "freshness": {"inputs": [{"asset": fact, "column": measure, "input": src, "input_column": stamp}]},
    })  # fmt: skip
    lineage = dg.TableColumnLineage(deps_by_column={
        measure: [dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(src), column_name=measure)],
        group: [dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(src), column_name=group)],
    })  # fmt: skip
    graph = LineageGraph([
        _spec(src, f"DB.{ss}.{st}", cols),
        _spec(fact, f"DB.{fs}.{ft}", {group: "VARCHAR", measure: "FLOAT"}, [src], lineage),
    ])  # fmt: skip
    return DiagnosisContext(graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                            HistorySession(conn, OpsSchema("DB")), conn.cursor())  # fmt: skip


@pytest.fixture
def conn():
    with fakesnow.patch():
        conn = snowflake.connector.connect(database="DB", schema="RAW", paramstyle="qmark")
        cur = conn.cursor()
        for schema in ("RAW", "CORE", "GRID", "DW_OPS"):
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "DB"."{schema}"')
        cur.execute(f'CREATE TABLE "DB"."DW_OPS"."METRIC_HISTORY" ({TABLES["METRIC_HISTORY"]})')
        cur.execute(f'CREATE TABLE "DB"."DW_OPS"."INCIDENTS" ({TABLES["INCIDENTS"]})')
        yield conn
        conn.close()


def _source(conn, shape: str, copies_loaded: date) -> None:
    """Ten nights of the source, a row per group and night, each night's load stamped at 02:00 UTC the
    morning after; the rows of the night ``copies_loaded`` applied twice (identical to the stamp)."""
    src, (ss, st), cols, *_ = SHAPES[shape]
    cur = conn.cursor()
    cur.execute(
        f'CREATE OR REPLACE TABLE "DB"."{ss}"."{st}" ({", ".join(f"{c} {t}" for c, t in cols.items())})'
    )
    rows = []
    for n in range(12):
        night = TONIGHT - timedelta(days=n)
        stamp = datetime.combine(night + timedelta(days=1), time(2))
        for i, g in enumerate(GROUPS):
            row = (n * 10 + i, g, USUAL[g] / 100, stamp)
            rows += [row, row] if night == copies_loaded else [row]
    cur.executemany(f'INSERT INTO "DB"."{ss}"."{st}" VALUES (?, ?, ?, ?)', rows)


def _record(ctx: DiagnosisContext, shape: str, tonight: dict[str, float]) -> None:
    group = SHAPES[shape][5]
    for n in range(8):
        groups = USUAL if n else tonight
        labelled = {f"{group}={g}": v for g, v in groups.items()}
        ctx.history.record_metric("daily_value", TONIGHT - timedelta(days=n), sum(labelled.values()), labelled, None, None)  # type: ignore[union-attr]  # fmt: skip


def _diagnose(ctx: DiagnosisContext, shape: str):
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                        severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    f = Finding(check_name="total_daily_value", asset_key=SHAPES[shape][3], business_date=TONIGHT,
                summary="daily_value moved", cause_scope="job:x", evidence={"baseline": {"expected": 100_000.0}})  # fmt: skip
    return diagnose(incident, [f], ctx)


@pytest.mark.parametrize("shape", SHAPES)
def test_copies_an_earlier_load_left_do_not_make_a_later_fault_duplication(conn, shape):
    ctx = _ctx(conn, shape)
    _source(conn, shape, copies_loaded=TONIGHT - timedelta(days=9))  # a duplicate load nobody removed
    _record(ctx, shape, {**USUAL, "c": USUAL["c"] * 0.4})  # tonight: a partial load of one group
    d = _diagnose(ctx, shape)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert d.keys[0].label == f"{SHAPES[shape][5]}=c"
    assert any("loaded since" in q.purpose for q in d.queries), [q.purpose for q in d.queries]


@pytest.mark.parametrize("shape", SHAPES)
def test_copies_the_nights_own_load_brought_are_still_duplication(conn, shape):
    ctx = _ctx(conn, shape)
    _source(conn, shape, copies_loaded=TONIGHT)
    _record(ctx, shape, {g: v * 2 for g, v in USUAL.items()})
    d = _diagnose(ctx, shape)
    assert d.classification is CauseClass.DUPLICATION, d.cause
    assert d.evidence["duplicates_in"] == SHAPES[shape][0] and d.evidence["duplicate_rows"] == len(GROUPS)
    assert d.cause_asset == SHAPES[shape][0]
