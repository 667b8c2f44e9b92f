"""What the diagnosis reads of the pipeline's structure: source tables, their columns and types, where a
column comes from, which columns tell when a row arrived. Nothing here knows a world's names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import networkx as nx

from dw_dagster.context.lineage import Column, LineageGraph
from dw_dagster.sql import is_time_type, table_parts, table_reference

_DATE = re.compile(r"^DATE\b", re.IGNORECASE)
_NUMERIC = re.compile(
    r"^(NUMBER|DECIMAL|NUMERIC|INT|INTEGER|BIGINT|SMALLINT|TINYINT|BYTEINT|FLOAT|DOUBLE|REAL)\b",
    re.IGNORECASE,
)


def is_source(graph: LineageGraph, key: str) -> bool:
    """A Coalesce Source node: a table the pipeline reads and does not build."""
    info = graph.info(key)
    return info.node_type == "Source" or ("coalesce" not in info.kinds and bool(info.table_name))


def table(graph: LineageGraph, key: str) -> str | None:
    """The asset's fully quoted table, or None when it is not a table."""
    parts = table_parts(graph.info(key).table_name)
    return table_reference(*parts) if parts else None


SEARCH_TABLES = 8
"""Tables one search along the lineage reads at most (the sources searched for copies of rows, the monitored
tables asked for a row count), nearest first: a statement each, out of the diagnosis's ``QUERY_BUDGET``
(docs/diagnose.md). The public worlds' deepest table has 5 sources upstream."""


def sources_upstream(graph: LineageGraph, key: str) -> list[str]:
    """Source tables the asset is built from (itself, if it is one), in a stable order."""
    keys = [*sorted(graph.upstream(key)), key] if key in graph else []
    return [k for k in keys if is_source(graph, k) and table(graph, k)]


def nearest(graph: LineageGraph, key: str, keys: Iterable[str]) -> list[str]:
    """``keys`` by their distance from ``key`` along the lineage (the fewest edges between them, upstream or
    downstream), nearest first, then by name; at most ``SEARCH_TABLES``. A table a join or more up the path
    is searched as surely as the nearest one, its place set by the lineage, never by its name."""
    if key not in graph:
        return []
    down = nx.single_source_shortest_path_length(graph.assets, key)
    up = nx.single_source_shortest_path_length(graph.assets.reverse(copy=False), key)
    far = len(graph.assets)
    ranked = sorted(set(keys), key=lambda k: (min(down.get(k, far), up.get(k, far)), k))
    return ranked[:SEARCH_TABLES]


def source_column(graph: LineageGraph, column: Column) -> Column | None:
    """The Source table column a column is read from, walking column lineage upstream (the first one by
    name, when it is computed from several: ``source_pairs`` tells a union's inputs apart)."""
    if column[0] in graph and is_source(graph, column[0]):
        return column
    for ancestor in sorted(graph.column_ancestors(column)):
        if ancestor[0] in graph and is_source(graph, ancestor[0]):
            return ancestor
    return None


def source_columns(graph: LineageGraph, column: Column) -> list[Column]:
    """Every Source table column a column is computed from."""
    if column[0] in graph and is_source(graph, column[0]):
        return [column]
    return sorted(a for a in graph.column_ancestors(column) if a[0] in graph and is_source(graph, a[0]))


def key_tables(graph: LineageGraph, asset: str, columns: list[str]) -> list[tuple[str, list[str]]]:
    """The Source tables that feed every one of ``asset``'s ``columns`` (a key of one or several columns),
    each with the column it feeds each from, in a stable order: one for a table built from one source, each
    input of a union of registers (a key is in one register or the other)."""
    found = [source_columns(graph, (asset, c)) for c in columns]
    out = []
    for source in sorted({k for k, _ in found[0]}) if found else []:
        read = [[c for k, c in each if k == source] for each in found]
        if all(len(r) == 1 for r in read):
            out.append((source, [r[0] for r in read]))
    return out


def source_pairs(graph: LineageGraph, measure: Column, key: Column) -> list[tuple[Column, Column]]:
    """The Source tables that feed both ``measure`` and ``key`` (columns of one table), each with the column
    it feeds each from, in a stable order: one for a table built from one source, one per input of a union
    of sources of different layouts (REGION from one input's region column and the other's group column)."""
    keys = {}
    for k in source_columns(graph, key):
        keys.setdefault(k[0], k)
    pairs = {}
    for m in source_columns(graph, measure):
        if m[0] in keys:
            pairs.setdefault(m[0], (m, keys[m[0]]))
    return list(pairs.values())


def time_columns(graph: LineageGraph, key: str) -> list[str]:
    info = graph.info(key)
    return [c for c in info.columns if is_time_type(info.type_of(c))]


def is_time(graph: LineageGraph, key: str, column: str) -> bool:
    return is_time_type(graph.info(key).type_of(column))


def is_date(graph: LineageGraph, key: str, column: str) -> bool:
    """A DATE column (Snowflake's DATETIME is a timestamp)."""
    return bool(_DATE.match(graph.info(key).type_of(column)))


def is_numeric(graph: LineageGraph, key: str, column: str) -> bool:
    return bool(_NUMERIC.match(graph.info(key).type_of(column)))


def derives_from(graph: LineageGraph, column: Column, asset: str) -> bool:
    """Whether ``column`` is computed (in part) from a column of ``asset``."""
    return any(a[0] == asset for a in graph.column_ancestors(column))


def day_columns(graph: LineageGraph, key: str, texts: list[str]) -> list[str]:
    """The source's time columns the pipeline itself selects business days by: named in a WHERE condition
    of ``texts`` (the join text of the nodes that read the source, the SQL of the totals over it, refs
    resolved). A source reloaded whole each night is not selected by day, so it has none."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    times = set(time_columns(graph, key))
    found: list[str] = []
    for text in texts:
        try:
            tree = sqlglot.parse_one(text, read="snowflake")
        except SqlglotError:
            continue
        for where in tree.find_all(exp.Where):
            for column in where.find_all(exp.Column):
                if column.name in times and column.name not in found:
                    found.append(column.name)
    return found
