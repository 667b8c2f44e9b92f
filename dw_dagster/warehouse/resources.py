"""Snowflake access for every check, op and command: dagster-snowflake's ``SnowflakeResource``.

The same resource serves production and the local world: locally only
``additional_snowflake_connection_args`` (host, port, protocol) differ, so the local path is the
production path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from dagster._utils.cached_method import cached_method
from dagster_snowflake import SnowflakeResource

from dw_dagster.config import resolve_env_vars

QUERY_TAG_APP = "dw-dagster"


def query_tag(purpose: str, **fields: Any) -> str:
    """A Snowflake query tag naming dw-dagster and what sent the query (check, job, asset, run id)."""
    return json.dumps({"app": QUERY_TAG_APP, "purpose": purpose, **{k: v for k, v in fields.items() if v}})


class WarehouseResource(SnowflakeResource):
    """``SnowflakeResource`` whose connections carry a query tag.

    The tag is a session parameter set at connect: Snowflake attributes every query of the session to it,
    and it works on the local server too (which lacks ``ALTER SESSION SET QUERY_TAG``).
    """

    @contextmanager
    def tagged_connection(self, purpose: str, schema: str | None = None, **tag_fields: Any) -> Iterator[Any]:
        import snowflake.connector

        args = dict(self._resolved_connection_args())
        if schema:
            args["schema"] = schema
        params: dict[str, Any] = dict(args.pop("session_parameters", None) or {})
        params["QUERY_TAG"] = query_tag(purpose, **tag_fields)
        conn = snowflake.connector.connect(**args, session_parameters=params)
        try:
            yield conn
        finally:
            conn.close()

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


def warehouse_from_env(env: Mapping[str, str] | None = None) -> WarehouseResource:
    """The warehouse resource from SNOWFLAKE_* variables; secrets stay ``EnvVar``s until run time."""
    env = os.environ if env is None else env
    return WarehouseResource(
        account=dg.EnvVar("SNOWFLAKE_ACCOUNT"),
        user=dg.EnvVar("SNOWFLAKE_USER"),
        password=dg.EnvVar("SNOWFLAKE_PASSWORD"),
        database=env.get("SNOWFLAKE_DATABASE"),
        warehouse=env.get("SNOWFLAKE_WAREHOUSE"),
        role=env.get("SNOWFLAKE_ROLE"),
        # The connector retries a failing request until this many seconds pass: bound it, so that an
        # unreachable warehouse ends a check as errored instead of hanging the run.
        network_timeout=int(env.get("SNOWFLAKE_NETWORK_TIMEOUT", "120")),
        login_timeout=int(env.get("SNOWFLAKE_LOGIN_TIMEOUT", "60")),
        additional_snowflake_connection_args=_local_connection_args(env),
    )
