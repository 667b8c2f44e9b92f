"""The local Snowflake rewrites a statement's text once and runs the kept rewrite when the text comes again
(local/dw_local/snowflake_statements.py): what runs must be what a fresh rewrite would run, over its real socket,
whatever the session, the bound values or the tables have become since the text was first seen."""

from __future__ import annotations

import pytest

from dw_local.world import LocalWorld


@pytest.fixture(scope="module")
def snowflake(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("sf") / "local", services=("snowflake",)) as lw:
        yield lw.snowflake


def _rows(cur, sql: str, params=None) -> list[tuple]:
    cur.execute(sql, params)
    return [tuple(r) for r in cur.fetchall()]


def test_one_text_with_other_bound_values_reads_each_values_rows(snowflake):
    # qmark: the values travel as bindings beside one unchanged text, as the server sees a repeated query.
    with snowflake.connect(schema="PUBLIC", paramstyle="qmark") as conn:
        cur = conn.cursor()
        cur.execute("CREATE OR REPLACE TABLE BOUND (K NUMBER(38,0), V VARCHAR)")
        cur.executemany("INSERT INTO BOUND (K, V) VALUES (?, ?)", [(1, "one"), (2, "two"), (3, "three")])
        query = "SELECT V FROM BOUND WHERE K >= ? ORDER BY K"
        assert _rows(cur, query, (2,)) == [("two",), ("three",)]
        assert _rows(cur, query, (3,)) == [("three",)]
        assert _rows(cur, query, (1,)) == [("one",), ("two",), ("three",)]


def test_an_unqualified_name_is_read_in_the_schema_the_session_is_in_now(snowflake):
    with snowflake.connect(schema="PUBLIC") as conn:
        cur = conn.cursor()
        for schema, value in (("EAST", "east"), ("WEST", "west")):
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            cur.execute(f"CREATE OR REPLACE TABLE {schema}.PLACES (NAME VARCHAR)")
            cur.execute(f"INSERT INTO {schema}.PLACES VALUES ('{value}')")
        cur.execute("USE SCHEMA EAST")
        assert _rows(cur, "SELECT NAME FROM PLACES") == [("east",)]
        cur.execute("USE SCHEMA WEST")
        assert _rows(cur, "SELECT NAME FROM PLACES") == [("west",)]
        cur.execute("USE SCHEMA EAST")
        assert _rows(cur, "SELECT NAME FROM PLACES") == [("east",)]


def test_a_table_replaced_with_other_columns_is_read_and_described_as_it_is_now(snowflake):
    with snowflake.connect(schema="PUBLIC") as conn:
        cur = conn.cursor()
        cur.execute("CREATE OR REPLACE TABLE SHAPED (A NUMBER(38,0))")
        cur.execute("INSERT INTO SHAPED VALUES (1)")
        assert _rows(cur, "SELECT * FROM SHAPED") == [(1,)]
        assert [c.name for c in cur.description] == ["A"]
        cur.execute("CREATE OR REPLACE TABLE SHAPED (A NUMBER(38,0), B VARCHAR)")
        cur.execute("INSERT INTO SHAPED VALUES (2, 'b')")
        assert _rows(cur, "SELECT * FROM SHAPED") == [(2, "b")]
        assert [c.name for c in cur.description] == ["A", "B"]


def test_a_repeated_write_writes_each_time(snowflake):
    with snowflake.connect(schema="PUBLIC", paramstyle="qmark") as conn:
        cur = conn.cursor()
        create = "CREATE OR REPLACE TABLE LEDGER (K VARCHAR, N NUMBER(38,0))"
        cur.execute(create)
        insert = "INSERT INTO LEDGER (K, N) SELECT 'a', 1"
        cur.execute(insert)
        cur.execute(insert)
        assert _rows(cur, "SELECT COUNT(*) FROM LEDGER") == [(2,)]
        merge = (
            "MERGE INTO LEDGER t USING (SELECT ? AS K, ? AS N) s ON t.K = s.K "
            "WHEN MATCHED THEN UPDATE SET N = t.N + s.N WHEN NOT MATCHED THEN INSERT (K, N) VALUES (s.K, s.N)"
        )
        cur.execute(merge, ("b", 5))
        cur.execute(merge, ("b", 7))
        assert cur.rowcount == 1
        assert _rows(cur, "SELECT N FROM LEDGER WHERE K = 'b'") == [(12,)]
        # The same CREATE again makes the table anew, empty.
        cur.execute(create)
        assert _rows(cur, "SELECT COUNT(*) FROM LEDGER") == [(0,)]


