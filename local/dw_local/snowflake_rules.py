"""The local Snowflake refuses what Snowflake refuses, where the product could come to rely on the difference.

fakesnow runs Snowflake SQL on DuckDB, which is more lenient than Snowflake in places a product can quietly
depend on: a statement that works here would then fail (or answer differently) on the first real account.
Each rule names the Snowflake documentation it follows; where the evidence is unclear the stricter reading
is taken. Installed by ``snowflake_server.serve`` on fakesnow 0.12.1 (pinned: this wraps its private cursor
methods, its MERGE rewrite and its server routes).

- Identifiers (https://docs.snowflake.com/en/sql-reference/identifiers-syntax): an unquoted identifier is
  stored and resolved upper case, a quoted one exactly as written. DuckDB resolves names case-insensitively,
  so ``"dw_prod"."dw_ops"."t1"`` found ``DW_PROD.DW_OPS.T1``; here a name that exists only in another case
  does not exist, as in Snowflake. (DuckDB cannot hold two names that differ only in case: creating one is
  refused too.) A column qualified by a table's alias in another case (``"f"."COL"`` against ``FROM T f``,
  the alias ``F``) is an invalid identifier, as in Snowflake.
- MERGE (https://docs.snowflake.com/en/sql-reference/sql/merge, "Duplicate join behavior", and the
  parameter ERROR_ON_NONDETERMINISTIC_MERGE, TRUE by default,
  https://docs.snowflake.com/en/sql-reference/parameters#error-on-nondeterministic-merge): a target row
  that joins more than one source row, in a MERGE with a WHEN MATCHED clause, fails the statement with
  "Duplicate row detected during DML action"; fakesnow applied one of the rows silently. A source with
  duplicate keys and only WHEN NOT MATCHED inserts them all, in Snowflake as here.
- DuckDB-only functions and types: a call of a DuckDB function that is not in Snowflake's list of functions
  (https://docs.snowflake.com/en/sql-reference/functions-all), or a ``::`` cast to a DuckDB-only type
  (https://docs.snowflake.com/en/sql-reference/intro-summary-data-types), is a compilation error.
- Division by zero (https://docs.snowflake.com/en/sql-reference/operators-arithmetic: "division by zero"
  is an error; DIV0 and DIV0NULL are the functions that return 0 or NULL instead): DuckDB's IEEE floating
  point answered ``inf``.
- Time zones (https://docs.snowflake.com/en/sql-reference/parameters#timezone: TIMEZONE defaults to
  America/Los_Angeles; https://docs.snowflake.com/en/sql-reference/data-types-datetime): each session has
  its own TIMEZONE (set at login or by ALTER SESSION), in which a time without an offset is read, a
  TIMESTAMP_LTZ/TZ is cast to NTZ or DATE and CURRENT_TIMESTAMP is given. Every TIMESTAMP_TZ/LTZ value comes
  back with its offset in the session's time zone. Known gap: DuckDB keeps an instant, not the offset it was
  written with, so a TIMESTAMP_TZ stored with another offset comes back as the same instant in the
  session's offset; nothing may rely on the stored offset (the product compares instants).
- Server-side bindings (qmark ``?``, numeric ``:1``): the values travel beside the text and QUERY_HISTORY
  keeps the text as sent; a MERGE binds them wherever they stand (fakesnow could not).
- ``INFORMATION_SCHEMA.TABLES`` (https://docs.snowflake.com/en/sql-reference/info-schema/tables): a row per
  table and view; ROW_COUNT is the table's row count (fakesnow gave DuckDB's estimate, which keeps deleted
  rows until a checkpoint) and NULL for a view (fakesnow listed no views).
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DEFAULT_TIMEZONE = "America/Los_Angeles"

# DuckDB functions that Snowflake does not have (none is in https://docs.snowflake.com/en/sql-reference/
# functions-all), which a statement written, or transpiled, with DuckDB in mind could carry and fakesnow
# would run: lists and structs, strftime-style formatting, epoch helpers, regexp and string helpers.
DUCKDB_ONLY_FUNCTIONS = frozenset(
    {
        "ARG_MAX", "ARG_MIN", "ARRAY_LENGTH", "BOOL_AND", "BOOL_OR", "EPOCH", "EPOCH_MS", "EPOCH_NS",
        "EPOCH_US", "GENERATE_SERIES", "GROUP_CONCAT", "JSON_EXTRACT", "JSON_EXTRACT_STRING", "LIST",
        "LIST_AGGREGATE", "LIST_CONCAT", "LIST_CONTAINS", "LIST_EXTRACT", "LIST_FILTER", "LIST_SORT",
        "LIST_TRANSFORM", "LIST_VALUE", "MAKE_DATE", "MAKE_TIMESTAMP", "PRINTF", "RANGE", "REGEXP_EXTRACT",
        "REGEXP_FULL_MATCH", "REGEXP_MATCHES", "STR_SPLIT", "STRFTIME", "STRING_AGG", "STRING_SPLIT",
        "STRING_SPLIT_REGEX", "STRPTIME", "STRUCT_EXTRACT", "STRUCT_PACK", "TODAY", "UNNEST",
    }
)  # fmt: skip
# DuckDB's unsigned and 128-bit integers; Snowflake's integers are NUMBER(38, 0).
DUCKDB_ONLY_TYPES = frozenset({"HUGEINT", "UBIGINT", "UHUGEINT", "UINTEGER", "USMALLINT", "UTINYINT"})

# A MERGE's duplicate check answers with this column (its rows are the target rows joined more than once).
_DUPLICATE_MARK = "_DW_DUPLICATE_TARGET_ROW"
_ALTER_TIMEZONE = re.compile(
    r"^\s*ALTER\s+SESSION\s+(?:SET\s+TIMEZONE\s*=\s*'((?:[^']|'')*)'|UNSET\s+TIMEZONE)\s*;?\s*$",
    re.IGNORECASE,
)


def _error(msg: str, errno: int, sqlstate: str) -> Exception:
    import snowflake.connector.errors

    return snowflake.connector.errors.ProgrammingError(msg=msg, errno=errno, sqlstate=sqlstate)


# -- DuckDB-only functions and types ----------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def duckdb_only(text: str) -> Exception | None:
    """Snowflake's compilation error for the first DuckDB-only function call or ``::`` type in ``text``."""
    import sqlglot
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = sqlglot.Dialect.get_or_raise("snowflake").tokenize(text)
    except TokenError:
        return None  # the parser answers it
    for i, token in enumerate(tokens):
        name = token.text.upper()
        after = tokens[i + 1].token_type if i + 1 < len(tokens) else None
        before = tokens[i - 1].token_type if i else None
        # A quoted name is an identifier, and ``schema.f(...)`` a user's function, never a built-in.
        if (
            name in DUCKDB_ONLY_FUNCTIONS
            and after == TokenType.L_PAREN
            and token.token_type != TokenType.IDENTIFIER
            and before != TokenType.DOT
        ):
            return _error(f"SQL compilation error:\nUnknown function {name}", 2140, "42601")
        if name in DUCKDB_ONLY_TYPES and before == TokenType.DCOLON:
            return _error(f"SQL compilation error:\nUnsupported data type '{name}'.", 2040, "42601")
    return None


