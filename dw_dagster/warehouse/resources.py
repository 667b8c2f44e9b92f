"""Snowflake access for every check, op and command, configured as dagster-snowflake's ``SnowflakeResource``
(``snowflake_config.py``).

The same resource serves production and the local world: locally only
``additional_snowflake_connection_args`` (host, port, protocol) differ, so the local path is the
production path. Within a run or a sensor tick, connections are reused (``connections.py``).

Sign-in (``warehouse_from_env``): the settings ``settings.py`` reads from SNOWFLAKE_* variables (a key pair,
a programmatic access token or an OAuth access token, or a password, logged as a warning), the same the
commands read outside Dagster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr, field_validator

from dw_dagster.config import resolve_env_vars
from dw_dagster.internals import RETRY_NUMBER_TAG, cached_method
from dw_dagster.warehouse.connections import (
    PARAMSTYLE,
    SESSION_TIMEZONE,
    ConnectionScope,
    Connector,
    TaggedConnection,
    Warehouse,
    query_tag,
)
from dw_dagster.warehouse.settings import retry_backoff_seconds, settings_from_env
from dw_dagster.warehouse.snowflake_config import SnowflakeConnectionResource


class WarehouseResource(SnowflakeConnectionResource):
    """Snowflake connections whose statements carry a query tag, reused within a run.

    Dagster sets the resource up once per run (``in_process_executor``) or per step, and once per sensor
    tick: in that scope one connection per session schema serves every caller, and teardown closes it.
    Used outside Dagster (a command, a test), each ``tagged_connection`` opens and closes its own.
    """

    retry_backoff_seconds: int = Field(
        default=30,
        description="A run retried by Dagster's run retries waits this long before its first login, doubled "
        "at each further retry, so that a warehouse that was unreachable gets time to come back.",
    )
    _scope: ConnectionScope | None = PrivateAttr(default=None)

    @field_validator("timezone")
    @classmethod
    def _utc_only(cls, value: str | None) -> str | None:
        if value is not None and value not in (SESSION_TIMEZONE, "Etc/UTC"):
            raise ValueError(
                f"timezone {value!r}: dw-dagster reads and writes every time in UTC and sets each session's "
                "TIMEZONE to UTC; leave it unset"
            )
        return value

    @field_validator("paramstyle")
    @classmethod
    def _server_side_binding_only(cls, value: str | None) -> str | None:
        if value is not None and value != PARAMSTYLE:
            raise ValueError(
                f"paramstyle {value!r}: dw-dagster binds every value server-side ({PARAMSTYLE}: ? placeholders, "
                "the values never in the statement's text); leave it unset"
            )
        return value

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run = context.run
        retry = int(run.tags.get(RETRY_NUMBER_TAG, "0")) if run is not None else 0
        wait = self.retry_backoff_seconds * 2 ** (retry - 1) if retry > 0 else 0
        self._scope = ConnectionScope(
            self._connector(), wait_seconds=wait, log=context.log.info if context.log else None
        )

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._scope is not None:
            self._scope.close()
            self._scope = None

    @contextmanager
    def tagged_connection(
        self, purpose: str, schema: str | None = None, **tag_fields: Any
    ) -> Iterator[TaggedConnection]:
        """As :meth:`Warehouse.tagged_connection`; in a run or a tick, the scope's connection for ``schema``."""
        if self._scope is None:
            with Warehouse(self._resolved_connection_args()).tagged_connection(
                purpose, schema, **tag_fields
            ) as conn:
                yield conn
            return
        tag = query_tag(purpose, **tag_fields)
        yield TaggedConnection(self._scope.get(schema, tag), tag, self._scope.breaker)

    def _connector(self) -> Connector:
        return Connector(dict(self._resolved_connection_args()))

    @cached_method
    def _resolved_connection_args(self) -> dict[str, Any]:
        # Used outside Dagster's resource resolution (a command, a store), EnvVars are not yet resolved.
        args = dict(resolve_env_vars(self)._connection_args)
        # Dagster turns an EnvVar inside a mapping field into its config form {"env": NAME} and never resolves
        # it (measured in a run); SnowflakeResource then passes the mapping on. The token of a token sign-in
        # is such a value (additional_snowflake_connection_args), and a secret: it is read here, at connect.
        for name, value in args.items():
            if isinstance(value, Mapping) and set(value) == {"env"}:
                args[name] = resolve_env_vars(dg.EnvVar(value["env"]))
        return args


def warehouse_from_env(env: Mapping[str, str] | None = None, resolved: bool = False) -> WarehouseResource:
    """The warehouse resource from SNOWFLAKE_* variables (``settings.settings_from_env``); secrets stay
    ``EnvVar``s until run time, unless ``resolved`` (a function handed another process's environment reads
    them from ``env`` at once)."""
    env = os.environ if env is None else env
    return WarehouseResource(
        **settings_from_env(env, None if resolved else dg.EnvVar),
        retry_backoff_seconds=retry_backoff_seconds(env),
    )
