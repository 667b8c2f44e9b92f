"""The local world's Dagster run and schedule storages: Dagster's sqlite ones (the same files), whose
connections stay open between operations (``SqliteEngines``, as the deployment's sqlite event log storage keeps
its own) instead of an engine and a connection made and closed for every operation: in a local night, the
open, the schema read and SQLAlchemy's compiled statements (kept per engine, so lost with each one) were a
tenth of the test process's time (benchmarks/HISTORY.md, eleventh session).

Dagster's sqlite storages have no setting for this: the classes below replace their ``connect`` and rely on
their private attributes and construction (``_conn_string``, ``from_local``), in this one module, behind the
release check. It lives in the local world, not in dw_dagster/internals.py: production runs on Postgres,
whose storages pool their connections already; only the local world's instances are on sqlite."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Connection

from dw_dagster.coalesce.dagster_version import require_verified_dagster
from dw_dagster.event_log.sqlite import SqliteEngines

require_verified_dagster(
    "the local world's pooled sqlite run and schedule storages (dw_local.pooled_storage)"
)

# Below the check, so that another release fails above with a message rather than here with an ImportError.
# ruff: noqa: E402
from dagster._core.storage.runs import SqliteRunStorage
from dagster._core.storage.schedules import SqliteScheduleStorage


class _Pooled:
    """``connect`` over one pooled engine, closed by ``dispose``; each operation is still its own transaction
    (``SqliteEngines``)."""

    _conn_string: str

    def __init__(self, conn_string: str, inst_data=None) -> None:
        self._engines = SqliteEngines()  # Dagster's connect arguments: none
        super().__init__(conn_string, inst_data)  # type: ignore[call-arg]

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        # Dagster's makes its own class here, not ``cls``.
        return cls.from_local(inst_data=inst_data, **config_value)  # type: ignore[attr-defined]

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._engines.get("db", self._conn_string).connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        self._engines.close()


class PooledSqliteScheduleStorage(_Pooled, SqliteScheduleStorage):
    """Dagster's ``SqliteScheduleStorage`` (config: ``base_dir``) over a pooled connection."""


class PooledSqliteRunStorage(_Pooled, SqliteRunStorage):
    """Dagster's ``SqliteRunStorage`` (config: ``base_dir``) over a pooled connection; its ``dispose`` closes
    the instance's schedule storage's connections too."""

    def dispose(self) -> None:
        super().dispose()
        # Dagster's instance disposes of its run and event log storages but never of its schedule storage
        # (StorageMethods.dispose; its own DagsterSqliteStorage.dispose does all three, but the instance does
        # not call it): without this, each instance a process made and disposed of would leave the schedule
        # database open until garbage collection.
        schedules = self._instance.schedule_storage if self.has_instance else None
        if isinstance(schedules, PooledSqliteScheduleStorage):
            schedules.dispose()
