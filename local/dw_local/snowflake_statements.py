"""The local Snowflake's statements, rewritten once per text instead of once per execution.

fakesnow parses each statement it is sent with sqlglot three times (the server to classify it, the cursor
to rewrite it, the describe of its result) and rewrites the cursor's tree in some eighty passes before DuckDB
runs it: about half of the server's CPU, in a world that sends the same texts night after night (the
Coalesce nodes' SQL, the product's queries with bound values). Here the server classifies a text once, keeps
the cursor's rewrite of a text whose rewrite depends on nothing but the text and the session's database and
schema, and describes a result by asking DuckDB directly. What DuckDB runs is what fakesnow would have run.

Each local world's server is a new process, and the suite starts dozens, every one sending the same texts (a
checks run's statement is some 45 KB: 0.65 s to parse and rewrite, 0.06 s to load): with
``DW_LOCAL_SNOWFLAKE_CACHE`` set to a folder, a kept rewrite is also written there, in sqlglot's own
serialisation (``Expression.dump``), under a key that names the text, the session's database and schema, and the
versions of fakesnow, sqlglot and DuckDB and of the local Snowflake's own modules, so a server reads the rewrites
another wrote instead of redoing them.

Installed by ``snowflake_server.serve`` on fakesnow 0.12.1 (pinned: this wraps its private cursor methods), and by
the test suite for fakesnow's in-process cursors (``install(in_process=True)``, kept in memory only).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
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


CACHE_ENV = "DW_LOCAL_SNOWFLAKE_CACHE"
KEEP_DAYS = 7
"""A kept rewrite no server has read for this long is pruned when a server starts (old code's texts)."""
_SHAPING_MODULES = ("snowflake_statements.py", "snowflake_rules.py", "snowflake_server.py")


@functools.cache
def _fingerprint() -> str:
    """What a kept rewrite depends on beyond its key: the libraries that rewrote it and the modules that wrap
    them."""
    from importlib.metadata import version

    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(json.dumps([version(d) for d in ("fakesnow", "sqlglot", "duckdb")]).encode())
    for name in _SHAPING_MODULES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


class RewriteStore:
    """The rewrites kept on disk (``CACHE_ENV``'s folder), shared by every local Snowflake that sets it. A file
    that cannot be read is a miss (and rewritten); a write is atomic (a temp file renamed), so servers writing
    the same key at once leave one whole file."""

    def __init__(self, folder: Path):
        self.folder = folder / _fingerprint()[:16]

    @classmethod
    def from_env(cls) -> RewriteStore | None:
        folder = os.environ.get(CACHE_ENV)
        return cls(Path(folder)) if folder else None

    def _path(self, key: Hashable) -> Path:
        name = hashlib.sha256(repr(key).encode()).hexdigest()
        return self.folder / name[:2] / f"{name}.json"

    def get(self, key: Hashable) -> list[Any] | None:
        from sqlglot import exp

        path = self._path(key)
        try:
            dumped = json.loads(path.read_bytes())
            statements = [exp.Expression.load(d) for d in dumped]
            os.utime(path)  # read: kept from the pruning
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
        return statements

    def put(self, key: Hashable, statements: list[Any]) -> None:
        """Keeps ``statements`` if they load back to what runs (the same DuckDB text); never raises: a rewrite
        that does not serialise (fakesnow keeps Python values in some, a MERGE's among them), a full disk or a
        read-only folder costs the next server a rewrite, nothing more."""
        from sqlglot import exp

        try:
            text = json.dumps([s.dump() for s in statements])
            loaded = [exp.Expression.load(d) for d in json.loads(text)]
            if [s.sql(dialect="duckdb") for s in loaded] != [s.sql(dialect="duckdb") for s in statements]:
                return
            path = self._path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
                f.write(text)
            os.replace(f.name, path)
        except (OSError, TypeError, ValueError, KeyError, AttributeError):
            return

    def prune(self, now: float | None = None) -> None:
        """Removes the rewrites no server has read for ``KEEP_DAYS`` (those of any version: checkouts of other
        branches may share the folder), at most once a day (every server starts here)."""
        now = time.time() if now is None else now
        root = self.folder.parent
        marker = root / ".pruned"
        try:
            if now - marker.stat().st_mtime < 86400:
                return
        except OSError:
            pass
        try:
            root.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            return
        cutoff = now - KEEP_DAYS * 86400
        for path in root.glob("*/*/*.json"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError:
                pass


def _sql_once(statement: Any) -> Any:
    """``statement`` whose ``sql()`` text is generated once per dialect: fakesnow generates a rewritten tree's
    DuckDB text at every execution (0.07 s for a checks run's statement), and a kept tree never changes."""
    generate = statement.sql
    texts: dict[tuple, str] = {}

    def sql(dialect: Any = None, **opts: Any) -> str:
        key = (dialect, tuple(sorted(opts.items())))
        text = texts.get(key)
        if text is None:
            text = texts[key] = generate(dialect=dialect, **opts)
        return text

    statement.sql = sql
    return statement


# What fakesnow marks on a rewritten statement that changes the session, the stages or DuckDB's catalog as
# the statement runs, or that is read from the request rather than the text.
_SESSION_ARGS = (
    "create_db_name", "create_file_format_name", "create_stage_name", "list_stage_name", "put_stage_data",
    "put_stage_name", "result_scan_sfqid", "seed", "set_autocommit", "set_database", "set_schema",
)  # fmt: skip


def _reusable(statements: list[Any]) -> bool:
    """Whether fakesnow's rewrite of these statements is a function of the text, database and schema alone:
    queries, DML and tables created from a column list, with nothing that changes the session, uploads files
    or draws random numbers (a table created from a query is rewritten from DuckDB's catalog; the one a MERGE is
    split around, ``merge_candidates``, is made from the statement's own text by fakesnow's merge transform)."""
    from sqlglot import exp

    for statement in statements:
        created_table = (
            isinstance(statement, exp.Create)
            and statement.kind == "TABLE"
            and (statement.args.get("expression") is None or _merge_candidates(statement))
        )
        if not (
            created_table or isinstance(statement, (exp.Query, exp.Insert, exp.Update, exp.Delete, exp.Merge))
        ):
            return False
        if any(statement.args.get(k) for k in _SESSION_ARGS) or statement.find(exp.Rand, exp.TableSample):
            return False
    return True


def _merge_candidates(statement: Any) -> bool:
    from sqlglot import exp

    table = statement.this
    return isinstance(table, exp.Table) and table.name.lower() == "merge_candidates"


_trees = Memo()


def parsed(text: str) -> Any:
    """The Snowflake-dialect tree of ``text``, parsed once; for readers only (raises sqlglot's ParseError)."""
    import sqlglot

    tree = _trees.get(text)
    if tree is None:
        tree = sqlglot.parse_one(text, read="snowflake")
        _trees.put(text, tree)
    return tree


def install(in_process: bool = False) -> None:
    """Rewrites each text once for the server's clients (``server=True``), and with ``in_process`` for
    fakesnow's in-process cursors too (``fakesnow.patch()``: a test's own connection, where one history
    write's MERGE was rewritten every time it ran), kept in memory only."""
    import fakesnow.server
    import snowflake.connector.errors
    from fakesnow.cursor import FakeSnowflakeCursor
    from sqlglot import exp

    _classify_each_text_once(fakesnow.server)
    execute = FakeSnowflakeCursor.execute
    rewrites = Memo()
    disk = None if in_process else RewriteStore.from_env()
    if disk is not None:
        disk.prune()

    def execute_reusing_rewrites(self, command: str, params: Any = None, *args: Any, **kwargs: Any):
        server = kwargs.get("server")
        if not (server or in_process) or self._conn.nop_regexes or "IDENTIFIER" in command.upper():
            return execute(self, command, params, *args, **kwargs)
        conn = self._conn
        text = self._inline_variables(command)
        if server:
            bound = kwargs.get("binding_params")
        else:
            # As fakesnow's execute binds an in-process call: values written into the text client-side
            # for the pyformat styles (so each text is its own key), bound as they are for qmark.
            text, bound = self._rewrite_with_params(text, params)
        key = (text, conn.database, conn.schema, conn.database_set, conn.schema_set)
        statements = rewrites.get(key)
        if statements is None and disk is not None:
            statements = disk.get(key)
            if statements is not None:
                statements = [_sql_once(s) for s in statements]
                rewrites.put(key, statements)
        if statements is None:
            captured = _capturing_rewrites(self)
            try:
                result = execute(self, command, params, *args, **kwargs)
            finally:
                del self._transform
            if _reusable(captured):
                rewrites.put(key, [_sql_once(s) for s in captured])
                if disk is not None:
                    disk.put(key, captured)
            return result
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
    FakeSnowflakeCursor._execute = _keeping_the_description(FakeSnowflakeCursor._execute)
    FakeSnowflakeCursor._describe_last_sql = _describe_in_duckdb(FakeSnowflakeCursor._describe_last_sql)


def _keeping_the_description(run: Callable[..., None]) -> Callable[..., None]:
    """fakesnow's ``_execute`` with the description of the result it kept (``to_arrow_table`` of the last
    statement DuckDB ran, nothing run after it), under the result's query id: the rows' own column names and
    types, which ``_describe_in_duckdb`` answers without planning the statement again."""

    def execute(self, transformed: Any, params: Any = None) -> None:
        self._kept_description = None
        run(self, transformed, params)
        # RESULT_SCAN restores an earlier result without running anything: DuckDB's description is not its.
        if not transformed.args.get("result_scan_sfqid"):
            self._kept_description = (self._sfqid, self._duck_conn.description)

    return execute


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
    generating it back, which plans the statement a second time (a sixth of a server's CPU on a played
    night). The description DuckDB gave the result itself comes first (``_keeping_the_description``): the
    same names and type names as DESCRIBE's, which is all fakesnow's row types read (``describe_as_rowtype``:
    the name and the type; DESCRIBE's ``null`` is never read). Then DuckDB's own ``DESCRIBE`` of the text as
    it is; the original path stays for what it refuses."""
    import duckdb

    def describe_last_sql(self) -> list:
        kept = getattr(self, "_kept_description", None)
        if kept is not None and kept[0] == self._sfqid and kept[1] is not None:
            return [(name, str(kind), "YES", None, None, None) for name, kind, *_ in kept[1]]
        try:
            return self._duck_conn.execute(f"DESCRIBE {self._last_sql}", self._last_params).fetchall()
        except duckdb.Error:
            return describe(self)

    return describe_last_sql
