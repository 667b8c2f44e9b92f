"""Dagster instances on Dagster's own storage or on the deployment's (Dagster's, with the event log storage of
dw_dagster/event_log, as docs/production.md configures it), on sqlite or on a database of their own on a
PostgreSQL server, for the tests that compare what each stores."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import sqlalchemy as sa
from dagster._core.test_utils import instance_for_test

SQLITE_EVENT_LOG = {"module": "dw_dagster.event_log.sqlite", "class": "BatchedSqliteEventLogStorage"}
POSTGRES_EVENT_LOG = {"module": "dw_dagster.event_log.postgres", "class": "BatchedPostgresEventLogStorage"}


def fresh_database(postgres_url: str, name: str) -> str:
    """The URL of a new, empty database ``name`` on the server of ``postgres_url`` (dropped first if there)."""
    engine = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = engine.url.set(database=name).render_as_string(hide_password=False)
    engine.dispose()
    return url


def storage_overrides(home: Path, postgres_url: str | None, deployment: bool) -> dict:
    """The instance's storage sections: sqlite under ``home`` when ``postgres_url`` is None, else that
    database; Dagster's own storage, or the deployment's (``deployment``)."""
    if not deployment:
        return {"storage": {"postgres": {"postgres_url": postgres_url}}} if postgres_url else {}
    if postgres_url is None:
        # Dagster's default sqlite layout under the instance's home, the event log where Dagster keeps it.
        return {
            "event_log_storage": {**SQLITE_EVENT_LOG, "config": {"base_dir": str(home / "history" / "runs")}}
        }
    pg = {"postgres_url": postgres_url}
    return {
        "run_storage": {
            "module": "dagster_postgres.run_storage",
            "class": "PostgresRunStorage",
            "config": pg,
        },
        "event_log_storage": {**POSTGRES_EVENT_LOG, "config": pg},
        "schedule_storage": {
            "module": "dagster_postgres.schedule_storage",
            "class": "PostgresScheduleStorage",
            "config": pg,
        },  # fmt: skip
    }


@contextmanager
def storage_instance(home: Path, postgres_url: str | None, deployment: bool) -> Iterator[dg.DagsterInstance]:
    """An instance at ``home`` (created) on a storage of its own: sqlite when ``postgres_url`` is None, else
    a new database on that server, named after ``home``."""
    home.mkdir(parents=True)
    url = fresh_database(postgres_url, home.name) if postgres_url else None
    with instance_for_test(
        overrides=storage_overrides(home, url, deployment), temp_dir=str(home)
    ) as instance:
        yield instance
