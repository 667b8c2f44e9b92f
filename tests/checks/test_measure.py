"""The night's measurements in one statement (``measure.py``) on the local Snowflake: every part's rows come
back with the types the warehouse gives them, values are bound (a ``%`` in a total's SQL included), a part
that fails is that part's failure only, found by halving, and the volume checks' row counts (both modes) and
small tables' keys are parts of it (no world)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg
import pytest
from ops_warehouse import warehouse  # noqa: F401 - the fixture
from sqlglot import exp
from warehouse_statements import statements

from dw_dagster.checks.history import Recorded, volume_series
from dw_dagster.checks.keys import keys_part
from dw_dagster.checks.levels import LazyLineage
from dw_dagster.checks.measure import Binds, Part, measure, quoted_table
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.checks.recorded_totals import total_query, total_value
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.volume import Volumes
from dw_dagster.sql import table_reference

DB, SCHEMA = "DW_OPS_TEST", "MEASURED"
DAY = date(2026, 3, 10)


@pytest.fixture(scope="module")
def tables(warehouse):  # noqa: F811
    _, wh = warehouse
    with wh.tagged_connection("test") as conn:
        cur = conn.cursor()
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{DB}"."{SCHEMA}"')
        cur.execute(f'CREATE OR REPLACE TABLE "{DB}"."{SCHEMA}"."SALES" ("STORE_ID" INTEGER, "SKU" VARCHAR,'
                    ' "AMOUNT" DOUBLE, "_LOADED_AT" TIMESTAMP_NTZ)')  # fmt: skip
        cur.execute(
            f'INSERT INTO "{DB}"."{SCHEMA}"."SALES" VALUES (1, \'A-1\', 10.5, \'2026-03-09 05:00:00\'),'
            " (1, 'B-100%', 4.5, '2026-03-09 06:00:00'), (2, 'A-2', 7, '2026-03-10 01:30:00')"
        )
        cur.execute(
            f'CREATE OR REPLACE TABLE "{DB}"."{SCHEMA}"."STORES" ("STORE_ID" INTEGER, "NAME" VARCHAR)'
        )
        cur.execute(
            f"INSERT INTO \"{DB}\".\"{SCHEMA}\".\"STORES\" VALUES (1, 'north'), (2, 'south'), (3, 'east')"
        )
    return wh


def _total(sql: str, keys: list[str]) -> RecordedTotal:
    return RecordedTotal(name="sales", owner="o", asset="sales/sales", sql=sql, group_keys=keys)


def _resolve(location: str, name: str) -> str:
    return table_reference(DB, location, name)


def _count(table: str) -> Part:
    query = exp.select(exp.Count(this=exp.Star())).from_(quoted_table(DB, SCHEMA, table))
    return Part(("count", table), query, shape="count")


def test_every_part_comes_back_from_one_statement_with_its_types(tables):
    # The total's SQL holds a literal %: bound values do not disturb it.
    total = _total(
        'SELECT "STORE_ID", SUM("AMOUNT") AS "VALUE" FROM {{ ref(\'MEASURED\', \'SALES\') }}'
        ' WHERE "SKU" LIKE \'%-%\' GROUP BY "STORE_ID"',
        ["STORE_ID"],
    )
    query = total_query(total, _resolve)
    assert query.part is not None and query.columns == ["STORE_ID", "VALUE"]
    binds = Binds()
    latest = exp.select(exp.Max(this=exp.column("_LOADED_AT", quoted=True))).from_(
        quoted_table(DB, SCHEMA, "SALES")
    )
    still_small = _count("STORES").query.subquery() < binds(100)
    parts = [
        Part(("freshness", "sales"), latest),
        query.part,
        _count("SALES"),
        _count("STORES"),
        keys_part("stores", (DB, SCHEMA, "STORES"), "STORE_ID", only_if=still_small),
    ]
    with tables.tagged_connection("test") as conn, statements() as sent:
        measured = measure(conn.cursor(), parts, binds)
    assert len(sent) == 1 and "UNION ALL" in sent[0]
    # A TIMESTAMP_NTZ comes back aware, as UTC (warehouse/connections.py).
    assert measured[("freshness", "sales")] == [(datetime(2026, 3, 10, 1, 30, tzinfo=UTC),)]
    assert measured[("count", "SALES")] == [(3,)] and measured[("count", "STORES")] == [(3,)]
    assert sorted(measured[("keys", "stores")]) == [(1,), (2,), (3,)]
    value = total_value(total, query.sql, query.columns, measured[query.part.key])  # type: ignore[arg-type]
    assert value.groups == {"STORE_ID=1": 15.0, "STORE_ID=2": 7.0} and value.value == 22.0


def test_a_small_tables_keys_are_not_read_once_it_grew(tables):
    binds = Binds()
    grown = _count("STORES").query.subquery() < binds(3)
    with tables.tagged_connection("test") as conn:
        measured = measure(
            conn.cursor(), [keys_part("stores", (DB, SCHEMA, "STORES"), "STORE_ID", grown)], binds
        )
    assert measured == {("keys", "stores"): []}


def test_a_failing_part_is_its_own_failure_found_by_halving(tables):
    parts = [_count("SALES"), _count("STORES"), _count("GONE")]
    parts += [Part(("count", f"more{i}"), _count("STORES").query, shape="count") for i in range(5)]
    with tables.tagged_connection("test") as conn, statements() as sent:
        measured = measure(conn.cursor(), parts, Binds())
    gone = measured[("count", "GONE")]
    assert isinstance(gone, Exception) and "GONE" in str(gone)
    assert all(measured[p.key] == [(3,)] for p in parts if p.key != ("count", "GONE"))
    # 8 parts, one bad: the statement, then both halves of 8, of 4 and of 2 on the bad part's side.
    assert len(sent) == 7


def test_a_total_whose_columns_sqlglot_cannot_name_is_measured_alone(tables):
    star = _total('SELECT * FROM (SELECT 1 AS "VALUE")', [])
    missing = _total("SELECT SUM(\"AMOUNT\") AS \"TOTAL\" FROM {{ ref('MEASURED', 'SALES') }}", [])
    assert total_query(star, _resolve).part is None
    assert total_query(missing, _resolve).part is None, "measured alone: its error names the missing VALUE"


def _volumes(mode: str) -> Volumes:
    def spec(name: str, unique: str | None = None) -> dg.AssetSpec:
        metadata: dict = {"dagster/table_name": f"{DB}.{SCHEMA}.{name.upper()}"}
        if unique:
            key = dg.TableColumn(
                name=unique, type="NUMBER", constraints=dg.TableColumnConstraints(unique=True)
            )
            metadata["dagster/column_schema"] = dg.TableSchema(columns=[key])
        return dg.AssetSpec(key=["measured", name], metadata=metadata)

    specs = [spec("sales"), spec("stores", unique="STORE_ID")]
    metrics = MetricsFile.model_validate({"volume": {"row_counts": mode, "assets": ["measured/*"]}})
    return Volumes(metrics, {s.key: s for s in specs}, [s.key for s in specs], LazyLineage(specs))


@pytest.mark.parametrize("mode", ["count", "metadata"])
def test_row_counts_and_a_small_tables_keys_share_the_statement(tables, mode):
    volumes, binds = _volumes(mode), Binds()
    last_night = {volume_series("measured/stores"): {DAY: Recorded(business_date=DAY, value=3.0)}}
    run = CheckRun(DAY, "run", coalesce_run_id=None, coalesce_job=None)
    with (
        dg.DagsterInstance.ephemeral() as instance,
        tables.tagged_connection("test") as conn,
        statements() as sent,
    ):
        parts = volumes.parts(instance, run, last_night, binds)
        measured = measure(conn.cursor(), parts, binds)
        still = volumes.take(measured)
    assert len(sent) == 1 and still == []
    source = "count" if mode == "count" else "information_schema"
    assert {k.to_user_string(): v for k, v in volumes.counts.items()} == {
        "measured/sales": (3.0, source),
        "measured/stores": (3.0, source),
    }
    assert sorted(volumes.keys_read[dg.AssetKey(["measured", "stores"])]) == [(1,), (2,), (3,)]  # type: ignore[arg-type]
    # Production mode counts rows from the metadata, never with a scan.
    assert ("COUNT(*)" in sent[0]) is (mode == "count") and ("INFORMATION_SCHEMA" in sent[0]) is (
        mode == "metadata"
    )


def test_a_table_small_tonight_and_not_last_night_has_its_keys_read_after(tables):
    volumes, binds = _volumes("count"), Binds()
    big_last_night = {volume_series("measured/stores"): {DAY: Recorded(business_date=DAY, value=5000.0)}}
    run = CheckRun(DAY, "run", coalesce_run_id=None, coalesce_job=None)
    with (
        dg.DagsterInstance.ephemeral() as instance,
        tables.tagged_connection("test") as conn,
        statements() as sent,
    ):
        parts = volumes.parts(instance, run, big_last_night, binds)
        assert not any(p.key[0] == "keys" for p in parts), "a big table's keys are not read whole"
        still = volumes.take(measure(conn.cursor(), parts, binds))
        assert [p.key for p in still] == [("keys", dg.AssetKey(["measured", "stores"]))]
        volumes.take_keys(measure(conn.cursor(), still, binds))
    assert len(sent) == 2
    assert sorted(volumes.keys_read[dg.AssetKey(["measured", "stores"])]) == [(1,), (2,), (3,)]  # type: ignore[arg-type]
