"""Duplication, named as such: which table holds the duplicate rows, which keys they are on, and which load
brought them.

Exact duplicates (every column equal, the load's own timestamp included) are what a load applied twice
leaves; they are counted per key (the metrics file's group keys that the table has) with the range of their
load column, in one statement per table. A unique test that failed the Coalesce job is evidence of the same
class: the duplicated values of the tested column are read from the node's table, then traced to the source
that holds the copies. So is a declared business key that repeats (the checks' ``business_key`` finding,
``checks/business_keys.py``): the copies are looked for upstream, nearest first; where none are exact, the
key's repeated values are named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dw_dagster.incidents.drilldown import MAX_LEVELS
from dw_dagster.incidents.evidence import DiagnosisContext, feeders, node_joins
from dw_dagster.incidents.structure import is_numeric, nearest, sources_upstream, table, time_columns
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.records.keys import plain
from dw_dagster.sql import quote_identifier

MAX_KEYS = 20
NEARLY_ALL = 0.9
"""A value whose rows in the load are copied at this share or more was applied twice whole."""
MIN_COPIED = 20
"""Distinct rows copied a value needs to name the subset of a load applied twice: a few stray copies name no subset
(in a small load, an id or an amount would)."""


@dataclass
class Duplicates:
    asset: str
    extra_rows: int
    """Rows beyond the first of each group of copies."""
    keys: list[KeyGap] = field(default_factory=list)
    load: str | None = None
    """Which load brought them: the range of the copies' load column."""
    query: str = ""
    """Ready-to-run SQL listing the copies."""


def load_column(ctx: DiagnosisContext, key: str) -> str | None:
    """The column that says when a row was loaded: the freshness rule's for the table, else its last time
    column (replication stamps come last by convention; any time column will do to tell loads apart)."""
    rule = next((r for r in ctx.metrics.freshness.inputs if r.input == key), None)
    if rule is not None:
        return rule.input_column
    times = time_columns(ctx.graph, key)
    return times[-1] if times else None


def duplicates_query(ctx: DiagnosisContext, key: str) -> str | None:
    tbl, columns = table(ctx.graph, key), ctx.graph.info(key).columns
    if tbl is None or not columns:
        return None
    cols = ", ".join(quote_identifier(c) for c in columns)
    return f"SELECT {cols}, COUNT(*) AS COPIES FROM {tbl} GROUP BY {cols} HAVING COUNT(*) > 1"


def joined_on(ctx: DiagnosisContext, key: str) -> str | None:
    """The column the nodes reading ``key`` join its table on (its side of their first equality): the key
    its copies multiply the joined rows by, when a lookup or a bridge fans the rows out."""
    tbl = table(ctx.graph, key)
    for reader in sorted(ctx.graph.assets.successors(key)) if tbl else []:
        for join in node_joins(ctx, reader):
            if join.right_table == tbl:
                return join.on[0][1]
            if join.left_table == tbl:
                return join.on[0][0]
    return None


def _group_key(ctx: DiagnosisContext, key: str) -> str | None:
    """The key to count copies by: a group key of the metrics file the table has."""
    columns = {c.upper(): c for c in ctx.graph.info(key).columns}
    for total in ctx.metrics.totals:
        for g in total.group_keys:
            if g.upper() in columns:
                return columns[g.upper()]
    return None


