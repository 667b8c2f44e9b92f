"""Snowflake access for every check, op and command, configured as dagster-snowflake's ``SnowflakeResource``
(``snowflake_config.py``).

The same resource serves production and the local world: locally only
``additional_snowflake_connection_args`` (host, port, protocol) differ, so the local path is the
production path. Within a run or a sensor tick, connections are reused (``connections.py``).

Sign-in (``warehouse_from_env``), as ``SnowflakeResource`` takes it: a key pair (``private_key_path`` or
``private_key``, with ``private_key_password`` for an encrypted key), a programmatic access token or an
OAuth access token (``authenticator`` PROGRAMMATIC_ACCESS_TOKEN or OAUTH, the token in
``additional_snowflake_connection_args``), or a password, which still works but is logged as a warning:
Snowflake is blocking password-only sign-ins
(https://docs.snowflake.com/en/user-guide/security-mfa-rollout).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr, field_validator

from dw_dagster.config import DwConfigError, resolve_env_vars
from dw_dagster.internals import RETRY_NUMBER_TAG, cached_method
from dw_dagster.warehouse.connections import (
    PARAMSTYLE,
    SESSION_TIMEZONE,
    Breaker,
    ConnectionScope,
    Connector,
    TaggedConnection,
    close,
)
from dw_dagster.warehouse.snowflake_config import SnowflakeConnectionResource

QUERY_TAG_APP = "dw-dagster"
TOKEN_AUTHENTICATORS = ("PROGRAMMATIC_ACCESS_TOKEN", "OAUTH")
logger = logging.getLogger(__name__)


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
        """A connection whose statements carry the query tag naming dw-dagster, ``purpose`` and the fields
        (check, job, asset, run id) and bind their values server-side (``?`` placeholders, the parameters a
        sequence); ``schema`` is the session's current schema."""
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
        args = dict(resolve_env_vars(self)._connection_args)
        # Dagster turns an EnvVar inside a mapping field into its config form {"env": NAME} and never resolves
        # it (measured in a run); SnowflakeResource then passes the mapping on. The token of a token sign-in
        # is such a value (additional_snowflake_connection_args), and a secret: it is read here, at connect.
        for name, value in args.items():
            if isinstance(value, Mapping) and set(value) == {"env"}:
                args[name] = resolve_env_vars(dg.EnvVar(value["env"]))
        return args


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

    sign_in, token = _sign_in(env, secret, resolved)
    additional = {**(_local_connection_args(env) or {}), **token}
    return WarehouseResource(
        account=secret("SNOWFLAKE_ACCOUNT"),
        user=secret("SNOWFLAKE_USER"),
        **sign_in,
        database=env.get("SNOWFLAKE_DATABASE"),
        warehouse=env.get("SNOWFLAKE_WAREHOUSE"),
        role=env.get("SNOWFLAKE_ROLE"),
        # Bounded end to end (connections.py): an unreachable warehouse ends a check as errored in about
        # this time instead of hanging the run.
        network_timeout=_seconds(env, "SNOWFLAKE_NETWORK_TIMEOUT", 120),
        login_timeout=_seconds(env, "SNOWFLAKE_LOGIN_TIMEOUT", 60),
        retry_backoff_seconds=_seconds(env, "DW_RETRY_BACKOFF_SECONDS", 30, minimum=0),
        additional_snowflake_connection_args=additional or None,
    )


SIGN_IN_VARIABLES = (
    "SNOWFLAKE_PRIVATE_KEY_PATH",
    "SNOWFLAKE_PRIVATE_KEY",
    "SNOWFLAKE_TOKEN",
    "SNOWFLAKE_PASSWORD",
)


def _sign_in(env: Mapping[str, str], secret: Any, resolved: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The resource's sign-in settings, and the connector's token argument (SnowflakeResource takes it in
    ``additional_snowflake_connection_args``), from whichever one of SIGN_IN_VARIABLES is set."""
    given = [name for name in SIGN_IN_VARIABLES if env.get(name)]
    authenticator = (env.get("SNOWFLAKE_AUTHENTICATOR") or "").upper() or None
    if len(given) > 1:
        raise DwConfigError(
            f"Snowflake sign-in: {' and '.join(given)} are all set; set one of {', '.join(SIGN_IN_VARIABLES)}"
        )
    chosen = given[0] if given else None
    if chosen == "SNOWFLAKE_TOKEN":
        authenticator = authenticator or "PROGRAMMATIC_ACCESS_TOKEN"
        if authenticator not in TOKEN_AUTHENTICATORS:
            raise DwConfigError(
                f"SNOWFLAKE_AUTHENTICATOR: {authenticator!r} takes no SNOWFLAKE_TOKEN; expected one of "
                f"{', '.join(TOKEN_AUTHENTICATORS)} (a programmatic access token, or an OAuth access token)"
            )
        return {"authenticator": authenticator}, {"token": secret("SNOWFLAKE_TOKEN")}
    if authenticator in TOKEN_AUTHENTICATORS:
        raise DwConfigError(f"SNOWFLAKE_AUTHENTICATOR {authenticator}: set the token in SNOWFLAKE_TOKEN")
    settings: dict[str, Any] = {"authenticator": authenticator} if authenticator else {}
    if chosen in ("SNOWFLAKE_PRIVATE_KEY_PATH", "SNOWFLAKE_PRIVATE_KEY"):
        if chosen == "SNOWFLAKE_PRIVATE_KEY_PATH":
            settings["private_key_path"] = env[chosen]  # a path, not a secret
        else:
            settings["private_key"] = secret(chosen)
        if env.get("SNOWFLAKE_PRIVATE_KEY_PASSWORD"):
            settings["private_key_password"] = secret("SNOWFLAKE_PRIVATE_KEY_PASSWORD")
        return settings, {}
    if chosen == "SNOWFLAKE_PASSWORD":
        _warn_password_sign_in()
    if chosen is None and not authenticator and resolved:
        raise DwConfigError(f"Snowflake sign-in: none of {', '.join(SIGN_IN_VARIABLES)} is set")
    if chosen == "SNOWFLAKE_PASSWORD" or not authenticator:
        # Nothing set: the password's variable, which names itself when a connection needs it (loading the
        # code location needs none).
        settings["password"] = secret("SNOWFLAKE_PASSWORD")
    return settings, {}


@functools.cache
def _warn_password_sign_in() -> None:
    # Once a process: every command and run worker builds the resource.
    logger.warning(
        "Snowflake sign-in by password (SNOWFLAKE_PASSWORD): Snowflake is blocking password-only sign-ins; "
        "sign in with a key pair (SNOWFLAKE_PRIVATE_KEY_PATH) or a programmatic access token (SNOWFLAKE_TOKEN)"
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
