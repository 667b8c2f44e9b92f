"""Every warehouse session is in UTC, every time read comes back time-zone aware, and a connection can bind its
values server-side so that they stay out of QUERY_HISTORY (dw_dagster/warehouse/connections.py), against the
local Snowflake, whose sessions default to Snowflake's America/Los_Angeles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dw_dagster.warehouse.resources import WarehouseResource


def test_the_session_is_in_utc_where_snowflakes_default_is_los_angeles(world, warehouse: WarehouseResource):
    at = "SELECT '2026-01-15 10:00:00'::TIMESTAMP_TZ, CURRENT_TIMESTAMP()"
    with world.snowflake.connect(database="DW_WH_TEST") as conn:  # another client: Snowflake's default
        cur = conn.cursor()
        cur.execute(at)
        local, _ = cur.fetchone()
    assert local.utcoffset() == timedelta(hours=-8)
    with warehouse.tagged_connection("test.session") as conn:
        cur = conn.cursor()
        cur.execute(at)
        read, now = cur.fetchone()
    assert read == datetime(2026, 1, 15, 10, tzinfo=UTC) and read.utcoffset() == now.utcoffset() == timedelta(
        0
    )


def test_every_time_read_is_aware_a_wall_clock_one_as_utc(warehouse: WarehouseResource):
    with warehouse.tagged_connection("test.session") as conn:
        cur = conn.cursor()
        cur.execute("SELECT '2026-01-15 10:00:00'::TIMESTAMP_NTZ, '2026-01-15'::DATE, 'text'")
        rows = cur.fetchall()
        cur.execute("SELECT '2026-01-15 10:00:00'::TIMESTAMP_NTZ")
        (iterated,) = list(cur)
    assert rows == [(datetime(2026, 1, 15, 10, tzinfo=UTC), datetime(2026, 1, 15).date(), "text")]
    assert iterated[0].tzinfo is UTC


def test_a_qmark_connection_binds_server_side_and_the_value_stays_out_of_query_history(
    warehouse: WarehouseResource, sent
):
    secret = "slack-payload-8c41f0"
    with warehouse.tagged_connection("test.binding", paramstyle="qmark") as conn:
        cur = conn.cursor()
        cur.execute("SELECT ? AS V, ? AS N", (secret, 3))
        assert cur.fetchall() == [(secret, 3)]
    with warehouse.tagged_connection("test.binding") as conn:  # pyformat, client-side, as before
        cur = conn.cursor()
        cur.execute("SELECT %s AS V", ("inlined",))
        assert cur.fetchall() == [("inlined",)]
        cur.execute(
            "SELECT QUERY_TEXT FROM SNOWFLAKE.ACCOUNT_USAGE.QUERY_HISTORY WHERE QUERY_TAG LIKE %s",
            ('%"test.binding"%',),
        )
        texts = [t for (t,) in cur.fetchall()]
    assert "SELECT ? AS V, ? AS N" in texts and not any(secret in t for t in texts)
    assert "SELECT 'inlined' AS V" in texts
    assert [s.sql for s in sent][:1] == ["SELECT ? AS V, ? AS N"]