def exact_duplicates(ctx: DiagnosisContext, key: str, by_join: bool = False) -> Duplicates | None:
    """The table's exact duplicate rows by key, with the load that brought them (one statement). The key is
    a group key of the metrics file; with ``by_join``, first the column the table is joined on."""
    copies = duplicates_query(ctx, key)
    if copies is None:
        return None
    by = (joined_on(ctx, key) if by_join else None) or _group_key(ctx, key)
    load = load_column(ctx, key)
    group = quote_identifier(by) if by else "NULL"
    stamp = quote_identifier(load) if load else "NULL"
    # Each column named: a table with neither a group key nor a load column would otherwise read NULL three
    # times, which a driver may fold into one column.
    rows = ctx.rows(
        f"exact duplicate rows in {key}",
        f"SELECT {group} AS K, SUM(COPIES - 1) AS EXTRA, COUNT(*) AS N, MIN({stamp}) AS FIRST_LOAD,"
        f" MAX({stamp}) AS LAST_LOAD FROM ({copies}) GROUP BY 1 ORDER BY 2 DESC LIMIT {MAX_KEYS}",
    )
    if not rows:
        return None
    extra = sum(int(r[1] or 0) for r in rows)
    if not extra:
        return None
    keys = (
        [
            KeyGap(
                column=by,
                value=plain(r[0]),
                rows=int(r[1] or 0),
                units=0.0,
                change=f"{int(r[1] or 0):,} rows there twice in {key}",
            )
            for r in rows
        ]
        if by
        else []
    )
    first, last = (
        min((r[3] for r in rows if r[3] is not None), default=None),
        max((r[4] for r in rows if r[4] is not None), default=None),
    )
    # Copies a join fans out are named by the key they are joined on, whatever subset they came in; and only
    # in place of a group key: with none, the callers name the copies by their own evidence (the values a
    # unique test found repeated).
    subset = (
        _copied_subset(ctx, key, load, first, last, by)
        if by and load and first is not None and not by_join
        else None
    )
    if subset is not None:
        keys = subset
    when = None
    if load and first is not None:
        when = f"the load of {first}" if first == last else f"the loads from {first} to {last}"
        when += f" ({load})"
    return Duplicates(asset=key, extra_rows=extra, keys=keys, load=when, query=copies)


def _copied_subset(
    ctx: DiagnosisContext, key: str, load: str, first: object, last: object, by: str | None
) -> list[KeyGap] | None:
    """The subset of the load the copies came in that was applied twice, by the column that names it: a
    non-numeric column (or the group key; at most ``MAX_LEVELS`` values in that load) each of whose values
    holding copies has nine tenths of its distinct rows in the load copied, ``MIN_COPIED`` at least, while its other values have none
    (one channel's file replayed, not a share of every currency). The fewest such values win, the group key
    first among equals; None where none is (the whole load applied twice, copies scattered, or too few to
    tell a subset from a row). One statement."""
    tbl, info = table(ctx.graph, key), ctx.graph.info(key)
    times = set(time_columns(ctx.graph, key))
    dims = [
        c
        for c in info.columns
        if c != load and c not in times and (c == by or not is_numeric(ctx.graph, key, c))
    ]
    if tbl is None or not dims:
        return None
    cols = ", ".join(quote_identifier(c) for c in info.columns)
    stamp = quote_identifier(load)
    # W holds each distinct row of the load once, with its copies: a value's rows and those of them copied.
    parts = [
        f"SELECT {i} AS DIM, CAST({quote_identifier(c)} AS VARCHAR) AS V, COUNT(*) AS N,"
        f" SUM(CASE WHEN COPIES > 1 THEN 1 ELSE 0 END) AS COPIED, SUM(COPIES - 1) AS EXTRA FROM W GROUP BY 1, 2"
        for i, c in enumerate(dims)
    ]
    rows = ctx.rows(
        f"which subset of {key}'s load was applied twice",
        f"WITH W AS (SELECT {cols}, COUNT(*) AS COPIES FROM {tbl} WHERE {stamp} BETWEEN ? AND ? GROUP BY {cols})\n"
        f"SELECT DIM, V, N, COPIED, EXTRA FROM ({' UNION ALL '.join(parts)})"
        f" QUALIFY COUNT(*) OVER (PARTITION BY DIM) <= {MAX_LEVELS}",
        (first, last),
    )
    by_dim: dict[int, list[tuple]] = {}
    for r in rows or []:
        by_dim.setdefault(int(r[0]), []).append(r)
    found: list[tuple[int, bool, int]] = []
    for dim, values in by_dim.items():
        copied = [r for r in values if int(r[3] or 0)]
        whole = all(int(r[3]) >= NEARLY_ALL * int(r[2]) and int(r[3]) >= MIN_COPIED for r in copied)
        if copied and whole and len(copied) < len(values):
            found.append((len(copied), dims[dim] != by, dim))
    if not found:
        return None
    dim = min(found)[2]
    copied = sorted((r for r in by_dim[dim] if int(r[3] or 0)), key=lambda r: (-int(r[4] or 0), str(r[1])))
    return [
        KeyGap(
            column=dims[dim],
            value=plain(r[1]),
            rows=int(r[4] or 0),
            units=0.0,
            change=f"{int(r[3]):,} of its {int(r[2]):,} rows in the load are there twice or more in {key}",
        )
        for r in copied[:MAX_KEYS]
    ]


