"""The storage of the local world's Dagster instances as the deployment configures it (docs/production.md):
Dagster's own, with the deployment's event log storage (dw_dagster/event_log), which stores a checks run's
planned check events in one transaction (``batch_planned_check_events``, as the deployment sets it) when
``DAGSTER_EVENT_BATCH_SIZE`` is set where runs are created. On sqlite, the run and schedule storages are
Dagster's over pooled connections (``dw_local.pooled_storage``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dagster as dg
from dagster._core.instance.ref import InstanceRef
from sqlalchemy import event
from sqlalchemy.engine import Engine

# Planned check events per batch, as the deployment sets it (Dockerfile): a checks run of up to 1,000 checks
# in one transaction, 2,001 in three.
EVENT_BATCH_SIZE = "1000"


def deployment_storage(home: Path, postgres_url: str | None = None) -> dict:
    """The storage sections of the ``dagster.yaml`` of an instance at ``home``: Dagster's sqlite storage
    under ``home`` (the files Dagster's default puts there) over pooled connections, or dagster-postgres at
    ``postgres_url``; either with the deployment's event log storage."""
    if postgres_url is None:
        event_log = {"base_dir": str(home / "history" / "runs"), "batch_planned_check_events": True}
        return {
            "run_storage": {
                "module": "dw_local.pooled_storage",
                "class": "PooledSqliteRunStorage",
                "config": {"base_dir": str(home / "history")},
            },
            "event_log_storage": {
                "module": "dw_dagster.event_log.sqlite",
                "class": "BatchedSqliteEventLogStorage",
                "config": event_log,
            },
            "schedule_storage": {
                "module": "dw_local.pooled_storage",
                "class": "PooledSqliteScheduleStorage",
                "config": {"base_dir": str(home / "schedules")},
            },
        }
    pg = {"postgres_url": postgres_url}
    return {
        "run_storage": {
            "module": "dagster_postgres.run_storage",
            "class": "PostgresRunStorage",
            "config": pg,
        },
        "event_log_storage": {
            "module": "dw_dagster.event_log.postgres",
            "class": "BatchedPostgresEventLogStorage",
            "config": {**pg, "batch_planned_check_events": True},
        },  # fmt: skip
        "schedule_storage": {
            "module": "dagster_postgres.schedule_storage",
            "class": "PostgresScheduleStorage",
            "config": pg,
        },  # fmt: skip
    }


def _commit_without_fsync(dbapi_connection, _record) -> None:
    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute("PRAGMA synchronous=OFF")


def without_fsync() -> None:
    """Every sqlite database SQLAlchemy opens in this process from now on commits without waiting for the
    disk (``PRAGMA synchronous=OFF``, set on each new connection): Dagster's sqlite storage's commits and
    WAL checkpoints each waited for an fsync, more than half of a local night's time (about 430
    a night). What a commit wrote still outlives a killed process (the operating system keeps it); only a
    crash of the machine could lose it, which a local world can afford and production (Postgres) never
    does."""
    if not event.contains(Engine, "connect", _commit_without_fsync):
        event.listen(Engine, "connect", _commit_without_fsync)


def deployment_instance(home: Path) -> dg.DagsterInstance:
    """The instance of ``home``'s ``dagster.yaml`` (one without storage: the local world's), on the
    deployment's storage under ``home``. The path is given here, not written into the file: a seeded world's
    home is copied to another place to be used. Its sqlite commits do not wait for the disk
    (:func:`without_fsync`)."""
    without_fsync()
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home), overrides=deployment_storage(home)))