def test_a_failing_statement_fails_again_with_its_message(snowflake):
    with snowflake.connect(schema="PUBLIC") as conn:
        cur = conn.cursor()
        cur.execute("CREATE OR REPLACE TABLE GONE (A NUMBER(38,0))")
        assert _rows(cur, "SELECT A FROM GONE") == []
        cur.execute("DROP TABLE GONE")
        for _ in range(2):
            with pytest.raises(Exception, match="GONE"):
                cur.execute("SELECT A FROM GONE")


def _ledger_night(lw: LocalWorld, since: int) -> list[tuple]:
    with lw.snowflake.connect(schema="PUBLIC", paramstyle="qmark") as conn:
        cur = conn.cursor()
        cur.execute("CREATE OR REPLACE TABLE KEPT (K NUMBER(38,0), V VARCHAR)")
        cur.executemany("INSERT INTO KEPT (K, V) VALUES (?, ?)", [(1, "one"), (2, "two"), (3, "three")])
        return _rows(cur, 'SELECT "V", COUNT(*) OVER () FROM KEPT WHERE "K" >= ? ORDER BY "K"', (since,))


def test_a_server_reads_the_rewrites_another_server_kept_and_redoes_a_broken_one(tmp_path, monkeypatch):
    # Each local world's Snowflake is a new process: the rewrites one kept on disk serve the next, and what
    # runs is still what a fresh rewrite would run (other bound values, another world's data).
    from dw_local.snowflake_statements import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "kept"))
    with LocalWorld(tmp_path / "first", services=("snowflake",)) as lw:
        assert _ledger_night(lw, 2) == [("two", 2), ("three", 2)]
    kept = sorted((tmp_path / "kept").rglob("*.json"))
    assert kept, "the first server kept its rewrites"
    written = {p: p.read_bytes() for p in kept}
    files = {p: p.stat().st_ino for p in kept}
    with LocalWorld(tmp_path / "second", services=("snowflake",)) as lw:
        assert _ledger_night(lw, 3) == [("three", 1)]
    # Read, not written again (a write replaces the file).
    assert {p: p.stat().st_ino for p in (tmp_path / "kept").rglob("*.json")} == files
    for path in kept:
        path.write_text("{")  # a torn or foreign file is a miss, rewritten
    with LocalWorld(tmp_path / "third", services=("snowflake",)) as lw:
        assert _ledger_night(lw, 1) == [("one", 3), ("two", 3), ("three", 3)]
    assert {p: p.read_bytes() for p in kept} == written


def test_each_result_is_described_by_its_own_columns_a_result_scan_included(snowflake):
    """The row types come from the result DuckDB kept, under its query id (snowflake_statements.py,
    ``_keeping_the_description``): a query, a write's count and a RESULT_SCAN of an earlier query each read as
    their own columns, whatever ran between."""
    from snowflake.connector.constants import FIELD_ID_TO_NAME

    def described(cur):
        return [(c.name, FIELD_ID_TO_NAME[c.type_code], c.precision, c.scale) for c in cur.description]

    with snowflake.connect(schema="PUBLIC") as conn:
        cur = conn.cursor()
        cur.execute(
            "CREATE OR REPLACE TABLE TYPED (AMOUNT NUMBER(10,2), NAME VARCHAR, DAY DATE, SEEN TIMESTAMP_TZ, OK BOOLEAN)"
        )
        cur.execute("INSERT INTO TYPED VALUES (1.25, 'a', '2025-06-16', '2025-06-16 01:00:00', TRUE)")
        assert described(cur) == [("number of rows inserted", "FIXED", 38, 0)]
        cur.execute("SELECT AMOUNT, NAME, DAY, SEEN, OK, AMOUNT * 2 AS TWICE FROM TYPED")
        first = cur.sfqid
        typed = [
            ("AMOUNT", "FIXED", 10, 2), ("NAME", "TEXT", None, None), ("DAY", "DATE", None, None),
            ("SEEN", "TIMESTAMP_TZ", 0, 9), ("OK", "BOOLEAN", None, None),
        ]  # fmt: skip
        # A product of NUMBERs keeps their scale; its precision is the engine's (Snowflake's differs).
        typed.append(("TWICE", "FIXED", described(cur)[-1][2], 2))
        assert described(cur) == typed
        cur.execute("SELECT COUNT(*) AS N FROM TYPED")
        assert described(cur) == [("N", "FIXED", 38, 0)]
        cur.execute(f"SELECT * FROM TABLE(RESULT_SCAN('{first}'))")
        assert described(cur) == typed and cur.fetchall()[0][1] == "a"
