"""Executes a refresh run against the local Snowflake: renders each node's SQL, runs the selected nodes
in dependency order on one connection, and records every query as a ``queryResults`` entry as it goes, so
a client polling the run watches it progress.

Per node (``docs/project-file.md``, "Rules"): ``CREATE OR REPLACE TABLE`` with the columns and types, then
``INSERT INTO ... SELECT <transforms> <join>``, or ``CREATE OR REPLACE VIEW ... AS SELECT``; then the column
tests (``unique``, ``notNull``) and the node tests, each a query returning the failing rows. A failed query
or test fails the node and the run; nodes downstream of a failed node are not built, the others are.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import snowflake.connector

from dw_dagster.coalesce.run_models import SQL_TEST_TYPE
from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.sql import quote_identifier, table_reference
from dw_local.coalesce_sim.clock import SimClock, format_time
from dw_local.coalesce_sim.faults import Faults
from dw_local.coalesce_sim.node_graph import NodeGraph
from dw_local.coalesce_sim.project_specs import PARAMETER_TEMPLATE, ColumnSpec, EnvironmentSpec, NodeSpec
from dw_local.coalesce_sim.schemas import UserCredentials
from dw_local.coalesce_sim.store import RunRecord, RunStore

logger = logging.getLogger(__name__)

# The local Snowflake answers an internal error (e.g. a NOT NULL violation) with HTTP 500, which the
# connector retries until this many seconds pass; locally it is never transient.
NETWORK_TIMEOUT_SECONDS = 2


@dataclass(frozen=True)
class SnowflakeAddress:
    host: str
    port: int


# The environment's own Snowflake credentials, which Coalesce holds (an environment's "User Credentials" in
# its settings, https://docs.coalesce.io/docs/setup-your-project/connection-guides/snowflake/snowflake-key-pair-authentication):
# the Scheduler's runs sign in with them. Locally, a password the local Snowflake takes from a user its users
# file does not name (``snowflake_auth.py``).
ENVIRONMENT_PASSWORD = "local"


@dataclass(frozen=True)
class SignIn:
    """How a run signs in to Snowflake: the connector's arguments from the run's ``userCredentials``, or
    why it cannot (the run then fails with that reason, before any node).

    Coalesce takes startRun's credentials without checking them (200 and a ``runCounter``; a 400 only for a
    malformed request, Coalesce's OpenAPI ``Jobs_initiateRun``) and uses them "for connecting to Snowflake"
    (``JobsInitiateRunRequest.userCredentials``): Snowflake refuses what it does not hold, and the run fails
    with the cause in ``runFailureReason`` ("Information about the cause of a run failure", ``RunSummary``).
    So the simulator signs in to the local Snowflake with exactly what the run was given, and the local
    Snowflake's sign-in rules (``snowflake_auth.py``) refuse what Snowflake would."""

    user: str
    args: Mapping[str, Any] = field(default_factory=dict, repr=False)
    refused: str | None = None

    @classmethod
    def environment(cls, user: str) -> SignIn:
        return cls(user, {"password": ENVIRONMENT_PASSWORD})

    @classmethod
    def of(cls, credentials: UserCredentials | None, user: str) -> SignIn:
        if credentials is None:
            # The secrets live in the simulator's memory only (never in its store or an answer): a run queued
            # before a restart has none. Stricter than Coalesce, which keeps its queued runs' credentials.
            return cls(user, refused="the run's Snowflake credentials were not kept across a restart")
        if credentials.snowflakeAuthType == "Basic":
            assert credentials.snowflakePassword is not None  # the request's validation
            return cls(user, {"password": credentials.snowflakePassword.get_secret_value()})
        if credentials.snowflakeAuthType == "OAuth":
            # "If however, an OAuth connection has been established for the given environment ... Coalesce
            # will use the OAuth connection" (JobsInitiateRunRequest): no environment here has one.
            return cls(
                user, refused="OAuth: no Snowflake OAuth connection is established for this environment"
            )
        assert credentials.snowflakeKeyPairKey is not None  # the request's validation
        passphrase = credentials.snowflakeKeyPairPass
        try:
            der = _private_key_der(
                credentials.snowflakeKeyPairKey.get_secret_value(),
                passphrase.get_secret_value() if passphrase is not None else None,
            )
        except (TypeError, ValueError) as e:
            return cls(user, refused=f"snowflakeKeyPairKey: the private key could not be read: {e}")
        return cls(user, {"private_key": der, "authenticator": "SNOWFLAKE_JWT"})


