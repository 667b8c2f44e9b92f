"""The production volume mode (``row_counts: metadata``) on the local Snowflake, whose
``INFORMATION_SCHEMA.TABLES`` counts rows exactly and gives a view no count, as Snowflake does: a table with
deleted rows is counted exactly, a node Coalesce materializes as a view is counted with COUNT(*), and a view
nothing marked as one has no row count, so its check errors saying why rather than passing. The worlds'
nights are judged in this mode (their metrics files)."""

from __future__ import annotations

from collections import defaultdict
from datetime import date

import dagster as dg

from dw_dagster.checks.levels import LazyLineage
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.volume import Volumes
from dw_dagster.warehouse.resources import WarehouseResource

DB, SCHEMA = "DW_WH_TEST", "VOLUMES"


def test_tables_are_counted_from_information_schema_and_views_with_count(warehouse: WarehouseResource):
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
        cur.execute(
            f'CREATE OR REPLACE VIEW "{DB}"."{SCHEMA}"."LARGE" AS SELECT * FROM "{DB}"."{SCHEMA}"."SALES"'
            ' WHERE "N" >= 4000'
        )
        # LARGE is a Coalesce View node; RECENT is a view no metadata says is one.
        view = {"coalesce/materialization": "view"}
        specs = [
            dg.AssetSpec(
                key=["volumes", name.lower()],
                metadata={"dagster/table_name": f"{DB}.{SCHEMA}.{name}", **(view if name == "LARGE" else {})},
            )
            for name in ("SALES", "RECENT", "LARGE")
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
        dg.AssetKey(["volumes", "recent"]): (
            None,
            "information_schema: a VIEW, which has no ROW_COUNT there",
        ),
        dg.AssetKey(["volumes", "large"]): (1000.0, "count (a view)"),
    }
    # Judged with no history (the checks' other inputs are not used by a first night's volume judgement).
    night = Night(
        context=None, run=run, warehouse=warehouse, ops=None, history=None, cause_scopes={},  # type: ignore[arg-type]
        calendar=metrics.calendar, levels={}, incident_days=set(), past=defaultdict(dict), reporter=None,  # type: ignore[arg-type]
    )  # fmt: skip
    results, errors = volumes.evaluate(night)
    # The view nothing marked is not judged, and says why; the counted view is judged like a table.
    assert errors == [
        f"volume of volumes/recent: no row count for {DB}.{SCHEMA}.RECENT from information_schema: a VIEW, "
        "which has no ROW_COUNT there"
    ]
    assert sorted(r.asset_key.to_user_string() for r in results) == ["volumes/large", "volumes/sales"]
    sources = {r.asset_key.path[-1]: r.metadata["row_count_source"].value for r in results}
    assert sources == {"sales": "information_schema", "large": "count (a view)"}
