"""Times read from sources are instants, whatever kind of timestamp holds them: a TIMESTAMP_NTZ load stamp in
UTC, a TIMESTAMP_LTZ and a TIMESTAMP_TZ written with a +02:00 offset, all the same instant, give one age
to the staleness diagnosis (incidents/staleness.py) and one latest load to the input-freshness check
(checks/freshness.py), on the local Snowflake whose sessions default to America/Los_Angeles (an LTZ column
cast to TIMESTAMP there read 8 hours off)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from dw_dagster.checks.freshness import InputFreshnessChecks
from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.staleness import source_ages
from dw_dagster.warehouse.migrations import migrate
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

DB, SCHEMA = "DW_WH_TEST", "TZ_SOURCES"
INSTANT = datetime(2026, 3, 9, 22, 0, tzinfo=UTC)
WRITTEN = {  # the same instant, in each kind of timestamp
    "NTZ_FEED": ("TIMESTAMP_NTZ", "2026-03-09 22:00:00"),
    "LTZ_FEED": ("TIMESTAMP_LTZ", "2026-03-09 22:00:00 +00:00"),
    "TZ_FEED": ("TIMESTAMP_TZ", "2026-03-10 00:00:00 +02:00"),
}


def _spec(name: str, kind: str) -> dg.AssetSpec:
    columns = [dg.TableColumn(name="ID", type="NUMBER(38,0)"), dg.TableColumn(name="LOADED_AT", type=kind)]
    return dg.AssetSpec(
        key=["feeds", name.lower()],
        metadata={
            "dagster/table_name": f"{DB}.{SCHEMA}.{name}",
            "coalesce/node_type": "Source",
            "dagster/column_schema": dg.TableSchema(columns=columns),
        },
    )


@pytest.fixture
def feeds(warehouse: WarehouseResource) -> list[dg.AssetSpec]:
    with warehouse.tagged_connection("test.time_zones") as conn:
        cur = conn.cursor()
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{DB}"."{SCHEMA}"')
        for name, (kind, value) in WRITTEN.items():
            cur.execute(
                f'CREATE OR REPLACE TABLE "{DB}"."{SCHEMA}"."{name}" ("ID" NUMBER(38,0), "LOADED_AT" {kind})'
            )
            # Written in the table's own kind; a literal, so the session's zone reads only the NTZ one (as UTC).
            cur.execute(f'INSERT INTO "{DB}"."{SCHEMA}"."{name}" SELECT 1, \'{value}\'::{kind}')
    return [_spec(name, kind) for name, (kind, _) in WRITTEN.items()]


def test_every_source_is_as_old_in_the_staleness_diagnosis(warehouse: WarehouseResource, feeds):
    graph = LineageGraph(feeds)
    built = datetime(2026, 3, 10, 6, 0, tzinfo=UTC)
    # Sources loaded on one day are looked up in the checks' record of their loads (none here).
    ops = OpsSchema(DB, "OPS_TZ")
    migrate(warehouse, ops)
    with warehouse.tagged_connection("test.time_zones") as conn:
        ctx = DiagnosisContext(
            graph=graph, metrics=MetricsFile(), resolve_table=None, history=HistorySession(conn, ops),
            cursor=conn.cursor(),
        )  # type: ignore[arg-type]  # fmt: skip
        ages = {
            a.asset: (a.latest, a.age_hours)
            for s in feeds
            for a in source_ages(ctx, s.key.to_user_string(), built, built.date() - timedelta(days=1))
        }
    assert ages == {s.key.to_user_string(): (INSTANT, 8.0) for s in feeds}


def test_the_input_freshness_check_reads_each_latest_load_as_the_same_instant(
    warehouse: WarehouseResource, feeds
):
    pairs = [("ntz_feed", "ltz_feed"), ("ltz_feed", "tz_feed")]  # (the table, its input)
    rules = [
        {"asset": f"feeds/{a}", "column": "LOADED_AT", "input": f"feeds/{i}", "input_column": "LOADED_AT"}
        for a, i in pairs
    ]
    metrics = MetricsFile.model_validate({"freshness": {"inputs": rules}})
    checks = InputFreshnessChecks(metrics, feeds, [dg.AssetKey(["feeds", a]) for a, _ in pairs])
    with warehouse.tagged_connection("test.time_zones") as conn:
        measured = measure(conn.cursor(), checks.parts(), Binds())
    assert measured == {("freshness", f"feeds/{a}", f"feeds/{i}"): [(INSTANT, INSTANT)] for a, i in pairs}
    assert all(v.tzinfo is not None for rows in measured.values() for v in rows[0])