def _private_key_der(pem: str, passphrase: str | None) -> bytes:
    """The key as the connector takes it. Coalesce reads a PEM private key, encrypted or not, and refuses an
    empty passphrase ("keys ... encrypted with an empty passphrase ... not supported in Coalesce and will
    result in an error", the key-pair page above)."""
    from cryptography.hazmat.primitives import serialization

    if passphrase == "":
        raise ValueError("an empty passphrase is not supported")
    key = serialization.load_pem_private_key(
        pem.encode(), password=passphrase.encode() if passphrase else None
    )
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass(frozen=True)
class Statement:
    name: str
    sql: str
    kind: Literal["ddl", "insert", "test"]
    # What a failing test's rows mean, for its error.
    meaning: str = ""

    @property
    def executed_sql(self) -> str:
        # A test is a query returning the failing rows; only their number is fetched.
        return f"SELECT COUNT(*) FROM (\n{self.sql}\n)" if self.kind == "test" else self.sql


class RenderError(ValueError):
    """A node's SQL names a parameter its run does not have."""


def render_parameters(sql: str, parameters: Mapping[str, Any]) -> str:
    """``sql`` with each ``{{ parameters.NAME }}`` replaced by the run's value. A parameter the run lacks is
    an error rather than an empty string: the stricter reading of a template Coalesce renders with the run's
    parameters only (a run's ``parameters`` replace the environment's defaults, they are not merged)."""

    def value(match: re.Match[str]) -> str:
        name = match[1]
        if name not in parameters:
            raise RenderError(f"parameters.{name} is not defined for this run")
        v = parameters[name]
        return v if isinstance(v, str) else json.dumps(v)

    return PARAMETER_TEMPLATE.sub(value, sql)


def _column_expression(column: ColumnSpec) -> str:
    if column.transform is not None:
        return column.transform
    _, node, source_column = column.sources[0].split(".")
    return f"{quote_identifier(node)}.{quote_identifier(source_column)}"


def render_node(
    node: NodeSpec, env: EnvironmentSpec, parameters: Mapping[str, Any] | None = None
) -> list[Statement]:
    """The statements that build and then test a node in an environment, with the run's ``parameters``;
    raises :class:`RenderError` for a parameter the run lacks."""

    def resolve(text: str) -> str:
        return resolve_refs(text, lambda loc, name: table_reference(*env.table(loc, name)))

    target = table_reference(*env.table(node.locationName, node.name))
    select_list = ",\n  ".join(f"{_column_expression(c)} AS {quote_identifier(c.name)}" for c in node.columns)
    select = f"SELECT\n  {select_list}\n{resolve(node.join).strip()}".rstrip()
    if node.materialization == "view":
        statements = [Statement("Create View", f"CREATE OR REPLACE VIEW {target} AS\n{select}", "ddl")]
    else:
        definitions = ",\n  ".join(
            f"{quote_identifier(c.name)} {c.dataType}{'' if c.nullable else ' NOT NULL'}"
            for c in node.columns
        )
        column_list = ", ".join(quote_identifier(c.name) for c in node.columns)
        statements = [
            Statement("Create Table", f"CREATE OR REPLACE TABLE {target} (\n  {definitions}\n)", "ddl"),
            Statement("Insert Data", f"INSERT INTO {target} ({column_list})\n{select}", "insert"),
        ]
    for column in node.columns:
        col = quote_identifier(column.name)
        # Coalesce names column test results "<COLUMN>: Unique" and "<COLUMN>: Null".
        if "unique" in column.tests:
            duplicates = (
                f'SELECT {col}, COUNT(*) AS "DUPLICATES" FROM {target} GROUP BY {col} HAVING COUNT(*) > 1'
            )
            statements.append(
                Statement(f"{column.name}: Unique", duplicates, "test", f"{column.name} has duplicate values")
            )
        if "notNull" in column.tests:
            nulls = f"SELECT * FROM {target} WHERE {col} IS NULL"
            statements.append(
                Statement(f"{column.name}: Null", nulls, "test", f"{column.name} has null values")
            )
    for node_test in node.tests:
        sql = resolve(node_test.sql).strip().rstrip(";").strip()
        statements.append(Statement(node_test.name, sql, "test", node_test.description or sql))
    return [replace(s, sql=render_parameters(s.sql, parameters or {})) for s in statements]


