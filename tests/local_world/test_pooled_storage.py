"""The local world's Dagster instance keeps one connection per sqlite database open between operations
(local/dw_local/pooled_storage.py; the event log's, tests/production/test_sqlite_event_log_connections.py)
instead of Dagster's engine and connection per operation: each operation still commits on its own and leaves
no lock behind (other processes share the files), threads share the pool, a forked child opens its own
connections, and disposing of the instance closes them all."""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import dagster as dg
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import InstigatorState, InstigatorStatus, InstigatorType
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from dw_local.instance_storage import deployment_instance

DATABASES = ("runs.db", "schedules.db")


def _open_files(home: Path) -> list[str]:
    """The run and schedule databases this process has open under ``home``. (sqlite may hold more than one
    descriptor on a file: one closed while another connection to it held locks stays open until the last
    one is closed.)"""
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed by now
        if target.startswith(str(home)) and Path(target).name in DATABASES:
            names.add(Path(target).name)
    return sorted(names)


def _state(name: str) -> InstigatorState:
    location = ManagedGrpcPythonEnvCodeLocationOrigin(LoadableTargetOrigin(python_file=__file__), "location")
    origin = RemoteInstigatorOrigin(RemoteRepositoryOrigin(location, "repo"), name)
    return InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.RUNNING)


def _operate(instance: dg.DagsterInstance, tag: str, n: int) -> None:
    """``n`` writes and reads on the run storage and on the schedule storage."""
    for i in range(n):
        instance.add_run(dg.DagsterRun(job_name="job", run_id=f"{tag}-{i}"))
        instance.get_runs_count()
        instance.add_instigator_state(_state(f"{tag}-{i}"))
        instance.all_instigator_state()


def _rows(path: Path, table: str) -> int:
    # Another connection, as another process would read the file.
    with closing(sqlite3.connect(path)) as other:
        return other.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]


def test_operations_reuse_one_connection_per_database_and_commit_each(tmp_path, sqlite_opened):
    instance = deployment_instance(tmp_path)
    try:
        _operate(instance, "warm", 1)
        sqlite_opened.clear()
        _operate(instance, "run", 20)
        assert sqlite_opened == []  # Dagster's storages: a connection for each of the 80 operations
        assert _open_files(tmp_path) == list(DATABASES)
        # Each operation committed, and the idle connection holds no lock: another connection sees every
        # row, takes the write lock at once and checkpoints the whole log (no reader holds a snapshot).
        assert _rows(tmp_path / "history" / "runs.db", "runs") == 21
        assert _rows(tmp_path / "schedules" / "schedules.db", "instigators") == 21
        for db in (tmp_path / "history" / "runs.db", tmp_path / "schedules" / "schedules.db"):
            with closing(sqlite3.connect(db, timeout=0)) as other:
                other.execute("BEGIN IMMEDIATE")
                other.rollback()
                assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        # The pooled connections still commit without waiting for the disk (without_fsync).
        with instance.run_storage.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 0
    finally:
        instance.dispose()


def test_disposing_of_the_instance_closes_its_connections(tmp_path):
    for i in range(5):
        instance = deployment_instance(tmp_path)
        _operate(instance, f"i{i}", 2)
        assert _open_files(tmp_path) == list(DATABASES)
        instance.dispose()
        assert _open_files(tmp_path) == []  # the schedule database's too, which Dagster's dispose skips
    # Used after it was disposed of, a storage opens its database again.
    _operate(instance, "after", 1)
    assert instance.get_runs_count() == 11
    instance.dispose()


def test_threads_share_the_pool(tmp_path):
    instance = deployment_instance(tmp_path)
    errors: list[BaseException] = []

    def work(tag: str) -> None:
        try:
            _operate(instance, tag, 10)
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert instance.get_runs_count() == 40
        assert len(instance.all_instigator_state()) == 40
    finally:
        instance.dispose()


def test_a_forked_child_opens_its_own_connections(tmp_path, sqlite_opened):
    instance = deployment_instance(tmp_path)
    _operate(instance, "parent", 1)
    sqlite_opened.clear()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: works through the instance it inherited, then reports the files it opened
        try:
            _operate(instance, "child", 2)
            os.write(write, ",".join(sorted(set(sqlite_opened))).encode())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 64).decode() == ",".join(DATABASES)
    # The parent's pooled connections still work, and see what the child committed.
    assert sqlite_opened == []
    _operate(instance, "parent-again", 1)
    assert sqlite_opened == []
    assert instance.get_runs_count() == 4
    instance.dispose()
