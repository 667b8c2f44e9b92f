"""Version 2 of the ops schema: the row counts of ``VOLUME_HISTORY`` become the series ``volume:<asset>`` of
``METRIC_HISTORY`` (one history table, so a checks run writes its night in one statement). An older schema
is named as such by a checks run's first statement, and ``migrate`` moves its rows, flags and sources
included, then drops the old table (local Snowflake, no world)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from ops_warehouse import warehouse  # noqa: F401 - the fixture

from dw_dagster.checks.history import HistoryStore, Reading, volume_series
from dw_dagster.warehouse.migrations import SCHEMA_VERSION, VERSION_TABLE, migrate, state
from dw_dagster.warehouse.ops import OpsSchema, OpsSchemaError

DAY = date(2026, 3, 10)
V1_VOLUME_HISTORY = """
    ASSET_KEY VARCHAR NOT NULL, BUSINESS_DATE DATE NOT NULL, ROW_COUNT DOUBLE, SOURCE VARCHAR,
    RECORDED_AT TIMESTAMP_TZ NOT NULL, FLAGGED BOOLEAN NOT NULL DEFAULT FALSE
"""


def _as_version_1(wh, ops: OpsSchema) -> None:
    """The schema as dw-dagster's version 1 left it: row counts in VOLUME_HISTORY, no METRIC_HISTORY.SOURCE."""
    migrate(wh, ops)
    with ops.connect(wh, "test") as conn:
        cur = conn.cursor()
        cur.execute(f"ALTER TABLE {ops.table('METRIC_HISTORY')} DROP COLUMN SOURCE")
        cur.execute(f"CREATE TABLE {ops.table('VOLUME_HISTORY')} ({V1_VOLUME_HISTORY})")
        for back in range(1, 4):
            cur.execute(
                f"INSERT INTO {ops.table('VOLUME_HISTORY')} VALUES (?, ?, ?, 'count', ?, ?)",
                ("mart/orders", DAY - timedelta(days=back), 100.0 + back, datetime.now(UTC), back == 2),
            )
        cur.execute(f"DELETE FROM {ops.table(VERSION_TABLE)}")
        cur.execute(
            f"INSERT INTO {ops.table(VERSION_TABLE)} VALUES (1, CURRENT_TIMESTAMP(), 'dw-dagster', '[]')"
        )


def test_an_older_schema_is_named_and_migrate_moves_its_row_counts(warehouse):  # noqa: F811
    _, wh = warehouse
    ops = OpsSchema(wh.database, "OPS_V1")
    _as_version_1(wh, ops)
    before = state(wh, ops)
    assert (
        not before.current
        and before.missing == ["METRIC_HISTORY.SOURCE"]
        and before.retired == ["VOLUME_HISTORY"]
    )
    with pytest.raises(
        OpsSchemaError, match=r"missing METRIC_HISTORY.SOURCE\): run `dw-dagster ops migrate`"
    ):
        with HistoryStore(wh, ops).session("test") as history:
            history.night_context(
                DAY - timedelta(days=120), DAY, {volume_series("mart/orders"): DAY - timedelta(days=120)}
            )

    report = migrate(wh, ops)
    assert report.version == SCHEMA_VERSION
    assert any(s.startswith("DROP TABLE IF EXISTS") and "VOLUME_HISTORY" in s for s in report.changes)
    assert state(wh, ops).current and migrate(wh, ops).changes == []
    with HistoryStore(wh, ops).session("test") as history:
        moved = history.volume_history("mart/orders", DAY, 10)
        assert {d: r.value for d, r in moved.items()} == {
            DAY - timedelta(days=n): 100.0 + n for n in (1, 2, 3)
        }
        assert [d for d, r in moved.items() if r.flagged] == [DAY - timedelta(days=2)]
        history.cur.execute(f"SELECT DISTINCT SOURCE FROM {ops.table('METRIC_HISTORY')}")
        assert history.cur.fetchall() == [("count",)]
        history.record_night(
            DAY, {volume_series("mart/orders"): Reading(value=104.0, source="count")}, "r", None
        )
        assert history.latest_volume("mart/orders") == DAY
