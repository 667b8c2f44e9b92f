"""The local Snowflake's ``SNOWFLAKE.ACCOUNT_USAGE.QUERY_HISTORY`` and ``QUERY_ATTRIBUTION_HISTORY``.

Real Snowflake fills these views from every statement it ran; the local server does the same: each query
request the server answers adds one row to each table, with the statement's query tag (the statement's own
``QUERY_TAG`` parameter, else the session's), user, warehouse, times and its counts. The local views have
no latency (Snowflake's lag up to 45 minutes and 8 hours, see docs/cost.md).

Credit model (deterministic, so that a night costs the same whenever it is replayed):
``CREDITS_ATTRIBUTED_COMPUTE = (rows scanned + rows written + 1000) / 1,000,000``: one credit per million
rows touched, plus a fixed 1000-row equivalent per statement for compilation. Rows scanned are the rows of
the tables the statement reads (DuckDB's row count of each, before the statement ran); rows written are
the rows the statement inserted, updated or deleted. ``BYTES_SCANNED`` is rows scanned times a nominal
100-byte row. Elapsed time is recorded as measured but, being the machine's, does not enter the credits.

Times are the world's business time: the Coalesce simulator moves this clock with its own
(``POST /_local/clock``), so a night's statements carry that night's times; the offset is kept in the data
directory across restarts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

SCHEMA = "ACCOUNT_USAGE"
DATABASE = "SNOWFLAKE"
CREDITS_PER_ROW = 1e-6
ROWS_PER_STATEMENT = 1000
NOMINAL_ROW_BYTES = 100
CLOCK_PATH = "/_local/clock"

_COLUMNS = {
    "QUERY_HISTORY": [
        ("QUERY_ID", "VARCHAR"), ("QUERY_TEXT", "VARCHAR"), ("DATABASE_NAME", "VARCHAR"),
        ("SCHEMA_NAME", "VARCHAR"), ("QUERY_TYPE", "VARCHAR"), ("USER_NAME", "VARCHAR"),
        ("WAREHOUSE_NAME", "VARCHAR"), ("QUERY_TAG", "VARCHAR"), ("EXECUTION_STATUS", "VARCHAR"),
        ("ERROR_CODE", "VARCHAR"), ("ERROR_MESSAGE", "VARCHAR"), ("START_TIME", "TIMESTAMP_LTZ"),
        ("END_TIME", "TIMESTAMP_LTZ"), ("TOTAL_ELAPSED_TIME", "NUMBER"), ("BYTES_SCANNED", "NUMBER"),
        ("ROWS_PRODUCED", "NUMBER"), ("ROWS_INSERTED", "NUMBER"),
    ],
    "QUERY_ATTRIBUTION_HISTORY": [
        ("QUERY_ID", "VARCHAR"), ("PARENT_QUERY_ID", "VARCHAR"), ("ROOT_QUERY_ID", "VARCHAR"),
        ("WAREHOUSE_ID", "NUMBER"), ("WAREHOUSE_NAME", "VARCHAR"), ("QUERY_HASH", "VARCHAR"),
        ("QUERY_PARAMETERIZED_HASH", "VARCHAR"), ("QUERY_TAG", "VARCHAR"), ("USER_NAME", "VARCHAR"),
        ("START_TIME", "TIMESTAMP_LTZ"), ("END_TIME", "TIMESTAMP_LTZ"),
        ("CREDITS_ATTRIBUTED_COMPUTE", "FLOAT"), ("CREDITS_USED_QUERY_ACCELERATION", "FLOAT"),
    ],
}  # fmt: skip


def statement_credits(rows_scanned: int, rows_written: int) -> float:
    """The local credit model (module docstring)."""
    return (rows_scanned + rows_written + ROWS_PER_STATEMENT) * CREDITS_PER_ROW


CLOCK_TIMEOUT_S = 30.0
"""The ceiling on moving a local Snowflake's clock: it answers between statements, and a statement of a busy
night can hold it for seconds (the 2 s this was let it time out, and a night's first statements carried the
night before's date)."""


class ClockNotSet(RuntimeError):
    """A local Snowflake listens but did not take the time: its statements would carry the wrong night."""


@functools.cache
def _clock_client() -> httpx.Client:
    # One for the simulator's life: a client per call built a TLS context each night for a plain-HTTP call.
    return httpx.Client(timeout=CLOCK_TIMEOUT_S)


def set_clock(host: str, port: int, now: datetime) -> bool:
    """Moves a running local Snowflake's clock to ``now`` (the simulator calls it before moving its own);
    False when nothing listens there (a simulator run on its own); ``ClockNotSet`` when a server listens but
    does not answer with the time within ``CLOCK_TIMEOUT_S``."""
    url = f"http://{host}:{port}{CLOCK_PATH}"
    try:
        _clock_client().post(url, json={"now": now.isoformat()}).raise_for_status()
    except httpx.ConnectError:
        return False
    except httpx.HTTPError as e:
        raise ClockNotSet(
            f"the local Snowflake at {host}:{port} did not take the time {now.isoformat()}: {e}"
        ) from e
    return True


class _Session:
    def __init__(self, user: str | None, warehouse: str | None, query_tag: str | None):
        self.user, self.warehouse, self.query_tag = user, warehouse, query_tag


class AccountUsage:
    """Records what the server ran into the two tables (one instance per server process)."""

    def __init__(self, fs: Any, data_dir: Path):
        self._clock_file = data_dir / "account_usage_clock.json"
        self._offset = timedelta(seconds=self._saved_offset())
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        conn = fs.connect(DATABASE, SCHEMA)
        cur = conn.cursor()
        for table, columns in _COLUMNS.items():
            definitions = ", ".join(f"{name} {kind}" for name, kind in columns)
            cur.execute(f"CREATE TABLE IF NOT EXISTS {DATABASE}.{SCHEMA}.{table} ({definitions})")
        self._duck = fs.duck_conn.cursor()
        self._pending: dict[str, list[tuple]] = {table: [] for table in _COLUMNS}
        # Row counts of the tables statements read, counted once after each write.
        self._sizes: dict[tuple[str, str, str], int] = {}
        # A row per statement inserted one by one costs a commit each (~20 ms): rows are written in
        # batches, every second, before any statement that reads the views, and when the server stops.
        self._stop = threading.Event()
        threading.Thread(target=self._flush_every_second, name="account-usage", daemon=True).start()

    def _flush_every_second(self) -> None:
        while not self._stop.wait(1.0):
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        with self._lock:
            pending, self._pending = self._pending, {table: [] for table in _COLUMNS}
            for table, rows in pending.items():
                if not rows:
                    continue
                names = [name for name, _ in _COLUMNS[table]]
                batch = pa.table({n: [row[i] for row in rows] for i, n in enumerate(names)})
                self._duck.register("_account_usage_rows", batch)
                try:
                    self._duck.execute(
                        f"INSERT INTO {DATABASE}.{SCHEMA}.{table} SELECT * FROM _account_usage_rows"
                    )
                finally:
                    self._duck.unregister("_account_usage_rows")

    def close(self) -> None:
        self._stop.set()
        self.flush()

    # -- the clock ---------------------------------------------------------------------------------

    def _saved_offset(self) -> float:
        if not self._clock_file.exists():
            return 0.0
        return float(json.loads(self._clock_file.read_text())["offset_seconds"])

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def set_clock(self, now: datetime) -> None:
        self._offset = now - datetime.now(UTC)
        self._clock_file.write_text(json.dumps({"offset_seconds": self._offset.total_seconds()}))

    # -- sessions and statements -------------------------------------------------------------------

    def login(self, token: str, login_body: dict[str, Any], warehouse: str | None) -> None:
        data = login_body.get("data") or {}
        params = data.get("SESSION_PARAMETERS") or {}
        self._sessions[token] = _Session(data.get("LOGIN_NAME"), warehouse, params.get("QUERY_TAG"))

    def record(
        self,
        token: str,
        session_conn: Any,
        body: dict[str, Any],
        response: dict[str, Any],
        start: datetime,
        end: datetime,
        rows_scanned: int,
    ) -> None:
        session = self._sessions.get(token) or _Session(None, None, None)
        tag = (body.get("parameters") or {}).get("QUERY_TAG") or session.query_tag
        data = response.get("data") or {}
        success = bool(response.get("success"))
        written = _rows_written(data) if success else 0
        produced = int(data.get("total") or 0) if success and not written else 0
        sql = body.get("sqlText", "")
        query_id = data.get("queryId") or f"local-{start.timestamp():.6f}"
        credits = statement_credits(rows_scanned, written)
        elapsed = int((end - start).total_seconds() * 1000)
        history = (
            query_id, sql, session_conn.database, session_conn.schema, _query_type(sql), session.user,
            session.warehouse, tag, "SUCCESS" if success else "FAIL",
            None if success else response.get("code"), None if success else response.get("message"),
            start, end, elapsed, rows_scanned * NOMINAL_ROW_BYTES, produced, written,
        )  # fmt: skip
        attribution = (
            query_id, None, None, None, session.warehouse, None, None, tag, session.user, start, end,
            credits, None,
        )  # fmt: skip
        with self._lock:
            self._pending["QUERY_HISTORY"].append(history)
            self._pending["QUERY_ATTRIBUTION_HISTORY"].append(attribution)
            if _query_type(sql) != "SELECT":
                self._sizes = {}  # a write may have changed the tables' sizes

    def rows_read(self, sql: str, database: str | None, schema: str | None) -> int:
        """The rows of the tables ``sql`` reads (not the table it writes), as the tables are now."""
        tables = _tables_read(sql, database, schema)
        if not tables:
            return 0
        with self._lock:
            for table in tables - self._sizes.keys():
                self._sizes[table] = self._count(table)
            return sum(self._sizes[t] for t in tables)

    def _count(self, table: tuple[str, str, str]) -> int:
        # Counted, not DuckDB's estimated_size: that keeps a replaced table's deleted rows until a checkpoint,
        # so a night's scan would depend on when the server last checkpointed.
        # fetchall: a result left unfinished on this shared cursor blocks its next statement.
        found = self._duck.execute(
            "SELECT database_name, schema_name, table_name FROM duckdb_tables() WHERE upper(database_name) = ?"
            " AND upper(schema_name) = ? AND upper(table_name) = ?",
            list(table),
        ).fetchall()
        if not found:
            return 0
        quoted = ".".join('"' + part.replace('"', '""') + '"' for part in found[0])
        return int(self._duck.execute(f"SELECT COUNT(*) FROM {quoted}").fetchall()[0][0])


def _rows_written(data: dict[str, Any]) -> int:
    from fakesnow.statement_type import DML_TYPE_IDS

    if data.get("statementTypeId") not in DML_TYPE_IDS:
        return 0
    return sum(int(v) for row in data.get("rowset") or [] for v in row if v is not None and str(v).isdigit())


def _query_type(sql: str) -> str:
    word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    return {"INSERT": "INSERT", "SELECT": "SELECT", "WITH": "SELECT", "CREATE": "CREATE"}.get(word, word)


@functools.lru_cache(maxsize=4096)
def _tables_read(sql: str, database: str | None, schema: str | None) -> frozenset[tuple[str, str, str]]:
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from dw_local.snowflake_statements import parsed

    try:
        expr = parsed(sql)  # the tree the server then classifies the statement by
    except ParseError:
        return frozenset()
    written = expr.this if isinstance(expr, (exp.Insert, exp.Create)) else None
    if isinstance(written, exp.Schema):
        written = written.this
    ctes = {c.alias_or_name.upper() for c in expr.find_all(exp.CTE)}
    read = set()
    for table in expr.find_all(exp.Table):
        if table is written or not table.name or table.name.upper() in ctes:
            continue
        db = table.catalog or database
        sc = table.db or schema
        if db and sc:
            read.add((db.upper(), sc.upper(), table.name.upper()))
    return frozenset(read)


def install(app: Any, fs: Any, data_dir: Path) -> AccountUsage:
    """Wraps the server's login and query routes so that every statement is recorded, and adds the clock
    route."""
    import fakesnow.server
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    usage = AccountUsage(fs, data_dir)
    routes = app.router.routes
    endpoints = {r.path: (i, r) for i, r in enumerate(routes) if isinstance(r, Route)}

    login_index, login_route = endpoints["/session/v1/login-request"]
    query_index, query_route = endpoints["/queries/v1/query-request"]
    login_endpoint, query_endpoint = login_route.endpoint, query_route.endpoint

    async def login_request(request: Request):
        response = await login_endpoint(request)
        token = (json.loads(response.body).get("data") or {}).get("token")
        if token:
            usage.login(token, json.loads(await request_body(request)), request.query_params.get("warehouse"))
        return response

    async def query_request(request: Request):
        token = fakesnow.server.to_token(request) if request.headers.get("Authorization") else None
        conn = fakesnow.server.sessions.get(token) if token else None
        if conn is None:
            return await query_endpoint(request)
        body = json.loads(await request_body(request))
        if body.get("describeOnly"):
            return await query_endpoint(request)
        sql = body.get("sqlText", "")
        if SCHEMA in sql.upper():
            await run_in_threadpool(usage.flush)  # what ran so far is in the views when they are read
        scanned = await run_in_threadpool(usage.rows_read, sql, conn.database, conn.schema)
        start = usage.now()
        response = await query_endpoint(request)
        end = usage.now()
        result = json.loads(response.body)
        await run_in_threadpool(usage.record, token, conn, body, result, start, end, scanned)
        return response

    async def clock(request: Request):
        now = datetime.fromisoformat((await request.json())["now"])
        usage.set_clock(now if now.tzinfo else now.replace(tzinfo=UTC))
        return JSONResponse({"now": usage.now().isoformat()})

    routes[login_index] = Route(login_route.path, login_request, methods=["POST"])
    routes[query_index] = Route(query_route.path, query_request, methods=["POST"])
    routes.append(Route(CLOCK_PATH, clock, methods=["POST"]))
    serving = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a):
        # On SIGTERM uvicorn ends the lifespan, then re-raises the signal: the last rows are written here.
        async with serving(a) as state:
            yield state
        usage.close()

    app.router.lifespan_context = lifespan
    return usage


