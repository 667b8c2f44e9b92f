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


@contextmanager
def bound_statements() -> Iterator[list[tuple[str, list[str | None]]]]:
    """``with bound_statements() as sent:``: each statement sent inside the block, with the values bound to
    it beside its text (server-side binding: the request's bindings, each value as the connector sends it,
    text)."""
    sent: list[tuple[str, list[str | None]]] = []
    original = SnowflakeConnection.cmd_query

    def recording(self, sql, *args, binding_params=None, **kwargs):
        values = (
            [b.get("value") for b in (binding_params or {}).values()]
            if isinstance(binding_params, dict)
            else []
        )
        sent.append((sql, values))
        return original(self, sql, *args, binding_params=binding_params, **kwargs)

    SnowflakeConnection.cmd_query = recording  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        SnowflakeConnection.cmd_query = original  # type: ignore[method-assign]


@contextmanager
def logins() -> Iterator[list[str]]:
    """``with logins() as signed_in:``: each sign-in this process makes inside the block (its host)."""
    signed_in: list[str] = []
    original = SnowflakeConnection.connect

    def recording(self, **kwargs):
        original(self, **kwargs)
        signed_in.append(self.host)

    SnowflakeConnection.connect = recording  # type: ignore[method-assign]
    try:
        yield signed_in
    finally:
        SnowflakeConnection.connect = original  # type: ignore[method-assign]
