"""The production volume mode (``row_counts: metadata``) on the local Snowflake, whose
``INFORMATION_SCHEMA.TABLES`` now counts rows exactly and gives a view no count, as Snowflake does: a table
with deleted rows is counted exactly (DuckDB's estimate kept them), a view has no row count, so its check
cannot be judged rather than passing. The worlds' nights are judged in this mode (their metrics files)."""

from __future__ import annotations

from datetime import date

import dagster as dg

from dw_dagster.checks.levels import LazyLineage
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.volume import Volumes
from dw_dagster.warehouse.resources import WarehouseResource

DB, SCHEMA = "DW_WH_TEST", "VOLUMES"


def test_row_counts_come_exactly_from_information_schema_and_a_view_has_none(warehouse: WarehouseResource):
    with warehouse.tagged_connection("test.volume") as conn:
        cur = conn.cursor()
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{DB}"."{SCHEMA}"')
        cur.execute(f'CREATE OR REPLACE TABLE "{DB}"."{SCHEMA}"."SALES" ("N" NUMBER(38,0))')
        cur.execute(
            f'INSERT INTO "{DB}"."{SCHEMA}"."SALES" SELECT SEQ4() FROM TABLE(GENERATOR(ROWCOUNT => 5000))'
        )
        cur.execute(f'DELETE FROM "{DB}"."{SCHEMA}"."SALES" WHERE "N" < 1234')
        cur.execute(
            f'CREATE OR REPLACE VIEW "{DB}"."{SCHEMA}"."RECENT" AS SELECT * FROM "{DB}"."{SCHEMA}"."SALES"'
        )
        specs = [
            dg.AssetSpec(
                key=["volumes", name.lower()], metadata={"dagster/table_name": f"{DB}.{SCHEMA}.{name}"}
            )
            for name in ("SALES", "RECENT")
        ]
        metrics = MetricsFile.model_validate({"volume": {"row_counts": "metadata", "assets": ["volumes/*"]}})
        volumes, binds = (
            Volumes(metrics, {s.key: s for s in specs}, [s.key for s in specs], LazyLineage(specs)),
            Binds(),
        )
        run = CheckRun(date(2026, 3, 10), "run", coalesce_run_id=None, coalesce_job=None)
        with dg.DagsterInstance.ephemeral() as instance:
            volumes.take(measure(conn.cursor(), volumes.parts(instance, run, {}, binds), binds))
    assert volumes.counts == {
        dg.AssetKey(["volumes", "sales"]): (3766.0, "information_schema"),
        dg.AssetKey(["volumes", "recent"]): (None, "information_schema"),
    }
