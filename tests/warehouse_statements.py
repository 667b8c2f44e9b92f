"""Counting what reaches Snowflake: every statement this process sends, at the connector (as
``benchmarks/bench_idle_warehouse.py`` counts it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from snowflake.connector.connection import SnowflakeConnection


@contextmanager
def statements() -> Iterator[list[str]]:
    """``with statements() as sent:``: the SQL of each statement sent inside the block, in order."""
    sent: list[str] = []
    original = SnowflakeConnection.cmd_query

    def recording(self, sql, *args, **kwargs):
        sent.append(sql)
        return original(self, sql, *args, **kwargs)

    SnowflakeConnection.cmd_query = recording  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        SnowflakeConnection.cmd_query = original  # type: ignore[method-assign]
