"""Dagster instances on Dagster's own storage or on the deployment's (local/dw_local/instance_storage.py), on sqlite
or on a database of their own on a PostgreSQL server, for the tests that compare what each stores."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import sqlalchemy as sa
from dagster._core.test_utils import instance_for_test

from dw_local.instance_storage import deployment_storage


def fresh_database(postgres_url: str, name: str) -> str:
    """The URL of a new, empty database ``name`` on the server of ``postgres_url`` (dropped first if there)."""
    engine = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = engine.url.set(database=name).render_as_string(hide_password=False)
    engine.dispose()
    return url


@contextmanager
def storage_instance(home: Path, postgres_url: str | None, deployment: bool) -> Iterator[dg.DagsterInstance]:
    """An instance at ``home`` (created) on a storage of its own: sqlite when ``postgres_url`` is None, else
    a new database on that server, named after ``home``."""
    home.mkdir(parents=True)
    url = fresh_database(postgres_url, home.name) if postgres_url else None
    if deployment:
        overrides = deployment_storage(home, url)
    else:
        overrides = {"storage": {"postgres": {"postgres_url": url}}} if url else {}
    with instance_for_test(overrides=overrides, temp_dir=str(home)) as instance:
        yield instance
