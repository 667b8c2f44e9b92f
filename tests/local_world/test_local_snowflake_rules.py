"""The local Snowflake refuses what Snowflake refuses (local/dw_local/snowflake_rules.py), over its real socket
through snowflake-connector-python: case-sensitive quoted identifiers (a table's alias too), MERGE with duplicate source keys,
DuckDB-only functions, division by zero; it keeps each session's time zone, counts INFORMATION_SCHEMA.TABLES'
rows exactly, and takes server-side bindings, whose values stay out of QUERY_HISTORY's text."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from snowflake.connector.errors import ProgrammingError

from dw_local.world import LocalWorld


@pytest.fixture(scope="module")
def snowflake(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("sf") / "local", services=("snowflake",)) as lw:
        with lw.snowflake.connect() as conn:
            cur = conn.cursor()
            cur.execute('CREATE SCHEMA IF NOT EXISTS "DW_PROD"."OPS"')
            cur.execute('CREATE OR REPLACE TABLE "DW_PROD"."OPS"."T1" (K VARCHAR, V NUMBER(38,0))')
            cur.execute('INSERT INTO "DW_PROD"."OPS"."T1" VALUES (\'a\', 1), (\'b\', 2)')
        yield lw.snowflake


def _rows(cur, sql: str, params=None) -> list[tuple]:
    cur.execute(sql, params)
    return [tuple(r) for r in cur.fetchall()]


def _refused(cur, sql: str, params=None) -> str:
    with pytest.raises(ProgrammingError) as refused:
        cur.execute(sql, params)
    # The connector puts the code first: "002003 (02000): SQL compilation error: ...".
    return re.sub(r"^\d{6} \(\w+\): ", "", refused.value.raw_msg)


# -- identifiers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ('SELECT * FROM "dw_prod"."OPS"."T1"', "Database 'dw_prod' does not exist or not authorized."),
        ('SELECT * FROM "DW_PROD"."ops"."T1"', "Schema 'DW_PROD.ops' does not exist or not authorized."),
        ('SELECT * FROM "DW_PROD"."OPS"."t1"', "Object 'DW_PROD.OPS.t1' does not exist or not authorized."),
        ('INSERT INTO "DW_PROD"."OPS"."t1" VALUES (\'c\', 3)', "Object 'DW_PROD.OPS.t1' does not exist"),
        ('CREATE TABLE "DW_PROD"."ops"."T2" (A INT)', "Schema 'DW_PROD.ops' does not exist"),
    ],
)
def test_a_quoted_name_is_its_exact_case(snowflake, sql, says):
    with snowflake.connect() as conn:
        assert says in _refused(conn.cursor(), sql)


def test_unquoted_names_are_upper_case_and_a_lower_case_table_is_named_only_quoted(snowflake):
    with snowflake.connect(schema="OPS") as conn:
        cur = conn.cursor()
        assert _rows(cur, "SELECT COUNT(*) FROM dw_prod.ops.t1") == [(2,)]
        cur.execute('CREATE OR REPLACE TABLE "DW_PROD"."OPS"."lower_only" (A INT)')
        assert _rows(cur, 'SELECT COUNT(*) FROM "lower_only"') == [(0,)]
        assert "Object 'DW_PROD.OPS.LOWER_ONLY' does not exist" in _refused(cur, "SELECT * FROM lower_only")
        # Snowflake would make a second table; DuckDB cannot hold both, so it is refused, not merged.
        assert "differs only in case" in _refused(cur, 'CREATE TABLE IF NOT EXISTS "LOWER_ONLY" (A INT)')


def test_a_column_qualified_by_its_tables_alias_in_another_case_is_an_invalid_identifier(snowflake):
    # An unquoted alias is stored upper case, a quoted one as written: "f" is not the alias f (F).
    with snowflake.connect(schema="OPS") as conn:
        cur = conn.cursor()
        for sql in (
            'SELECT "f"."V" FROM "DW_PROD"."OPS"."T1" f',
            'SELECT "t1"."V" FROM "DW_PROD"."OPS"."T1"',
        ):
            assert "invalid identifier" in _refused(cur, sql)
        for sql in (
            'SELECT f."V" FROM "DW_PROD"."OPS"."T1" f',
            'SELECT "F"."V" FROM "DW_PROD"."OPS"."T1" f',
            'SELECT "f"."V" FROM "DW_PROD"."OPS"."T1" "f"',
            'SELECT "T1"."V" FROM "DW_PROD"."OPS"."T1"',
        ):
            assert sorted(_rows(cur, sql)) == [(1,), (2,)]


# -- MERGE ----------------------------------------------------------------------------------------------------

_MERGE = (
    'MERGE INTO "DW_PROD"."OPS"."T1" AS t USING ({source}) AS s ON t.K = s.K '
    "WHEN MATCHED THEN UPDATE SET V = s.V WHEN NOT MATCHED THEN INSERT (K, V) VALUES (s.K, s.V)"
)


def test_a_merge_updating_a_row_from_two_source_rows_is_refused_and_changes_nothing(snowflake):
    with snowflake.connect(schema="OPS") as conn:
        cur = conn.cursor()
        source = "SELECT 'a' AS K, 5 AS V UNION ALL SELECT 'a', 6 UNION ALL SELECT 'z', 9"
        message = _refused(cur, _MERGE.format(source=source))
        assert message.startswith("Duplicate row detected during DML action") and '"a"' in message
        assert _rows(cur, 'SELECT K, V FROM "DW_PROD"."OPS"."T1" ORDER BY K') == [("a", 1), ("b", 2)]


def test_a_merge_with_unique_source_keys_applies_and_inserts_only_merges_insert_duplicates(snowflake):
    with snowflake.connect(schema="OPS", paramstyle="qmark") as conn:
        cur = conn.cursor()
        cur.execute('CREATE OR REPLACE TABLE "DW_PROD"."OPS"."M" (K VARCHAR, V NUMBER(38,0))')
        cur.execute('INSERT INTO "DW_PROD"."OPS"."M" VALUES (\'a\', 1)')
        merge = _MERGE.replace('"T1"', '"M"').format(source="SELECT ? AS K, ? AS V")
        cur.execute(merge, ("a", 7))
        cur.execute(merge, ("n", 8))
        assert _rows(cur, 'SELECT K, V FROM "DW_PROD"."OPS"."M" ORDER BY K') == [("a", 7), ("n", 8)]
        # No WHEN MATCHED: nothing is updated twice, so Snowflake inserts both source rows.
        cur.execute(
            'MERGE INTO "DW_PROD"."OPS"."M" AS t USING (SELECT \'x\' AS K, 1 AS V UNION ALL SELECT \'x\', 2) AS s'
            " ON t.K = s.K WHEN NOT MATCHED THEN INSERT (K, V) VALUES (s.K, s.V)"
        )
        assert _rows(cur, 'SELECT COUNT(*) FROM "DW_PROD"."OPS"."M" WHERE K = \'x\'') == [(2,)]


def test_a_merge_binds_its_values_wherever_they_stand_and_counts_what_it_inserted(snowflake):
    # The product's "insert if absent" shape: the key bound in USING, the row bound in INSERT VALUES.
    insert_if_absent = (
        'MERGE INTO "DW_PROD"."OPS"."EVENTS" AS t USING (SELECT ? AS ID, ? AS EVENT_KEY) AS s'
        " ON t.ID = s.ID AND t.EVENT_KEY = s.EVENT_KEY"
        " WHEN NOT MATCHED THEN INSERT (ID, EVENT_KEY, DETAIL) VALUES (?, ?, ?)"
    )
    with snowflake.connect(schema="OPS", paramstyle="qmark") as conn:
        cur = conn.cursor()
        cur.execute(
            'CREATE OR REPLACE TABLE "DW_PROD"."OPS"."EVENTS" (ID VARCHAR, EVENT_KEY VARCHAR, DETAIL VARCHAR)'
        )
        inserted = []
        for detail in ("first 'quoted' \\ detail", "second"):
            cur.execute(insert_if_absent, ("i-1", "k-1", "i-1", "k-1", detail))
            inserted.append(cur.rowcount)
        assert inserted == [1, 0]
        assert _rows(cur, 'SELECT DETAIL FROM "DW_PROD"."OPS"."EVENTS"') == [("first 'quoted' \\ detail",)]
        assert "Bind variable 5 not set" in _refused(cur, insert_if_absent, ("i-2", "k-2", "i-2", "k-2"))


# -- DuckDB-only SQL and division by zero --------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT list_value(1, 2)",
        "SELECT strftime(CURRENT_TIMESTAMP(), '%Y')",
        "SELECT epoch_ms(0)",
        'SELECT string_agg(K, \',\') FROM "DW_PROD"."OPS"."T1"',
        "SELECT 1::HUGEINT",
    ],
)
def test_duckdb_only_sql_is_a_compilation_error(snowflake, sql):
    with snowflake.connect() as conn:
        message = _refused(conn.cursor(), sql)
    assert message.startswith("SQL compilation error:") and (
        "Unknown function" in message or "data type" in message
    )


def test_snowflake_spellings_of_the_same_run(snowflake):
    with snowflake.connect() as conn:
        cur = conn.cursor()
        assert _rows(cur, 'SELECT LISTAGG(K, \',\') WITHIN GROUP (ORDER BY K) FROM "DW_PROD"."OPS"."T1"') == [
            ("a,b",)
        ]
        assert _rows(cur, "SELECT ARRAY_SIZE(ARRAY_CONSTRUCT(1, 2))") == [(2,)]


def test_division_by_zero_is_an_error_and_nullif_guards_it(snowflake):
    with snowflake.connect() as conn:
        cur = conn.cursor()
        assert _refused(cur, "SELECT 1 / 0") == "Division by zero"
        assert _refused(cur, 'SELECT V / (V - V) FROM "DW_PROD"."OPS"."T1"') == "Division by zero"
        assert _rows(cur, "SELECT 1 / NULLIF(0, 0)") == [(None,)]


# -- time zones ---------------------------------------------------------------------------------------------

_LA = "America/Los_Angeles"


def test_a_session_reads_times_in_its_time_zone_los_angeles_unless_set(snowflake):
    at = "SELECT '2026-01-15 10:00:00'::TIMESTAMP_TZ, '2026-01-15 10:00:00+02:00'::TIMESTAMP_TZ"
    with snowflake.connect() as conn:
        cur = conn.cursor()
        local, offset = _rows(cur, at)[0]
        assert local.utcoffset() == timedelta(hours=-8)  # Snowflake's default TIMEZONE, in January
        assert local == datetime(2026, 1, 15, 18, tzinfo=UTC) and offset == datetime(
            2026, 1, 15, 8, tzinfo=UTC
        )
        cur.execute("ALTER SESSION SET TIMEZONE = 'Asia/Tokyo'")
        local, offset = _rows(cur, at)[0]
        assert local.utcoffset() == timedelta(hours=9) and local == datetime(2026, 1, 15, 1, tzinfo=UTC)
        assert offset == datetime(2026, 1, 15, 8, tzinfo=UTC)  # the instant is kept
        cur.execute("ALTER SESSION UNSET TIMEZONE")
        assert _rows(cur, at)[0][0].utcoffset() == timedelta(hours=-8)
    with snowflake.connect(timezone="UTC") as conn:
        local, _ = _rows(conn.cursor(), at)[0]
        assert local == datetime(2026, 1, 15, 10, tzinfo=UTC) and local.utcoffset() == timedelta(0)


def test_casts_between_timestamp_kinds_go_through_the_session_time_zone(snowflake):
    ntz = "SELECT CAST('2026-07-01 12:00:00+00:00'::TIMESTAMP_LTZ AS TIMESTAMP_NTZ), CURRENT_TIMESTAMP()"
    with snowflake.connect() as conn:
        wall, now = _rows(conn.cursor(), ntz)[0]
        assert wall == datetime(2026, 7, 1, 5, 0) and now.utcoffset() in (
            timedelta(hours=-7),
            timedelta(hours=-8),
        )
    with snowflake.connect(timezone="UTC") as conn:
        wall, now = _rows(conn.cursor(), ntz)[0]
        assert wall == datetime(2026, 7, 1, 12, 0) and now.utcoffset() == timedelta(0)


def test_bound_times_are_wall_clock_times_read_in_the_session_time_zone(snowflake):
    # The connector binds a datetime as TIMESTAMP_NTZ, an aware one as its UTC wall-clock time
    # (https://docs.snowflake.com/en/developer-guide/python-connector/python-connector-example#binding-datetime-with-timestamp):
    # written to a TIMESTAMP_TZ it is read in the session's time zone, so only a UTC session keeps the instant.
    written = datetime(2026, 3, 1, 9, 30)
    aware = datetime(2026, 3, 1, 9, 30, tzinfo=timezone(timedelta(hours=5)))
    insert = 'INSERT INTO "DW_PROD"."OPS"."STAMPS" VALUES (?, ?)'
    read = 'SELECT NTZ, TZ FROM "DW_PROD"."OPS"."STAMPS"'
    with snowflake.connect(paramstyle="qmark") as conn:
        cur = conn.cursor()
        cur.execute('CREATE OR REPLACE TABLE "DW_PROD"."OPS"."STAMPS" (NTZ TIMESTAMP_NTZ, TZ TIMESTAMP_TZ)')
        cur.execute(insert, (written, aware))
        ((ntz, tz),) = _rows(cur, read)
        assert ntz == written and tz.utcoffset() == timedelta(hours=-8)
        assert tz.replace(tzinfo=None) == datetime(2026, 3, 1, 4, 30) and tz != aware
    with snowflake.connect(paramstyle="qmark", timezone="UTC") as conn:
        cur = conn.cursor()
        cur.execute('TRUNCATE TABLE "DW_PROD"."OPS"."STAMPS"')
        cur.execute(insert, (written, aware))
        assert _rows(cur, read) == [(written, aware)]


def test_an_unknown_time_zone_is_refused(snowflake):
    with snowflake.connect() as conn:
        assert "for parameter 'TIMEZONE'" in _refused(
            conn.cursor(), "ALTER SESSION SET TIMEZONE = 'Mars/Olympus'"
        )


# -- INFORMATION_SCHEMA.TABLES ---------------------------------------------------------------------------------


def test_information_schema_tables_counts_rows_exactly_and_gives_views_no_count(snowflake):
    with snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute('CREATE OR REPLACE TABLE "DW_PROD"."OPS"."COUNTED" (N NUMBER(38,0))')
        cur.execute(
            'INSERT INTO "DW_PROD"."OPS"."COUNTED" SELECT SEQ4() FROM TABLE(GENERATOR(ROWCOUNT => 5000))'
        )
        cur.execute('DELETE FROM "DW_PROD"."OPS"."COUNTED" WHERE N < 1234')
        cur.execute(
            'CREATE OR REPLACE VIEW "DW_PROD"."OPS"."COUNTED_VIEW" AS SELECT * FROM "DW_PROD"."OPS"."COUNTED"'
        )
        rows = _rows(
            cur,
            'SELECT TABLE_NAME, TABLE_TYPE, ROW_COUNT FROM "DW_PROD".INFORMATION_SCHEMA.TABLES'
            " WHERE TABLE_SCHEMA = 'OPS' AND TABLE_NAME LIKE 'COUNTED%' ORDER BY TABLE_NAME",
        )
        assert rows == [("COUNTED", "BASE TABLE", 3766), ("COUNTED_VIEW", "VIEW", None)]


# -- server-side bindings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("paramstyle", "placeholder"), [("qmark", "?"), ("numeric", ":1")])
def test_bound_values_travel_beside_the_text_and_stay_out_of_query_history(
    snowflake, paramstyle, placeholder
):
    secret = f"payload-{paramstyle}-4f1c"
    sql = f'SELECT COUNT(*) FROM "DW_PROD"."OPS"."T1" WHERE K = {placeholder} OR K = \'a\''
    with snowflake.connect(paramstyle=paramstyle) as conn:
        cur = conn.cursor()
        assert _rows(cur, sql, (secret,)) == [(1,)]
        texts = [
            t
            for (t,) in _rows(
                cur,
                f"SELECT QUERY_TEXT FROM SNOWFLAKE.ACCOUNT_USAGE.QUERY_HISTORY WHERE QUERY_TEXT LIKE {placeholder}",
                ('SELECT COUNT(*) FROM "DW_PROD"."OPS"."T1" WHERE K = %',),
            )
        ]
    assert sql in texts and not any(secret in t for t in texts)
