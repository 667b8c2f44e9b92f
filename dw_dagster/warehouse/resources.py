"""Snowflake access for every check, op and command, configured as dagster-snowflake's ``SnowflakeResource``
(``snowflake_config.py``).

The same resource serves production and the local world: locally only
``additional_snowflake_connection_args`` (host, port, protocol) differ, so the local path is the
production path. Within a run or a sensor tick, connections are reused (``connections.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from dagster._core.storage.tags import RETRY_NUMBER_TAG
from dagster._utils.cached_method import cached_method
from pydantic import Field, PrivateAttr

from dw_dagster.config import DwConfigError, resolve_env_vars
from dw_dagster.warehouse.connections import Breaker, ConnectionScope, Connector, TaggedConnection, close
from dw_dagster.warehouse.snowflake_config import SnowflakeConnectionResource

QUERY_TAG_APP = "dw-dagster"


def query_tag(purpose: str, **fields: Any) -> str:
    """A Snowflake query tag naming dw-dagster and what sent the query (check, job, asset, run id)."""
    return json.dumps({"app": QUERY_TAG_APP, "purpose": purpose, **{k: v for k, v in fields.items() if v}})


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
        """A connection whose statements carry the query tag naming dw-dagster, ``purpose`` and the fields
        (check, job, asset, run id); ``schema`` is the session's current schema."""
        tag = query_tag(purpose, **tag_fields)
        if self._scope is not None:
            yield TaggedConnection(self._scope.get(schema, tag), tag, self._scope.breaker)
            return
        connector = self._connector()
        breaker = Breaker(connector.where)
        conn = connector.connect(schema, tag, breaker)
        try:
            yield TaggedConnection(conn, tag, breaker)
        finally:
            close(conn, breaker)

    def _connector(self) -> Connector:
        return Connector(dict(self._resolved_connection_args()))

    @cached_method
    def _resolved_connection_args(self) -> dict[str, Any]:
        # Used outside Dagster's resource resolution (a command, a store), EnvVars are not yet resolved.
        return dict(resolve_env_vars(self)._connection_args)


def _local_connection_args(env: Mapping[str, str]) -> dict[str, Any] | None:
    if not env.get("SNOWFLAKE_HOST"):
        return None
    return {
        "host": env["SNOWFLAKE_HOST"],
        "port": int(env.get("SNOWFLAKE_PORT", "443")),
        "protocol": env.get("SNOWFLAKE_PROTOCOL", "https"),
    }


def warehouse_from_env(env: Mapping[str, str] | None = None, resolved: bool = False) -> WarehouseResource:
    """The warehouse resource from SNOWFLAKE_* variables; secrets stay ``EnvVar``s until run time, unless
    ``resolved`` (a function handed another process's environment reads them from ``env`` at once)."""
    env = os.environ if env is None else env

    def secret(name: str) -> Any:
        if not resolved:
            return dg.EnvVar(name)
        if not env.get(name):
            raise DwConfigError(f"{name}: not set")
        return env[name]

    return WarehouseResource(
        account=secret("SNOWFLAKE_ACCOUNT"),
        user=secret("SNOWFLAKE_USER"),
        password=secret("SNOWFLAKE_PASSWORD"),
        database=env.get("SNOWFLAKE_DATABASE"),
        warehouse=env.get("SNOWFLAKE_WAREHOUSE"),
        role=env.get("SNOWFLAKE_ROLE"),
        # Bounded end to end (connections.py): an unreachable warehouse ends a check as errored in about
        # this time instead of hanging the run.
        network_timeout=_seconds(env, "SNOWFLAKE_NETWORK_TIMEOUT", 120),
        login_timeout=_seconds(env, "SNOWFLAKE_LOGIN_TIMEOUT", 60),
        retry_backoff_seconds=_seconds(env, "DW_RETRY_BACKOFF_SECONDS", 30, minimum=0),
        additional_snowflake_connection_args=_local_connection_args(env),
    )


def _seconds(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        seconds = int(raw)
    except ValueError:
        seconds = minimum - 1
    if seconds < minimum:
        raise DwConfigError(f"{name}: expected a whole number of seconds, at least {minimum}, got {raw!r}")
    return seconds
