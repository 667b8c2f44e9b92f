"""Every warehouse session is in UTC, every time read comes back time-zone aware, and every connection binds its
values server-side so that they stay out of QUERY_HISTORY (dw_dagster/warehouse/connections.py), against the
local Snowflake, whose sessions default to Snowflake's America/Los_Angeles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from snowflake.connector.errors import ProgrammingError

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


def test_every_connection_binds_server_side_and_the_value_stays_out_of_query_history(
    warehouse: WarehouseResource, sent
):
    secret = "slack-payload-8c41f0'); DROP TABLE T; --"
    with warehouse.tagged_connection("test.binding") as conn:
        cur = conn.cursor()
        cur.execute("SELECT ? AS V, ? AS N", (secret, 3))
        assert cur.fetchall() == [(secret, 3)]
        cur.execute(
            "SELECT QUERY_TEXT FROM SNOWFLAKE.ACCOUNT_USAGE.QUERY_HISTORY WHERE QUERY_TAG LIKE ?",
            ('%"test.binding"%',),
        )
        texts = [t for (t,) in cur.fetchall()]
    assert "SELECT ? AS V, ? AS N" in texts and not any("8c41f0" in t for t in texts)
    assert [s.sql for s in sent][:1] == ["SELECT ? AS V, ? AS N"]


def test_a_statement_that_would_put_its_values_in_its_text_is_refused(warehouse: WarehouseResource, sent):
    with warehouse.tagged_connection("test.binding") as conn:
        cur = conn.cursor()
        # The connector's client-side style: Snowflake's compiler refuses the %s, the value never sent.
        with pytest.raises(ProgrammingError):
            cur.execute("SELECT %s AS V", ("inlined-5d2e",))
        with pytest.raises(
            TypeError, match=r"expected a list or tuple, one value per \? placeholder, got dict"
        ):
            cur.execute("SELECT %(v)s AS V", {"v": "inlined-5d2e"})
        with pytest.raises(TypeError, match="statement parameter 2: a list would be bound as an array"):
            cur.execute("SELECT 1 WHERE 1 IN (?) AND ? = 1", (1, [1, 2]))
    assert not any("inlined-5d2e" in s.sql for s in sent)
