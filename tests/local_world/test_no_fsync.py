"""The local world's stores commit without waiting for the disk (an fsync per commit was more than half of a
local night's time; benchmarks/HISTORY.md, "Seeding a world template"): the Dagster instance's sqlite storage,
the local Snowflake's DuckDB (asked over its socket), the simulator's run store and the Slack stand-in's."""

from __future__ import annotations

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from dw_local import instance_storage
from dw_local.coalesce_sim.store import RunStore
from dw_local.slack_server import SlackSink
from dw_local.world import LocalWorld


@pytest.fixture
def no_listener():
    """The listener the suite's conftest registered, taken away for the test and put back after it."""
    registered = event.contains(Engine, "connect", instance_storage._commit_without_fsync)
    if registered:
        event.remove(Engine, "connect", instance_storage._commit_without_fsync)
    yield
    if registered and not event.contains(Engine, "connect", instance_storage._commit_without_fsync):
        event.listen(Engine, "connect", instance_storage._commit_without_fsync)


def _synchronous(conn) -> int:
    return conn.exec_driver_sql("PRAGMA synchronous").scalar()


def test_the_local_instance_sqlite_storage_does_not_wait_for_the_disk(no_listener, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = instance_storage.deployment_instance(home)
    try:
        with instance.event_log_storage.index_connection() as conn:
            assert _synchronous(conn) == 0
        with instance.run_storage.connect() as conn:
            assert _synchronous(conn) == 0
    finally:
        instance.dispose()


def test_without_the_listener_sqlite_waits_for_the_disk(no_listener, tmp_path):
    # The default the listener changes: Dagster's own storage syncs every commit (FULL).
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    storage = SqliteEventLogStorage(str(tmp_path / "runs"))
    with storage.index_connection() as conn:
        assert _synchronous(conn) == 2


def test_the_local_snowflake_does_not_wait_for_the_disk(tmp_path):
    with LocalWorld(tmp_path / "local", services=("snowflake",)) as lw, lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT current_setting('fsync_mode')")
        assert cur.fetchall() == [("NONE",)]


def test_the_simulator_and_slack_stores_do_not_wait_for_the_disk(tmp_path):
    store = RunStore(tmp_path / "coalesce" / "coalesce.sqlite3")
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 0
    sink = SlackSink(tmp_path / "slack")
    assert sink._db.execute("PRAGMA synchronous").fetchone()[0] == 0
