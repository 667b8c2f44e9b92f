"""The local Snowflake's statements, rewritten once per text instead of once per execution.

fakesnow parses each statement it is sent with sqlglot three times (the server to classify it, the cursor
to rewrite it, the describe of its result) and rewrites the cursor's tree in some eighty passes before DuckDB
runs it: about half of the server's CPU, in a world that sends the same texts night after night (the
Coalesce nodes' SQL, the product's queries with bound values). Here the server classifies a text once, keeps
the cursor's rewrite of a text whose rewrite depends on nothing but the text and the session's database and
schema, and describes a result by asking DuckDB directly. What DuckDB runs is what fakesnow would have run.

Installed by ``snowflake_server.serve`` on fakesnow 0.12.1 (pinned: this wraps its private cursor methods).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

# Enough for every distinct text of a night of the largest local world, bounded so that a stream of distinct
# texts (values inlined by the client) cannot grow the server's memory.
MAX_TEXTS = 1024


class Memo:
    """A bounded memo, least recently used out first; safe across the server's threads (each get or put is
    one step of an OrderedDict under the GIL)."""

    def __init__(self, size: int = MAX_TEXTS):
        self._size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key, last=True)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self._items[key] = value
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


# What fakesnow marks on a rewritten statement that changes the session, the stages or DuckDB's catalog as
# the statement runs, or that is read from the request rather than the text.
_SESSION_ARGS = (
    "create_db_name", "create_file_format_name", "create_stage_name", "list_stage_name", "put_stage_data",
    "put_stage_name", "result_scan_sfqid", "seed", "set_autocommit", "set_database", "set_schema",
)  # fmt: skip


def _reusable(statements: list[Any]) -> bool:
    """Whether fakesnow's rewrite of these statements is a function of the text, database and schema alone:
    queries, DML and tables created from a column list, with nothing that changes the session, uploads files
    or draws random numbers (a table created from a query is rewritten from DuckDB's catalog)."""
    from sqlglot import exp

    for statement in statements:
        created_table = (
            isinstance(statement, exp.Create)
            and statement.kind == "TABLE"
            and statement.args.get("expression") is None
        )
        if not (
            created_table or isinstance(statement, (exp.Query, exp.Insert, exp.Update, exp.Delete, exp.Merge))
        ):
            return False
        if any(statement.args.get(k) for k in _SESSION_ARGS) or statement.find(exp.Rand, exp.TableSample):
            return False
    return True


_trees = Memo()


def parsed(text: str) -> Any:
    """The Snowflake-dialect tree of ``text``, parsed once; for readers only (raises sqlglot's ParseError)."""
    import sqlglot

    tree = _trees.get(text)
    if tree is None:
        tree = sqlglot.parse_one(text, read="snowflake")
        _trees.put(text, tree)
    return tree


def install() -> None:
    import fakesnow.server
    import snowflake.connector.errors
    from fakesnow.cursor import FakeSnowflakeCursor
    from sqlglot import exp

    _classify_each_text_once(fakesnow.server)
    execute = FakeSnowflakeCursor.execute
    rewrites = Memo()

    def execute_reusing_rewrites(self, command: str, params: Any = None, *args: Any, **kwargs: Any):
        # Only what the server runs for a client; fakesnow's in-process callers keep its own path.
        if not kwargs.get("server") or self._conn.nop_regexes or "IDENTIFIER" in command.upper():
            return execute(self, command, params, *args, **kwargs)
        conn = self._conn
        key = (
            self._inline_variables(command),
            conn.database,
            conn.schema,
            conn.database_set,
            conn.schema_set,
        )
        statements = rewrites.get(key)
        if statements is None:
            captured = _capturing_rewrites(self)
            try:
                result = execute(self, command, params, *args, **kwargs)
            finally:
                del self._transform
            if _reusable(captured):
                rewrites.put(key, captured)
            return result
        bound = kwargs.get("binding_params")
        bound = list(bound) if isinstance(bound, tuple) else bound
        self._sqlstate = None
        try:
            for statement in statements:
                self._execute(statement, bound if statement.find(exp.Placeholder) else None)
        except snowflake.connector.errors.ProgrammingError as e:
            self._sqlstate = e.sqlstate
            raise
        return self

    FakeSnowflakeCursor.execute = execute_reusing_rewrites
    FakeSnowflakeCursor._describe_last_sql = _describe_in_duckdb(FakeSnowflakeCursor._describe_last_sql)


def _capturing_rewrites(cursor: Any) -> list[Any]:
    """The statements fakesnow's execute rewrites on ``cursor``, as it rewrites them (an instance attribute
    shadowing the method, removed by the caller)."""
    captured: list[Any] = []
    transform = cursor._transform

    def capture(expression: Any, params: Any) -> Any:
        rewritten = transform(expression, params)
        captured.append(rewritten)
        return rewritten

    cursor._transform = capture
    return captured


def _classify_each_text_once(server: Any) -> None:
    """The server parses a text only to classify it (statement type, placeholders) and never changes the
    tree: the tree the account usage read the text's tables from serves it."""
    from fakesnow.dialect import syntax_error
    from sqlglot.errors import ParseError

    def parse_once(text: str) -> Any:
        try:
            return parsed(text)
        except ParseError as error:
            raise syntax_error(error) from None

    server.parse_one = parse_once


def _describe_in_duckdb(describe: Callable[[Any], list]) -> Callable[[Any], list]:
    """fakesnow describes the last result by parsing ``DESCRIBE <its DuckDB SQL>`` with sqlglot and
    generating it back; DuckDB takes that text as it is (the original path stays for what it refuses)."""
    import duckdb

    def describe_last_sql(self) -> list:
        try:
            return self._duck_conn.execute(f"DESCRIBE {self._last_sql}", self._last_params).fetchall()
        except duckdb.Error:
            return describe(self)

    return describe_last_sql