def duplicated_values(ctx: DiagnosisContext, key: str, column: str) -> list[KeyGap]:
    """Values of a column tested unique that repeat in the node's table (one statement)."""
    tbl = table(ctx.graph, key)
    if tbl is None:
        return []
    c = quote_identifier(column)
    rows = ctx.rows(
        f"values of {key}.{column} that repeat",
        f"SELECT {c}, COUNT(*) FROM {tbl} GROUP BY {c} HAVING COUNT(*) > 1 ORDER BY 2 DESC LIMIT {MAX_KEYS}",
    )
    return [
        KeyGap(
            column=column,
            value=plain(r[0]),
            rows=int(r[1]) - 1,
            units=0.0,
            change=f"{int(r[1])} rows in {key}",
        )
        for r in rows or []
    ]


def find_duplicates(ctx: DiagnosisContext, candidates: list[str], by_join: bool = False) -> Duplicates | None:
    """The first table (sources first, as given) holding exact duplicate rows (see :func:`exact_duplicates`
    for ``by_join``)."""
    for key in candidates:
        found = exact_duplicates(ctx, key, by_join)
        if found is not None:
            return found
    return None


def copy_candidates(ctx: DiagnosisContext, key: str) -> list[str]:
    """Where to look for the copies behind a table's extra rows: every source the lineage gives, nearest
    first (up to ``SEARCH_TABLES``), then the table itself, so copies a join or more up the path are found
    whatever the source's name."""
    if key not in ctx.graph:
        return []
    sources = [s for s in sources_upstream(ctx.graph, key) if s != key]
    return [*nearest(ctx.graph, key, sources), key]


def key_repeats_diagnosis(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    """A declared business key that repeats tonight is duplication: of a load applied twice where a table
    upstream holds exact copies (named with their keys and load), else of rows that share a key in the
    table itself (a join that fans out, a row sent again changed), named by the key's repeated values."""
    key = finding.asset_key
    columns = [str(c) for c in finding.evidence.get("key") or []]
    repeats = int(finding.evidence.get("repeats") or 0)
    candidates = copy_candidates(ctx, key)
    copies = find_duplicates(ctx, candidates)
    known = key in ctx.graph
    path = [*sorted(ctx.graph.upstream(key)), key] if known else [key]
    evidence = {
        "business_key": ", ".join(columns),
        "key_repeats": repeats,
        "row_count": int(finding.evidence.get("row_count") or 0),
        "duplicate_rows": copies.extra_rows if copies else 0,
    }
    if copies is not None:
        evidence["duplicates_in"] = copies.asset
        if copies.load:
            evidence["duplicate_load"] = copies.load
        load = f", brought by {copies.load}" if copies.load else ""
        return Diagnosis(
            incident_id=incident.incident_id,
            classification=CauseClass.DUPLICATION,
            cause=f"{finding.summary}; {copies.asset} holds {copies.extra_rows:,} exact duplicate rows{load}",
            evidence=evidence,
            keys=copies.keys[:10],
            upstream_change=f"duplicate rows loaded into {copies.asset}{load}",
            cause_asset=copies.asset,
            path=ctx.graph.path(copies.asset, key) if known and copies.asset != key else path,
            owners=ctx.graph.owners_on(feeders(ctx, copies.asset)),
            test_query=copies.query,
        )
    repeated = duplicated_values(ctx, key, columns[0]) if len(columns) == 1 else []
    searched = ", ".join(candidates) or "nothing: the table is not in the lineage"
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.DUPLICATION,
        cause=f"{finding.summary}; no exact copies in {searched}: rows that share a key differ in another "
        "column (a join that fans out, or a row sent again changed)",
        evidence=evidence,
        keys=repeated[:10],
        cause_asset=key,
        path=path,
        owners=ctx.graph.owners_on([key]) if known else [],
    )
