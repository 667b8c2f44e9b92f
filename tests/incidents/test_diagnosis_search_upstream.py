"""The diagnosis searches every table the lineage gives, nearest first, never the first few by name: copies
held by a source whose name sorts after three others are found, and a source's row count is judged by the
nearest monitored table built from it however many unmonitored stages sit beside it. Two shapes: order lines
joined to stores, channels, currencies and a calendar; meter readings joined to meters, feeders, regions and
tariffs. On DuckDB under fakesnow, with the volume history as the checks record it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db

from dw_dagster.checks.history import HistorySession, volume_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.drilldown import rows_held
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 4, 14)

# name: (sources as key -> columns, built nodes as key -> deps, the fact, the source holding the copies,
#        the searched order: nearest first, then by name)
SHAPES = {
    "orders": (
        {"ref/calendar": ["DAY_ID", "IS_HOLIDAY"], "ref/channels": ["CHANNEL_ID", "CHANNEL"],
         "ref/currencies": ["CCY", "RATE"], "ref/stores": ["STORE_ID", "CHANNEL_ID"],
         "shop/order_lines": ["ORDER_LINE_ID", "STORE_ID", "AMOUNT"]},
        {"stage/stg_stores": ["ref/stores", "ref/channels"],
         "sales/fct_sales": ["shop/order_lines", "stage/stg_stores", "ref/currencies", "ref/calendar"]},
        "sales/fct_sales",
        "shop/order_lines",
        ["ref/calendar", "ref/currencies", "shop/order_lines", "ref/channels", "ref/stores"],
    ),
    "meters": (
        {"grid/feeders": ["FEEDER_ID", "REGION_ID"], "grid/meters": ["METER_ID", "FEEDER_ID"],
         "grid/regions": ["REGION_ID", "REGION"], "grid/tariffs": ["TARIFF_ID", "RATE"],
         "telemetry/readings": ["METER_ID", "READ_AT_ID", "KWH"]},
        {"stage/dim_meter": ["grid/meters", "grid/feeders", "grid/regions"],
         "usage/fct_usage": ["telemetry/readings", "stage/dim_meter", "grid/tariffs"]},
        "usage/fct_usage",
        "telemetry/readings",
        ["grid/tariffs", "telemetry/readings", "grid/feeders", "grid/meters", "grid/regions"],
    ),
}  # fmt: skip


def _table(key: str) -> tuple[str, str]:
    schema, name = key.split("/")
    return schema.upper(), name.upper()


def _spec(key: str, columns: list[str], deps=(), node="Source") -> dg.AssetSpec:
    schema, name = _table(key)
    cols = dg.TableSchema(columns=[dg.TableColumn(c, "NUMBER(38,0)") for c in columns])
    return dg.AssetSpec(key, kinds={"coalesce"}, deps=list(deps),
                        metadata={"dagster/table_name": f"DB.{schema}.{name}", "dagster/column_schema": cols,
                                  "coalesce/node_type": node})  # fmt: skip


@pytest.fixture(params=SHAPES)
def world(request):
    sources, built, fact, copies, order = SHAPES[request.param]
    schemas = {_table(k)[0] for k in [*sources, *built]}
    with diagnosis_db(*schemas) as conn:
        cur = conn.cursor()
        specs = []
        for key, columns in sources.items():
            specs.append(_spec(key, columns))
            schema, name = _table(key)
            cur.execute(
                f'CREATE TABLE "DB"."{schema}"."{name}" ({", ".join(f"{c} NUMBER" for c in columns)})'
            )
            rows = [[i * 10 + j for j in range(len(columns))] for i in range(5)]
            # The source that holds the copies: two of its rows loaded twice.
            for row in rows + (rows[:2] if key == copies else []):
                cur.execute(
                    f'INSERT INTO "DB"."{schema}"."{name}" VALUES ({", ".join("?" for _ in row)})', row
                )
        for key, deps in built.items():
            specs.append(_spec(key, ["ID", "VALUE"], deps, "Fact"))
            schema, name = _table(key)
            cur.execute(f'CREATE TABLE "DB"."{schema}"."{name}" (ID NUMBER, VALUE NUMBER)')
            cur.execute(f'INSERT INTO "DB"."{schema}"."{name}" VALUES (1, 10), (2, 20)')
        ctx = DiagnosisContext(LineageGraph(specs), MetricsFile.model_validate({"totals": []}),
                               lambda loc, name: f'"DB"."{loc}"."{name}"',
                               HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip
        yield ctx, SHAPES[request.param], specs


def _incident() -> Incident:
    now = datetime.now(UTC)
    return Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                    severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip


def _rose(fact: str) -> Finding:
    return Finding(check_name="volume", asset_key=fact, business_date=TONIGHT, summary=f"volume of {fact} rose",
                   cause_scope="job:x", evidence={"row_count": 12_400, "baseline": {"expected": 10_000.0}})  # fmt: skip


def test_copies_in_a_source_whose_name_sorts_after_three_others_are_found(world):
    ctx, (_, _, fact, copies, _), _ = world
    d = diagnose(_incident(), [_rose(fact)], ctx)
    assert d.classification is CauseClass.DUPLICATION, d.cause
    assert d.cause_asset == copies and d.evidence["duplicate_rows"] == 2


def test_the_sources_are_searched_nearest_first(world):
    ctx, (sources, _, fact, copies, order), _ = world
    # No copies anywhere: every source is searched, in the lineage's order, then the table itself.
    schema, name = _table(copies)
    ctx.cursor.execute(
        f'CREATE OR REPLACE TABLE "DB"."{schema}"."{name}" AS SELECT DISTINCT * FROM "DB"."{schema}"."{name}"'
    )
    d = diagnose(_incident(), [_rose(fact)], ctx)
    assert d.classification is CauseClass.UNKNOWN
    assert f"exact duplicate rows in {', '.join([*order, fact])}: none" in d.cause
    assert len(d.queries) == len(sources) + 1, "one statement a table"


def test_a_source_is_judged_by_the_nearest_monitored_table_beyond_unmonitored_stages(world):
    ctx, (_, _, fact, copies, _), specs = world
    # Four unmonitored stages read the source beside the monitored fact (a table with fewer inputs each).
    stages = [_spec(f"stage/extract_{i}", ["ID"], [copies], "Stage") for i in range(4)]
    ctx = DiagnosisContext(
        LineageGraph([*specs, *stages]), ctx.metrics, ctx.resolve_table, ctx.history, ctx.cursor
    )
    for k in range(1, 8):
        ctx.history.record_metric(volume_series(fact), TONIGHT - timedelta(days=k), 10_000.0, {}, None, None)
    ctx.history.record_metric(volume_series(fact), TONIGHT, 6_000.0, {}, None, None)
    # The fact lost 40% of its rows: the source's rows did not hold.
    assert rows_held(ctx, copies, TONIGHT, TONIGHT - timedelta(days=1)) is False
