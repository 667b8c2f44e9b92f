"""Snowflake connections: reused within a run, tagged per statement, and bounded in time.

A run (or a sensor tick) opens one connection per session schema and every store, check and op of the run
shares it: a check step no longer pays a login per query or per history write. Reuse keeps each
statement's own query tag: the tag travels with the statement (``QUERY_TAG`` as a statement parameter,
which Snowflake applies to that statement only), so a query still names the check, the asset and the run.

Time zone. Every session's TIMEZONE is UTC (Snowflake's default is America/Los_Angeles,
https://docs.snowflake.com/en/sql-reference/parameters#timezone): a time without an offset is read, and a
TIMESTAMP_LTZ/TZ cast, in UTC; and every time the product reads comes back time-zone aware (a
TIMESTAMP_NTZ, which has no zone, as UTC, the convention of the product's sources).

Binding. Every connection binds server-side (``paramstyle="qmark"``): a statement's values stand as ``?``
placeholders and travel beside its text as the request's bindings, so no value from data or a payload is
ever in a statement's text, nor in Snowflake's QUERY_HISTORY
(https://docs.snowflake.com/en/developer-guide/python-connector/python-connector-example#binding-data).
The connector's client-side styles (pyformat ``%s``, which writes the values into the text) are never used:
a statement still written with ``%s`` fails at Snowflake's compiler instead of sending its values as text.
Parameters are a sequence with one value per placeholder: a list or tuple as one value would be an array
binding (the connector's bulk insert), so an IN list has one placeholder per value (``dw_dagster.sql.placeholders``). A
bound datetime is a TIMESTAMP_NTZ, an aware one its UTC wall clock, which the UTC session reads as the
same instant.

Timeouts. The connector's socket timeout (60 s by default) bounds each single request, and its login and
network timeouts bound only the retries around them: with Snowflake hung, one login request alone waits
60 s whatever ``login_timeout`` says. So the socket timeout is held to the login timeout while logging in
and to the network timeout afterwards (never above the connector's 60 s, which Snowflake's own 45 s hold
of a running query needs). Once the warehouse fails to answer, the rest of the run fails at once instead
of waiting the same timeout again for every statement: the run fails, and the run retries of
``dagster.yaml`` try it again later.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

# The connector's own default for one request; Snowflake holds a running query's request up to 45 s.
CONNECTOR_SOCKET_TIMEOUT = 60
# A connection the warehouse stopped answering is closed without waiting for it again.
CLOSE_BROKEN_TIMEOUT = 2
# SQLSTATE of a refused sign-in (wrong credentials, or a method the user's authentication policy refuses).
INVALID_AUTHORIZATION = "28000"
# The product reads and writes every time in UTC.
SESSION_TIMEZONE = "UTC"
# Server-side binding for every statement (module docstring).
PARAMSTYLE = "qmark"
QUERY_TAG_APP = "dw-dagster"


def query_tag(purpose: str, **fields: Any) -> str:
    """A Snowflake query tag naming dw-dagster and what sent the query (check, job, asset, run id)."""
    return json.dumps({"app": QUERY_TAG_APP, "purpose": purpose, **{k: v for k, v in fields.items() if v}})


class WarehouseUnavailable(RuntimeError):
    """Snowflake did not answer (login or statement); later statements of the same run are not sent."""


def _set_socket_timeout(conn: Any, seconds: int | None) -> None:
    # The connector reads the attribute on every request; it has no public setter after connect.
    conn._socket_timeout = seconds


class Breaker:
    """Remembers the first failure to reach Snowflake, so that nothing else waits for it again."""

    def __init__(self, where: str):
        self.where = where
        self.failure: WarehouseUnavailable | None = None

    def check(self) -> None:
        if self.failure is not None:
            raise WarehouseUnavailable(f"{self.failure} (earlier in this run; not tried again)")

    def trip(self, error: Exception, what: str, happened: str = "did not answer") -> WarehouseUnavailable:
        self.failure = WarehouseUnavailable(f"Snowflake at {self.where} {happened} {what}: {error}")
        return self.failure


@functools.cache
def tagged_cursor_class() -> type:
    """The connector's cursor whose statements carry their query tag, on a connection that other purposes
    share. Built on first use: loading the code location, which opens no connection, imports no connector."""
    from snowflake.connector.cursor import SnowflakeCursor
    from snowflake.connector.errors import OperationalError

    class TaggedCursor(SnowflakeCursor):
        query_tag: str | None = None
        breaker: Breaker | None = None

        def execute(self, command: str, params: Any = None, *args: Any, **kwargs: Any):
            if self.breaker is not None:
                self.breaker.check()
            _check_bindings(params)
            statement_params = dict(kwargs.pop("_statement_params", None) or {})
            if self.query_tag:
                statement_params.setdefault("QUERY_TAG", self.query_tag)
            try:
                return super().execute(command, params, *args, _statement_params=statement_params, **kwargs)
            except OperationalError as e:
                # Network failures (no answer within the timeouts); SQL errors are ProgrammingErrors.
                if self.breaker is None:
                    raise
                raise self.breaker.trip(e, "a statement") from e

        def fetchone(self):
            # fetchall, fetchmany and iteration read through fetchone.
            row = super().fetchone()
            return None if row is None else tuple(_aware(v) for v in row)

    return TaggedCursor


def _check_bindings(params: Any) -> None:
    """Parameters as server-side binding takes them: a sequence, one value per ``?``."""
    if params is None:
        return
    if not isinstance(params, (list, tuple)):
        raise TypeError(
            f"statement parameters: expected a list or tuple, one value per ? placeholder, got "
            f"{type(params).__name__} (named %(name)s parameters are not bound server-side)"
        )
    for i, value in enumerate(params, 1):
        if isinstance(value, (list, tuple, set, frozenset, dict)):
            raise TypeError(
                f"statement parameter {i}: a {type(value).__name__} would be bound as an array; give each "
                "value its own ? (dw_dagster.sql.placeholders for an IN list)"
            )


def _aware(value: Any) -> Any:
    if type(value) is datetime and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


class TaggedConnection:
    """What ``tagged_connection`` yields: the connector's connection, whose cursors tag each statement and
    bind its values server-side (``?`` placeholders, parameters a sequence)."""

    def __init__(self, conn: Any, query_tag: str, breaker: Breaker):
        self.raw = conn
        self.query_tag = query_tag
        self._breaker = breaker

    def cursor(self) -> Any:
        cur = self.raw.cursor(tagged_cursor_class())
        cur.query_tag = self.query_tag
        cur.breaker = self._breaker
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def import_connector_without_pandas() -> None:
    """Imports the connector without its pandas support, unless this process imported either already.

    For the commands a person types only (``settings.direct_warehouse``): the connector's ``options`` module
    imports pandas and pyarrow whenever they are installed (~1 s of CPU, more than the connector itself), for
    ``fetch_pandas_all`` and ``write_pandas``, which dw-dagster never calls: it reads rows (``fetchone``),
    whose Arrow results the connector decodes with its own extension. Never in a run worker or code server:
    a team's own assets in the same code location may call ``fetch_pandas_all``, and whether pandas was
    imported first would decide whether it works.
    """
    if "snowflake.connector" in sys.modules or "pandas" in sys.modules:
        return
    # An absent module in sys.modules makes ``import pandas`` fail: options takes pandas as not installed.
    sys.modules["pandas"] = None  # type: ignore[assignment]
    try:
        import snowflake.connector  # noqa: F401
    finally:
        del sys.modules["pandas"]


class Connector:
    """Opens connections with the timeouts held, and names the warehouse without any secret."""

    def __init__(self, args: dict[str, Any]):
        self.args = args
        self.where = (
            f"{args['host']}:{args.get('port', 443)}"
            if args.get("host")
            else f"account {args.get('account')}"
        )
        self.login_timeout = args.get("login_timeout")
        self.network_timeout = args.get("network_timeout")
        self._socket_fixed = "socket_timeout" in args

    def connect(self, schema: str | None, query_tag: str, breaker: Breaker) -> Any:
        import snowflake.connector

        breaker.check()
        args = dict(self.args)
        if schema:
            args["schema"] = schema
        params: dict[str, Any] = dict(args.pop("session_parameters", None) or {})
        # The session's tag names the first purpose; each statement's own tag overrides it.
        params["QUERY_TAG"] = query_tag
        # The connector sends its ``timezone`` as the session's TIMEZONE (over session_parameters').
        args["timezone"] = SESSION_TIMEZONE
        args["paramstyle"] = PARAMSTYLE
        # Otherwise the connector lists every package this process imported at each login, for Snowflake's
        # telemetry (`log_imported_packages_in_telemetry`, a connect() parameter): the deployment's own code is no
        # one else's business, and reading sys.modules with Dagster loaded is ~4 ms of CPU a login.
        args["log_imported_packages_in_telemetry"] = False
        if not self._socket_fixed:
            args["socket_timeout"] = _bounded(self.login_timeout)
        try:
            conn = snowflake.connector.connect(**args, session_parameters=params)
        except Exception as e:  # noqa: BLE001 - any failed login; repeating it could lock the user
            if getattr(e, "sqlstate", None) == INVALID_AUTHORIZATION:
                raise breaker.trip(e, "the sign-in", happened="refused") from e
            seconds = f" within the login timeout of {self.login_timeout} s" if self.login_timeout else ""
            raise breaker.trip(e, f"at login{seconds} (SNOWFLAKE_LOGIN_TIMEOUT)") from e
        if not self._socket_fixed:
            _set_socket_timeout(conn, _bounded(self.network_timeout))
        return conn


def _bounded(seconds: int | None) -> int:
    return min(seconds, CONNECTOR_SOCKET_TIMEOUT) if seconds else CONNECTOR_SOCKET_TIMEOUT


def close(conn: Any, breaker: Breaker) -> None:
    broken = breaker.failure is not None
    if broken:
        # The warehouse stopped answering: say goodbye once, briefly.
        _set_socket_timeout(conn, CLOSE_BROKEN_TIMEOUT)
    # The connector logs and ignores a failure to end the session (which then expires on Snowflake's side).
    conn.close(retry=not broken)


class ConnectionScope:
    """The connections of one run or sensor tick: one per session schema, closed when the scope ends.

    ``wait_seconds``: how long to wait before the first login (a retried run's backoff), told to ``log``.
    """

    def __init__(
        self, connector: Connector, wait_seconds: float = 0, log: Callable[[str], None] | None = None
    ):
        self._connector = connector
        self.breaker = Breaker(connector.where)
        self._connections: dict[str | None, Any] = {}
        self._lock = threading.Lock()
        self._wait_seconds = wait_seconds
        self._log = log

    def get(self, schema: str | None, query_tag: str) -> Any:
        with self._lock:
            self.breaker.check()
            if self._wait_seconds > 0:
                if self._log is not None:
                    self._log(
                        f"retried run: waiting {self._wait_seconds:.0f} s before logging in to Snowflake"
                    )
                time.sleep(self._wait_seconds)
                self._wait_seconds = 0
            if schema not in self._connections:
                self._connections[schema] = self._connector.connect(schema, query_tag, self.breaker)
            return self._connections[schema]

    def close(self) -> None:
        with self._lock:
            for conn in self._connections.values():
                close(conn, self.breaker)
            self._connections.clear()


class Connections(Protocol):
    """What the stores take: the warehouse resource in a run or a tick, :class:`Warehouse` outside Dagster."""

    def tagged_connection(
        self, purpose: str, schema: str | None = None, **tag_fields: Any
    ) -> AbstractContextManager[TaggedConnection]: ...


class Warehouse:
    """Connections outside Dagster (a command, the MCP server, a store used directly): each
    ``tagged_connection`` opens its own and closes it. ``args``: the connector's arguments
    (``settings.connection_args``)."""

    def __init__(self, args: dict[str, Any]):
        self.connector = Connector(args)

    @contextmanager
    def tagged_connection(
        self, purpose: str, schema: str | None = None, **tag_fields: Any
    ) -> Iterator[TaggedConnection]:
        """A connection whose statements carry the query tag naming dw-dagster, ``purpose`` and the fields
        (check, job, asset, run id) and bind their values server-side (``?`` placeholders, the parameters a
        sequence); ``schema`` is the session's current schema."""
        tag = query_tag(purpose, **tag_fields)
        breaker = Breaker(self.connector.where)
        conn = self.connector.connect(schema, tag, breaker)
        try:
            yield TaggedConnection(conn, tag, breaker)
        finally:
            close(conn, breaker)
