"""The deployment's sqlite event log storage keeps one connection per shard open between operations instead of
Dagster's engine and connection per operation: each operation is still its own transaction (another process
sees each commit), a new run shard is made exactly as Dagster makes it, at most ``OPEN_RUN_SHARDS`` run
shards stay open, a wipe closes them before Dagster deletes their files, and a forked child opens its own."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import dagster as dg
import sqlalchemy as sa
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from dw_dagster.event_log.sqlite import OPEN_RUN_SHARDS, BatchedSqliteEventLogStorage


def _events(storage, run_id: str) -> int:
    with storage.run_connection(run_id) as conn:
        return conn.execute(sa.text("SELECT COUNT(*) FROM event_logs")).scalar()


def _log(storage, run_id: str, n: int) -> None:
    for i in range(n):
        storage.store_event(
            dg.EventLogEntry(
                error_info=None, level="INFO", user_message=f"m{i}", run_id=run_id, timestamp=1.0 * i
            )
        )


def test_operations_reuse_one_connection_per_shard_and_commit_each(tmp_path, sqlite_opened):
    dagsters = SqliteEventLogStorage(str(tmp_path / "dagster"))
    sqlite_opened.clear()
    _log(dagsters, "run-a", 20)
    assert len(sqlite_opened) >= 20  # Dagster's storage: a connection per operation
    storage = BatchedSqliteEventLogStorage(str(tmp_path))
    sqlite_opened.clear()
    _log(storage, "run-a", 20)
    assert sqlite_opened == ["run-a.db"]
    # Each operation committed: a reader in another connection (as another process) sees all of them.
    with sqlite3.connect(tmp_path / "run-a.db") as other:
        assert other.execute("SELECT COUNT(*) FROM event_logs").fetchone()[0] == 20
    storage.dispose()
    assert not list(storage._engines)


def test_a_new_run_shard_is_made_as_dagsters_storage_makes_it(tmp_path):
    ours = BatchedSqliteEventLogStorage(str(tmp_path / "ours"))
    dagsters = SqliteEventLogStorage(str(tmp_path / "dagster"))
    _log(ours, "run-a", 1)
    _log(dagsters, "run-a", 1)

    def made(base: Path) -> tuple:
        with sqlite3.connect(base / "run-a.db") as conn:
            return (
                sorted(conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall(), key=str),
                conn.execute("SELECT version_num FROM alembic_version").fetchall(),
                conn.execute("PRAGMA journal_mode").fetchall(),
            )

    assert made(tmp_path / "ours") == made(tmp_path / "dagster")
    assert made(tmp_path / "ours")[2] == [("wal",)]
    ours.dispose()


def test_only_the_last_used_run_shards_stay_open(tmp_path):
    storage = BatchedSqliteEventLogStorage(str(tmp_path))
    runs = [f"run-{i}" for i in range(OPEN_RUN_SHARDS + 3)]
    for run_id in runs:
        _log(storage, run_id, 1)
    assert list(storage._engines) == ["index", *runs[-OPEN_RUN_SHARDS:]]
    # A shard closed earlier opens again and still reads what it holds.
    assert _events(storage, runs[0]) == 1
    assert runs[0] in storage._engines and runs[3] not in storage._engines
    storage.dispose()


def test_a_wipe_closes_the_connections_before_deleting_the_files(tmp_path):
    storage = BatchedSqliteEventLogStorage(str(tmp_path))
    _log(storage, "run-a", 3)
    storage.wipe()
    assert not (tmp_path / "run-a.db").exists()
    # Written after the wipe, the run's events go to a new file, not to the deleted one's open handle.
    _log(storage, "run-a", 2)
    assert _events(storage, "run-a") == 2
    with sqlite3.connect(tmp_path / "run-a.db") as other:
        assert other.execute("SELECT COUNT(*) FROM event_logs").fetchone()[0] == 2
    storage.dispose()


def test_a_forked_child_opens_its_own_connections(tmp_path):
    storage = BatchedSqliteEventLogStorage(str(tmp_path))
    _log(storage, "run-a", 1)
    parents = {shard: id(storage._engine(shard)) for shard in storage._engines}
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: writes through the storage it inherited, then reports what it used
        try:
            _log(storage, "run-a", 1)
            reused = any(id(storage._engine(s)) == parents.get(s) for s in storage._engines)
            os.write(write, b"reused" if reused else b"own")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"own"
    # The parent's connections still work after the child is gone.
    _log(storage, "run-a", 1)
    assert _events(storage, "run-a") == 3
    storage.dispose()