def coalesce_query_tag(
    job: str | None, run_id: str, run_type: str, node: NodeSpec, statement: Statement
) -> str:
    """The JSON query tag Coalesce sets on every statement of a Job run (docs/cost.md)."""
    fields = {
        "jobName": job,
        "nodeID": node.id,
        "nodeName": node.name,
        "runID": run_id,
        "runType": run_type.capitalize(),
        "stageName": statement.name,
        "storageLocation": node.locationName,
    }
    return json.dumps({"coalesce": {k: v for k, v in fields.items() if v is not None}})


def coalesce_run_tag(job: str | None, run: RunRecord) -> str:
    """The tag of a run's statements that belong to no node: the node tag's run fields only."""
    fields = {"jobName": job, "runID": str(run.id), "runType": run.run_type.capitalize()}
    return json.dumps({"coalesce": {k: v for k, v in fields.items() if v is not None}})


def _error(message: str, detail: str) -> dict[str, str]:
    lines = message.strip().splitlines() or [detail]
    return {"errorString": lines[0], "errorDetail": detail}


class RunExecutor:
    """Builds runs one at a time (the queue's worker thread calls :meth:`execute`)."""

    def __init__(
        self,
        store: RunStore,
        clock: SimClock,
        snowflake: SnowflakeAddress,
        faults: Faults,
        job_names: dict[str, str] | None = None,
    ):
        self.job_names = job_names or {}
        self.store = store
        self.clock = clock
        self.snowflake = snowflake
        self.faults = faults
        self._cancels: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def request_cancel(self, run_id: int) -> None:
        with self._lock:
            event = self._cancels.get(run_id)
        if event is not None:
            event.set()

    def now(self) -> str:
        return format_time(self.clock.now())

    def execute(self, run: RunRecord, env: EnvironmentSpec, graph: NodeGraph, sign_in: SignIn) -> None:
        cancel = threading.Event()
        with self._lock:
            self._cancels[run.id] = cancel
        try:
            # Claiming after registering the event: a cancel from now on reaches the running build.
            if not self.store.claim(run.id, self.now()):
                return
            try:
                status, reason = self._build(run, env, graph, cancel, sign_in)
            except Exception as e:  # a bug here must still end the run, not leave it running forever
                logger.exception("run %s crashed", run.id)
                status, reason = "failed", f"the local Coalesce simulator failed: {type(e).__name__}: {e}"
        finally:
            with self._lock:
                self._cancels.pop(run.id, None)
        self.store.update_run(
            run.id,
            status=status,
            end_time=self.now(),
            failure_reason=reason,
            canceled=int(status == "canceled"),
        )

    def _connect(self, run: RunRecord, env: EnvironmentSpec, sign_in: SignIn) -> Any:
        databases = sorted({m.database for m in env.storageMappings.values()})
        conn = snowflake.connector.connect(
            user=sign_in.user,
            **sign_in.args,
            account="fakesnow",
            host=self.snowflake.host,
            port=self.snowflake.port,
            protocol="http",
            database=databases[0],
            login_timeout=10,
            network_timeout=NETWORK_TIMEOUT_SECONDS,
            # The run's own statements (creating its schemas) carry the run's tag with no node.
            session_parameters={"QUERY_TAG": coalesce_run_tag(self.job_names.get(run.job_id or ""), run)},
        )
        cursor = conn.cursor()
        # After a restart the local Snowflake attaches only the database named at connect.
        for database in databases:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        for mapping in env.storageMappings.values():
            cursor.execute(
                f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(mapping.database)}."
                f"{quote_identifier(mapping.schema_name)}"
            )
        return conn

    def _build(
        self, run: RunRecord, env: EnvironmentSpec, graph: NodeGraph, cancel: threading.Event, sign_in: SignIn
    ) -> tuple[str, str | None]:
        planned = set(run.plan)
        # The current definitions, in their current dependency order (a deploy may have come between).
        order = [i for i in graph.order if i in planned]
        if not order:
            return "completed", None
        where = f"{self.snowflake.host}:{self.snowflake.port}"
        if sign_in.refused is not None:
            return "failed", f"Cannot connect to Snowflake at {where} as {sign_in.user}: {sign_in.refused}"
        try:
            conn = self._connect(run, env, sign_in)
        except snowflake.connector.Error as e:
            return "failed", f"Cannot connect to Snowflake at {where} as {sign_in.user}: {e}"
        failed: set[str] = set()
        first_failure: str | None = None
        with closing(conn), closing(conn.cursor()) as cursor:
            for position, node_id in enumerate(order):
                if cancel.is_set():
                    return "canceled", None
                if graph.ancestors(node_id) & failed:
                    failed.add(node_id)  # not built, and neither is anything that reads it
                    continue
                node = graph.nodes[node_id]
                state, reason = self._build_node(cursor, run, position, node, env, cancel)
                if state == "canceled":
                    return "canceled", None
                if state == "failed":
                    failed.add(node_id)
                    first_failure = first_failure or f"Node {node.label} failed: {reason}"
        return ("failed", first_failure) if failed else ("completed", None)

    def _build_node(
        self,
        cursor: Any,
        run: RunRecord,
        position: int,
        node: NodeSpec,
        env: EnvironmentSpec,
        cancel: threading.Event,
    ) -> tuple[str, str | None]:
        results: list[dict[str, Any]] = []

        def save(state: str) -> None:
            self.store.save_node_result(run.id, position, node.id, node.name, state, results)

        warehouse = run.user_credentials.get("snowflakeWarehouse")
        try:
            statements = render_node(node, env, run.parameters)
        except RenderError as e:
            results.append(
                {
                    **self._running(Statement("Render", "", "ddl"), warehouse),
                    "isRunning": False,
                    "status": "failed",
                    "endTime": self.now(),
                    "error": _error(f"Rendering failed: {e}", str(e)),
                }
            )
            save("failed")
            return "failed", results[-1]["error"]["errorString"]
        failure: str | None = None
        for statement in statements:
            if statement.kind != "test" and failure is not None:
                break
            # A slow warehouse (POST /_sim/warehouse); a cancel cuts the wait short.
            delay = self.faults.query_delay
            if cancel.wait(delay) if delay else cancel.is_set():
                save("canceled")
                return "canceled", None
            results.append(self._running(statement, warehouse))
            save("running")
            job = self.job_names.get(run.job_id or "")
            tag = coalesce_query_tag(job, str(run.id), run.run_type, node, statement)
            results[-1] = self._execute(cursor, statement, results[-1], tag)
            if not results[-1]["success"]:
                failure = failure or results[-1]["error"]["errorString"]
        save("failed" if failure else "complete")
        return ("failed", failure) if failure else ("complete", None)

    def _running(self, statement: Statement, warehouse: str | None) -> dict[str, Any]:
        # Coalesce reports each test (node and column tests) as a query result of type sqlTest.
        kind = {"type": SQL_TEST_TYPE} if statement.kind == "test" else {}
        return {
            "name": statement.name,
            **kind,
            "sql": statement.sql,
            "status": "running",
            "success": False,
            "isRunning": True,
            "startTime": self.now(),
            "endTime": None,
            "queryID": None,
            "rowsInserted": 0,
            "rowsUpdated": 0,
            "rowsDeleted": 0,
            "warehouse": warehouse,
            "error": None,
        }

    def _execute(
        self, cursor: Any, statement: Statement, result: dict[str, Any], query_tag: str
    ) -> dict[str, Any]:
        result = {**result, "isRunning": False}
        try:
            cursor.execute(statement.executed_sql, _statement_params={"QUERY_TAG": query_tag})
            result["queryID"] = cursor.sfqid
            if statement.kind == "insert":
                result["rowsInserted"] = cursor.rowcount or 0
            if statement.kind == "test":
                failing = cursor.fetchone()[0]
                if failing:
                    rows = f"{failing} failing row{'s' if failing != 1 else ''}"
                    result["error"] = _error(f"Test failed: {rows}", f"{rows}: {statement.meaning}")
        except snowflake.connector.Error as e:
            result["queryID"] = getattr(e, "sfqid", None)
            message = getattr(e, "msg", None) or str(e)
            result["error"] = _error(message, str(e))
        result["success"] = result["error"] is None
        result["status"] = "success" if result["success"] else "failed"
        result["endTime"] = self.now()
        return result