# -- Identifiers --------------------------------------------------------------------------------------------


def _name(identifier: Any) -> str | None:
    from sqlglot import exp

    if not isinstance(identifier, exp.Identifier):
        return None
    return identifier.this if identifier.quoted else identifier.this.upper()


@functools.lru_cache(maxsize=4096)
def references(
    text: str, database: str | None, schema: str | None
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The databases, schemas and tables ``text`` names, resolved as Snowflake resolves them, each as
    ("create" | "use", (database[, schema[, name]])): what it creates and what must already exist."""
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from dw_local.snowflake_statements import parsed

    try:
        tree = parsed(text)
    except ParseError:
        return ()
    found: list[tuple[str, tuple[str, ...]]] = []
    kind = str(tree.args.get("kind") or "").upper()
    created = tree.this if isinstance(tree, exp.Create) else None
    if isinstance(created, exp.Schema):
        created = created.this
    role = "create" if isinstance(tree, exp.Create) else "use"
    ctes = {c.alias_or_name.upper() for c in tree.find_all(exp.CTE)}

    def key(table: exp.Table, depth: int) -> tuple[str, ...] | None:
        parts = [_name(table.args.get(k)) for k in ("catalog", "db", "this")]
        parts = [p for p in parts if p is not None][-depth:]
        defaults = [database, schema][: depth - len(parts)]
        if None in defaults or not parts:
            return None
        return (*defaults, *parts)  # type: ignore[return-value]

    for table in tree.find_all(exp.Table):
        if isinstance(tree, (exp.Create, exp.Drop)) and table is tree.this and kind in ("DATABASE", "SCHEMA"):
            whole = key(table, 1 if kind == "DATABASE" else 2)
            if whole:
                found.append((role, whole))
            continue
        if isinstance(tree, exp.Use):
            use = str(tree.args.get("kind") or "DATABASE").upper()
            if use in ("DATABASE", "SCHEMA") and (whole := key(table, 1 if use == "DATABASE" else 2)):
                found.append(("use", whole))
            continue
        if table is created and kind not in ("TABLE", "VIEW"):
            continue  # a stage, a file format, a sequence: not a table
        if not isinstance(table.this, exp.Identifier) or (not table.db and table.name.upper() in ctes):
            continue
        if _name(table.args.get("db")) == "INFORMATION_SCHEMA":
            catalog = _name(table.args.get("catalog")) or database
            if catalog:
                found.append(("use", (catalog,)))
            continue
        whole = key(table, 3)
        if whole:
            found.append(("create" if table is created else "use", whole))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def misnamed_qualifier(text: str) -> Exception | None:
    """A column qualified by a name that is a table's alias (or name) in the statement only when case is
    folded: Snowflake stores an unquoted alias upper case and a quoted one as written
    (https://docs.snowflake.com/en/sql-reference/identifiers-syntax), so ``"f"."COL"`` against ``FROM T f``
    (the alias ``F``) is an invalid identifier; DuckDB resolves it case-insensitively and answered."""
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from dw_local.snowflake_statements import parsed

    try:
        tree = parsed(text)
    except ParseError:
        return None
    names: set[str] = set()
    for table in tree.find_all(exp.Table):
        alias = table.args.get("alias")
        held = alias.this if alias is not None and isinstance(alias.this, exp.Identifier) else table.this
        if (name := _name(held)) is not None:
            names.add(name)
    for alias in tree.find_all(exp.TableAlias):
        if (name := _name(alias.this)) is not None:
            names.add(name)
    folded = {n.upper() for n in names}
    for column in tree.find_all(exp.Column):
        qualifier = _name(column.args.get("table"))
        if qualifier is not None and qualifier not in names and qualifier.upper() in folded:
            shown = column.sql(dialect="snowflake")
            return _error(f"SQL compilation error:\ninvalid identifier '{shown}'", 904, "42000")
    return None


class Catalog:
    """The exact names of the databases, schemas, tables and views DuckDB holds; read again whenever a
    statement names one that is not there (so a name created since is found)."""

    def __init__(self, fs: Any):
        self._fs = fs
        self._lock = threading.Lock()
        self._exact: dict[int, set[tuple[str, ...]]] = {1: set(), 2: set(), 3: set()}
        self._folded: dict[int, set[tuple[str, ...]]] = {1: set(), 2: set(), 3: set()}

    def _read(self) -> None:
        cur = self._fs.duck_conn.cursor()
        try:
            rows = {
                1: cur.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal").fetchall(),
                2: cur.execute("SELECT database_name, schema_name FROM duckdb_schemas()").fetchall(),
                3: cur.execute(
                    "SELECT database_name, schema_name, table_name FROM duckdb_tables() UNION ALL"
                    " SELECT database_name, schema_name, view_name FROM duckdb_views() WHERE NOT internal"
                ).fetchall(),
            }
        finally:
            cur.close()
        self._exact = {depth: {tuple(r) for r in found} for depth, found in rows.items()}
        self._folded = {d: {tuple(p.upper() for p in k) for k in keys} for d, keys in self._exact.items()}

    def refusal(self, named: tuple[tuple[str, tuple[str, ...]], ...]) -> Exception | None:
        """Snowflake's error for the first name that exists here only in another case."""
        with self._lock:
            read = False
            for role, whole in named:
                for depth in range(1, len(whole) + 1):
                    part = whole[:depth]
                    if part in self._exact[depth]:
                        continue
                    if not read:
                        self._read()
                        read = True
                    if part in self._exact[depth]:
                        continue
                    if tuple(p.upper() for p in part) not in self._folded[depth]:
                        break  # not there in any case: DuckDB answers (or the statement creates it)
                    return _missing(part, created=role == "create" and depth == len(whole))
        return None


def _missing(part: tuple[str, ...], created: bool) -> Exception:
    shown = ".".join(part)
    if created:
        return _error(
            f"SQL compilation error:\nThe local Snowflake cannot create '{shown}': an object whose name differs"
            " only in case exists, and its DuckDB resolves names case-insensitively.",
            2002,
            "42710",
        )
    what = {1: "Database", 2: "Schema", 3: "Object"}[len(part)]
    return _error(
        f"SQL compilation error:\n{what} '{shown}' does not exist or not authorized.",
        2003,
        "02000" if len(part) < 3 else "42S02",
    )


# -- MERGE --------------------------------------------------------------------------------------------------


def _with_duplicate_check(merge: Any) -> Any:
    """fakesnow's MERGE rewrite, preceded (for a MERGE with WHEN MATCHED) by a query of the target rows
    that join more than one source row."""
    import sqlglot
    from sqlglot import exp

    def merge_checked(expression: Any) -> list[Any]:
        statements = merge(expression)
        if len(statements) > 1 and isinstance(expression, exp.Merge):
            whens = expression.args.get("whens")
            whens = getattr(whens, "expressions", whens) or []
            if any(w.args.get("matched") for w in whens):
                target, source = expression.this, expression.args["using"]
                ref = target.alias or target.name
                statements.insert(
                    0,
                    sqlglot.parse_one(
                        f"SELECT {ref}.*, 1 AS {_DUPLICATE_MARK} FROM {target} WHERE {ref}.rowid IN"
                        f" (SELECT {ref}.rowid FROM {target} JOIN {source} ON {expression.args['on']}"
                        f" GROUP BY {ref}.rowid HAVING COUNT(*) > 1) LIMIT 1"
                    ),
                )
        return statements

    return merge_checked


def _duplicate_rows(transformed: Any, table: Any) -> Exception | None:
    from sqlglot import exp

    if not (isinstance(transformed, exp.Select) and transformed.expressions):
        return None
    if (
        transformed.expressions[-1].alias_or_name.upper() != _DUPLICATE_MARK
        or not table
        or not table.num_rows
    ):
        return None
    values = [column[0].as_py() for column in table.columns[:-1]]
    shown = ", ".join("NULL" if v is None else f'"{v}"' if isinstance(v, str) else str(v) for v in values)
    return _error(f"Duplicate row detected during DML action\nRow Values: [{shown}]", 100090, "42P18")


# -- INFORMATION_SCHEMA.TABLES --------------------------------------------------------------------------------

# fakesnow's view (fakesnow/info_schema.py, same columns), with each table's counted rows and the views.
_TABLES_VIEW = """
CREATE OR REPLACE VIEW {catalog}._fs_information_schema._fs_tables AS
SELECT
    t.database_name AS "TABLE_CATALOG", t.schema_name AS "TABLE_SCHEMA", t.table_name AS "TABLE_NAME",
    'SYSADMIN' AS "TABLE_OWNER", 'BASE TABLE' AS "TABLE_TYPE", 'NO' AS "IS_TRANSIENT",
    NULL::VARCHAR AS "CLUSTERING_KEY", c.row_count AS "ROW_COUNT", 0 AS "BYTES", 1 AS "RETENTION_TIME",
    NULL::VARCHAR AS "SELF_REFERENCING_COLUMN_NAME", NULL::VARCHAR AS "REFERENCE_GENERATION",
    NULL::VARCHAR AS "USER_DEFINED_TYPE_CATALOG", NULL::VARCHAR AS "USER_DEFINED_TYPE_SCHEMA",
    NULL::VARCHAR AS "USER_DEFINED_TYPE_NAME", 'YES' AS "IS_INSERTABLE_INTO", 'YES' AS "IS_TYPED",
    NULL::VARCHAR AS "COMMIT_ACTION", to_timestamp(0)::timestamptz AS "CREATED",
    to_timestamp(0)::timestamptz AS "LAST_ALTERED", to_timestamp(0)::timestamptz AS "LAST_DDL",
    'SYSADMIN' AS "LAST_DDL_BY", 'NO' AS "AUTO_CLUSTERING_ON", e.comment AS "COMMENT", 'NO' AS "IS_TEMPORARY",
    'NO' AS "IS_ICEBERG", 'NO' AS "IS_DYNAMIC", 'NO' AS "IS_IMMUTABLE", 'NO' AS "IS_HYBRID"
FROM duckdb_tables() t
LEFT JOIN {catalog}._fs_information_schema._dw_row_counts c
    ON c.schema_name = t.schema_name AND c.table_name = t.table_name
LEFT JOIN _fs_global._fs_information_schema._fs_tables_ext e
    ON t.database_name = e.ext_table_catalog AND t.schema_name = e.ext_table_schema
    AND t.table_name = e.ext_table_name
WHERE t.database_name = {name} AND t.schema_name != '_fs_information_schema'
UNION ALL
SELECT
    v.database_name, v.schema_name, v.view_name, 'SYSADMIN', 'VIEW', 'NO', NULL::VARCHAR, NULL, NULL, 1,
    NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, 'NO', 'YES', NULL::VARCHAR,
    to_timestamp(0)::timestamptz, to_timestamp(0)::timestamptz, to_timestamp(0)::timestamptz, 'SYSADMIN',
    'NO', v.comment, 'NO', 'NO', 'NO', 'NO', 'NO'
FROM duckdb_views() v
WHERE v.database_name = {name} AND NOT v.internal
    AND v.schema_name NOT IN ('_fs_information_schema', 'information_schema', 'pg_catalog')
"""


class RowCounts:
    """Counts every table of a database before a statement reads its ``INFORMATION_SCHEMA.TABLES``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: set[str] = set()

    def refresh(self, duck_conn: Any, catalog: str) -> None:
        quoted = _quoted(catalog)
        with self._lock:
            cur = duck_conn.cursor()
            try:
                if catalog not in self._views:
                    cur.execute(
                        f"CREATE TABLE IF NOT EXISTS {quoted}._fs_information_schema._dw_row_counts"
                        " (schema_name VARCHAR, table_name VARCHAR, row_count BIGINT)"
                    )
                    cur.execute(_TABLES_VIEW.format(catalog=quoted, name=_literal(catalog)))
                    self._views.add(catalog)
                tables = cur.execute(
                    "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?"
                    " AND schema_name != '_fs_information_schema'",
                    [catalog],
                ).fetchall()
                counted = " UNION ALL ".join(
                    f"SELECT {_literal(s)}, {_literal(t)}, COUNT(*) FROM {quoted}.{_quoted(s)}.{_quoted(t)}"
                    for s, t in tables
                )
                cur.execute("BEGIN")
                cur.execute(f"DELETE FROM {quoted}._fs_information_schema._dw_row_counts")
                if counted:
                    cur.execute(f"INSERT INTO {quoted}._fs_information_schema._dw_row_counts {counted}")
                cur.execute("COMMIT")
            finally:
                cur.close()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _information_schema_tables(transformed: Any, database: str | None) -> str | None:
    """The database whose ``INFORMATION_SCHEMA.TABLES`` (fakesnow's ``_FS_TABLES``) ``transformed`` reads."""
    from sqlglot import exp

    for table in transformed.find_all(exp.Table):
        if table.name.upper() == "_FS_TABLES":
            return table.catalog or database
    return None


# -- Time zones ---------------------------------------------------------------------------------------------


def set_timezone(conn: Any, name: str) -> None:
    """The session's TIMEZONE: DuckDB's TimeZone of the session's connection does what Snowflake's does."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise _error(f"Invalid value ['{name}'] for parameter 'TIMEZONE'", 1008, "22023") from None
    conn._duck_conn.execute(f"SET TimeZone = {_literal(name)}")
    conn.dw_timezone = name


def _timestamp_struct_in_any_zone(original: Any) -> Any:
    """fakesnow sends a TIMESTAMP_TZ as (epoch, fraction, offset) and supported UTC only: the offset is now
    the session time zone's at each instant (the connector builds each value's tzinfo from it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def timestamp_to_sf_struct(ts: Any) -> Any:
        if isinstance(ts, pa.ChunkedArray):
            ts = ts.combine_chunks()
        if not ts.type.tz or ts.type.tz in ("UTC", "Etc/UTC"):
            return original(ts)
        utc = ts.cast(pa.timestamp(ts.type.unit, tz="UTC"))
        struct = original(utc)
        per_minute = {"s": 60, "ms": 60_000, "us": 60_000_000, "ns": 60_000_000_000}[ts.type.unit]
        wall = pc.local_timestamp(ts).cast(pa.int64())
        offset = pc.divide(pc.subtract(wall, utc.cast(pa.int64())), per_minute)
        zone = pc.add(offset, 1440).fill_null(1440).cast(pa.int32())
        return pa.StructArray.from_arrays(
            arrays=[struct.field("epoch"), struct.field("fraction"), zone], fields=list(struct.type)
        )

    return timestamp_to_sf_struct


def _ntz_bindings_without_zone(from_binding: Any) -> Any:
    """A TIMESTAMP_NTZ binding is a wall-clock time; fakesnow made it a UTC instant, which DuckDB then reads
    in the session's time zone."""

    def converted(binding: dict[str, str]) -> Any:
        value = from_binding(binding)
        if binding.get("type") == "TIMESTAMP_NTZ" and getattr(value, "tzinfo", None) is not None:
            return value.replace(tzinfo=None)
        return value

    return converted


# -- Server-side bindings -----------------------------------------------------------------------------------


def _is_merge(text: str) -> bool:
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from dw_local.snowflake_statements import parsed

    try:
        return isinstance(parsed(text), exp.Merge)
    except ParseError:
        return False


def numbered_bindings(text: str, values: list[Any]) -> tuple[str, dict[str, Any]]:
    """``text`` with each ``?`` and ``:n`` written as the named placeholder of its number (``:b1``, ...), and the
    values by name. Snowflake binds a MERGE's values wherever they stand
    (https://docs.snowflake.com/en/developer-guide/python-connector/python-connector-example#binding-data);
    fakesnow splits a MERGE into statements that each hold some of its placeholders, and DuckDB refuses a value
    a statement does not hold: named, each part is given its own (``execute_strictly``). The text is the same
    whatever the values, so its rewrite is kept (snowflake_statements.py), where values written into the text
    made each a new one. (A name, not ``:n``: fakesnow's merge re-parses its parts in sqlglot's default
    dialect, which reads ``:b1`` and not ``:1``. QUERY_HISTORY keeps the text as sent.)"""
    named = _named_text(text)
    for n in _numbers(named):
        if not 1 <= n <= len(values):
            raise _error(f"SQL compilation error:\nBind variable {n} not set.", 2049, "42601")
    return named, {f"b{i + 1}": v for i, v in enumerate(values)}


@functools.lru_cache(maxsize=1024)
def _named_text(text: str) -> str:
    import sqlglot
    from sqlglot.tokens import TokenType

    tokens = sqlglot.Dialect.get_or_raise("snowflake").tokenize(text)
    spans: list[tuple[int, int, str]] = []
    position = 0
    for i, token in enumerate(tokens):
        if token.token_type == TokenType.PLACEHOLDER and token.text == "?":
            position += 1
            spans.append((token.start, token.end, f":b{position}"))
        elif (
            token.token_type == TokenType.COLON
            and i + 1 < len(tokens)
            and tokens[i + 1].token_type == TokenType.NUMBER
            and tokens[i + 1].start == token.end + 1
            and (i == 0 or tokens[i - 1].token_type not in (TokenType.VAR, TokenType.IDENTIFIER))
        ):
            spans.append((token.start, tokens[i + 1].end, f":b{int(tokens[i + 1].text)}"))
    for start, end, value in reversed(spans):
        text = text[:start] + value + text[end + 1 :]
    return text


@functools.lru_cache(maxsize=1024)
def _numbers(named: str) -> frozenset[int]:
    from sqlglot import exp

    from dw_local.snowflake_statements import parsed

    found = (p.name for p in parsed(named).find_all(exp.Placeholder))
    return frozenset(int(n[1:]) for n in found if n[:1] == "b" and n[1:].isdigit())


def _own_values(transformed: Any, params: Any) -> Any:
    """The values of the placeholders ``transformed`` holds, when they are given by name (a MERGE's part)."""
    if not isinstance(params, dict):
        return params
    from sqlglot import exp

    held = {p.name for p in transformed.find_all(exp.Placeholder)}
    return {k: v for k, v in params.items() if k in held} or None


# -- Installing ---------------------------------------------------------------------------------------------


class Rules:
    """What the server checks before running a statement, and on what it runs."""

    def __init__(self, fs: Any):
        self.catalog = Catalog(fs)
        self.row_counts = RowCounts()

    def refusal(self, text: str, conn: Any) -> Exception | None:
        found = duckdb_only(text) or misnamed_qualifier(text)
        if found is None:
            found = self.catalog.refusal(references(text, conn.database, conn.schema))
        return found


def install(app: Any, fs: Any) -> Rules:
    import duckdb
    import fakesnow.arrow
    import fakesnow.server
    import fakesnow.transforms
    from fakesnow.cursor import FakeSnowflakeCursor

    rules = Rules(fs)
    # DuckDB answers 1/0 with inf under IEEE floating point; without it, with "Division by zero".
    fs.duck_conn.execute("SET GLOBAL ieee_floating_point_ops = false")
    fakesnow.transforms.merge = _with_duplicate_check(fakesnow.transforms.merge)
    fakesnow.arrow.timestamp_to_sf_struct = _timestamp_struct_in_any_zone(
        fakesnow.arrow.timestamp_to_sf_struct
    )
    fakesnow.server.from_binding = _ntz_bindings_without_zone(fakesnow.server.from_binding)

    run = FakeSnowflakeCursor._execute

    def execute_strictly(self, transformed: Any, params: Any = None) -> None:
        catalog = _information_schema_tables(transformed, self._conn.database)
        if catalog:
            rules.row_counts.refresh(self._duck_conn, catalog)
        try:
            run(self, transformed, _own_values(transformed, params))
        except (duckdb.InvalidInputException, duckdb.OutOfRangeException) as e:
            if "Division by zero" in str(e):
                raise _error("Division by zero", 100051, "22012") from e
            raise
        duplicate = _duplicate_rows(transformed, self._arrow_table)
        if duplicate is not None:
            raise duplicate

    FakeSnowflakeCursor._execute = execute_strictly

    execute = FakeSnowflakeCursor.execute

    def execute_as_snowflake_does(self, command: str, *args: Any, **kwargs: Any):
        if not kwargs.get("server"):
            return execute(self, command, *args, **kwargs)
        # ALTER SESSION SET/UNSET TIMEZONE, which fakesnow does not implement.
        altered = _ALTER_TIMEZONE.match(command)
        if altered is not None:
            name = altered.group(1).replace("''", "'") if altered.group(1) is not None else DEFAULT_TIMEZONE
            set_timezone(self._conn, name)
            self._execute(fakesnow.transforms.SUCCESS_NOP)
            return self
        bound = kwargs.get("binding_params")
        if isinstance(bound, (list, tuple)) and bound and _is_merge(command):
            command, kwargs["binding_params"] = numbered_bindings(command, list(bound))
        return execute(self, command, *args, **kwargs)

    FakeSnowflakeCursor.execute = execute_as_snowflake_does
    _wrap_routes(app, rules)
    return rules


def _wrap_routes(app: Any, rules: Rules) -> None:
    import json

    import fakesnow.server
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from dw_local.account_usage import request_body

    routes = app.router.routes
    endpoints = {r.path: (i, r) for i, r in enumerate(routes) if isinstance(r, Route)}
    login_index, login_route = endpoints["/session/v1/login-request"]
    query_index, query_route = endpoints["/queries/v1/query-request"]
    login_endpoint, query_endpoint = login_route.endpoint, query_route.endpoint

    def refused(error: Any) -> JSONResponse:
        code = f"{error.errno:06d}"
        return JSONResponse(
            {
                "data": {"errorCode": code, "sqlState": error.sqlstate},
                "code": code,
                "message": error.msg,
                "success": False,
            }
        )

    async def login_request(request: Request):
        body = json.loads(await request_body(request))
        params = (body.get("data") or {}).get("SESSION_PARAMETERS") or {}
        response = await login_endpoint(request)
        token = (json.loads(response.body).get("data") or {}).get("token")
        conn = fakesnow.server.sessions.get(token) if token else None
        if conn is not None:
            try:
                await run_in_threadpool(set_timezone, conn, params.get("TIMEZONE") or DEFAULT_TIMEZONE)
            except Exception as e:  # noqa: BLE001 - the refusal is the answer
                fakesnow.server.sessions.pop(token, None)
                return refused(e)
        return response

    async def query_request(request: Request):
        token = fakesnow.server.to_token(request) if request.headers.get("Authorization") else None
        conn = fakesnow.server.sessions.get(token) if token else None
        if conn is not None:
            body = json.loads(await request_body(request))
            error = await run_in_threadpool(rules.refusal, body.get("sqlText", ""), conn)
            if error is not None:
                return refused(error)
        return await query_endpoint(request)

    routes[login_index] = Route(login_route.path, login_request, methods=["POST"])
    routes[query_index] = Route(query_route.path, query_request, methods=["POST"])
