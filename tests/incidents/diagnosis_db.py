"""An in-process fakesnow database for the diagnosis's unit tests: database ``DB`` with the schemas a test's
pipeline uses and the ops tables the diagnosis reads (``DW_OPS``), no server, no world."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import fakesnow
import snowflake.connector

from dw_dagster.warehouse.ops import TABLES


@contextmanager
def diagnosis_db(*schemas: str) -> Iterator[Any]:
    """A connection to ``DB`` with ``schemas`` and ``DW_OPS`` (its metric history and incidents) created."""
    with fakesnow.patch():
        # Bound server-side, as the product's own connections bind (warehouse/connections.py).
        conn = snowflake.connector.connect(database="DB", schema="RAW", paramstyle="qmark")
        cur = conn.cursor()
        for schema in (*schemas, "DW_OPS"):
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "DB"."{schema}"')
        cur.execute(f'CREATE TABLE "DB"."DW_OPS"."METRIC_HISTORY" ({TABLES["METRIC_HISTORY"]})')
        cur.execute(f'CREATE TABLE "DB"."DW_OPS"."INCIDENTS" ({TABLES["INCIDENTS"]})')
        try:
            yield conn
        finally:
            conn.close()