async def request_body(request: Any) -> bytes:
    """A request's JSON body as the connector sent it (gzip or not)."""
    import gzip

    body = await request.body()
    return gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body


def statement_shapes(data_dir: Path, app: str = "dw-dagster") -> list[dict[str, Any]]:
    """The distinct statements an application (its query tags' ``app``) sent to a stopped local Snowflake
    whose data is in ``data_dir``: each text parsed as Snowflake SQL with its literals and placeholders made
    ``?`` and its VALUES and IN lists cut to one item; with how often it ran and for which purposes
    (docs/snowflake-contract.md lists the product's)."""
    import duckdb
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    with duckdb.connect(str(Path(data_dir) / f"{DATABASE}.db"), read_only=True) as con:
        rows = con.execute(f"SELECT QUERY_TEXT, QUERY_TAG FROM {SCHEMA}.QUERY_HISTORY").fetchall()

    def shape(text: str) -> str:
        try:
            tree = sqlglot.parse_one(text, read="snowflake")
        except ParseError:
            return text
        tree = tree.transform(
            lambda n: (
                exp.Placeholder()
                if isinstance(n, (exp.Literal, exp.Placeholder, exp.Boolean, exp.Null))
                else n
            )
        )
        for listed in (*tree.find_all(exp.Values), *tree.find_all(exp.In)):
            if len(listed.expressions) > 1:
                listed.set("expressions", listed.expressions[:1])
        return tree.sql(dialect="snowflake")

    found: dict[str, dict[str, Any]] = {}
    for text, raw_tag in rows:
        try:
            tag = json.loads(raw_tag or "{}")
        except json.JSONDecodeError:
            continue
        if not isinstance(tag, dict) or tag.get("app") != app:
            continue
        entry = found.setdefault(shape(text), {"executions": 0, "purposes": set()})
        entry["executions"] += 1
        entry["purposes"].add(tag.get("purpose"))
    return [
        {"shape": s, "executions": e["executions"], "purposes": sorted(p for p in e["purposes"] if p)}
        for s, e in sorted(found.items())
    ]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="The product's distinct statements in a local Snowflake.")
    parser.add_argument("data_dir", type=Path, help="a stopped world's snowflake/ folder")
    args = parser.parse_args()
    print(json.dumps(statement_shapes(args.data_dir), indent=1))


if __name__ == "__main__":
    main()
