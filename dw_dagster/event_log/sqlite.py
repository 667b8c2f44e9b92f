"""Dagster's sqlite event log storage (the local world's), storing a run's planned check events in one
run-shard and one index transaction when configured (``planned_checks``), over connections it keeps open
between operations (:class:`SqliteEngines`, which the local world's run and schedule storages use too)."""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy.exc as db_exc
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine

from dw_dagster.event_log.planned_checks import (
    CONFIG_SCHEMA,
    event_rows,
    insert_planned_check_events,
    is_planned_check_batch,
)
from dw_dagster.internals import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    EventLogEntry,
    SqlEventLogStorageMetadata,
    SqlEventLogStorageTable,
    SqliteEventLogStorage,
    create_db_conn_string,
    get_alembic_config,
    sqlite_event_log,
)

# Run shards whose connection stays open besides the index's: a run writes to its own shard and a tick reads
# a few; the others are reopened when next used.
OPEN_RUN_SHARDS = 8


@functools.cache
def _migrations() -> ScriptDirectory:
    # Dagster reads its event log migrations from their files at each new run shard, twice (about 75 ms a
    # run); they do not change while the process runs.
    return ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__))


class SqliteEngines:
    """An engine per sqlite database (by name), each pooling its connections, for this process.

    Dagster's sqlite storages make an engine and a connection for every operation and dispose of both: each
    operation opens the file and reads its schema again, and loses the compiled statements SQLAlchemy keeps
    per engine. Here a database's connection stays open in its engine's pool between operations. Each
    operation is still its own transaction: a connection goes back to the pool rolled back (SQLAlchemy's
    reset on return), so an idle one holds no lock and other processes see each commit as before. A pool
    keeps one connection; threads asking at once get more, closed when they come back. pysqlite's
    connections may pass between threads: SQLAlchemy's pysqlite dialect sets ``check_same_thread=False``
    when it pools a file database's connections."""

    def __init__(self, **connect_args) -> None:
        self._connect_args = connect_args
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[str]:
        """The names of the open databases, the least recently used first."""
        return iter(list(self._engines))

    def get(self, name: str, url: str) -> Engine:
        """The engine of database ``name`` (at ``url``), opened on first use; now its most recently used."""
        if self._pid != os.getpid():
            self._forget_the_parents()
        with self._lock:
            engine = self._engines.get(name)
            if engine is None:
                engine = create_engine(url, pool_size=1, max_overflow=-1, connect_args=self._connect_args)
                self._engines[name] = engine
            else:
                self._engines.move_to_end(name)
            return engine

    def close(self, name: str | None = None) -> None:
        """Closes database ``name``'s connections (every database's by default); it opens again if used."""
        with self._lock:
            for closed in list(self._engines) if name is None else [name]:
                self._engines.pop(closed).dispose()

    def _forget_the_parents(self) -> None:
        # A forked child must neither use nor close the connections it inherited: SQLAlchemy's "Using
        # Connection Pools with Multiprocessing or os.fork()" (docs, Connection Pooling), and sqlite's "How
        # To Corrupt", 2.6. Engine.dispose(close=False) forgets them; the child opens its own. The lock is
        # new too: another thread of the parent may have held it at the fork.
        for engine in self._engines.values():
            engine.dispose(close=False)
        self._engines, self._pid, self._lock = OrderedDict(), os.getpid(), threading.Lock()


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` (same config: ``base_dir``, the folder of its run shards and index), and
    ``batch_planned_check_events`` (default false).

    The run's shard is committed first: a failure of the index transaction leaves the events in the run's
    own log when Dagster then stores the batch again one event at a time (there twice; the index once).

    Dagster's storage opens an engine and a connection for every operation and disposes of both: with the
    first access's schema read, most of the storage's time in a local night. Here each shard keeps its engine
    and pooled connection (:class:`SqliteEngines`; the index's, and the ``OPEN_RUN_SHARDS`` last used run
    shards'). Operations still run one at a time under Dagster's lock."""

    def __init__(self, base_dir: str, inst_data=None, batch_planned_check_events: bool = False):
        self._engines = SqliteEngines(timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
        super().__init__(base_dir, inst_data)
        self.batch_planned_check_events = batch_planned_check_events

    @classmethod
    def config_type(cls) -> dict:
        return {**super().config_type(), **CONFIG_SCHEMA}

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> BatchedSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        """A new run shard as Dagster makes it (its tables, WAL, stamped at the head migration), with the
        migrations read once per process; the index, a shard made elsewhere and a contended start are
        Dagster's own ``_initdb``."""
        if not for_index_shard:
            try:
                with engine.connect() as conn:
                    migration = MigrationContext.configure(conn)
                    if migration.get_current_revision() is not None:
                        return
                    SqlEventLogStorageMetadata.create_all(conn)
                    conn.execute(text("PRAGMA journal_mode=WAL;"))
                    migration.stamp(_migrations(), "head")
                    conn.commit()
                return
            except db_exc.DatabaseError:
                pass  # another process making the same shard: Dagster's retries
        super()._initdb(engine, for_index_shard)

    def _engine(self, shard: str) -> Engine:
        engine = self._engines.get(shard, create_db_conn_string(self._base_dir, shard))
        runs = [s for s in self._engines if s != INDEX_SHARD_NAME]
        for stale in runs[: max(0, len(runs) - OPEN_RUN_SHARDS)]:
            self._engines.close(stale)
        return engine

    def _close_connections(self) -> None:
        with self._db_lock:
            self._engines.close()

    def wipe(self) -> None:
        # Dagster deletes the run shards' files: no connection may stay open on a deleted file.
        self._close_connections()
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._close_connections()

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not (self.batch_planned_check_events and is_planned_check_batch(self, events)):
            super().store_event_batch(events)
            return
        rows = event_rows(self, events)
        # The run's own log, then the index (another file), which holds the rows readers query across runs.
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
        with self.index_transaction() as conn:
            insert_planned_check_events(self, conn, events, rows)
