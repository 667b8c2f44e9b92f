"""What a node's joins and filters do to a measured quantity: rows and units a join drops (an inner join, a
join whose condition also filters the right side or relates the two by a range, a left join to a lookup the
measure is read from), rows a filter in the join text leaves out, rows a join fans out.

A node's join text (Coalesce's ``sourceMapping[].join.joinCondition``) is parsed by
:func:`dw_dagster.context.joins.parse_node` (the checks follow a key across joins with it too). Text sqlglot
cannot parse, or a template that does not render, raises :class:`JoinParseError` naming the node: the
diagnosis reports it and goes on without that node's joins.
Every measurement is one aggregate query pushed down to the warehouse, with identifiers quoted and nothing
from metadata spliced in unquoted; key values are bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dw_dagster.coalesce.transforms import PER_KEY
from dw_dagster.context.joins import ParsedFilter, ParsedJoin, parse_node
from dw_dagster.records.incidents import JoinEffect, KeyGap
from dw_dagster.records.keys import plain
from dw_dagster.sql import placeholders, quote_identifier

MAX_KEYS = 20
"""Unmatched keys read back per join (largest first)."""


def parse_joins(
    join_text: str, resolve_table: Callable[[str, str], str], node: str = "node"
) -> list[ParsedJoin]:
    """The joins of a Coalesce join condition (see :func:`parse_node`)."""
    return parse_node(node, join_text, resolve_table).joins


def _conditions(join: ParsedJoin) -> list[str]:
    """The join's conditions besides its equalities: on the right side alone, and relating both sides."""
    return [*join.right_conditions, *(r.sql for r in join.relations)]


def _match(join: ParsedJoin) -> str:
    on = [f"R.{quote_identifier(r)} = L.{quote_identifier(lc)}" for lc, r in join.on]
    return " AND ".join([*on, *_conditions(join)])


def unmatched_from(join: ParsedJoin, *read: str | None) -> str:
    """``FROM ... WHERE ...`` of the left rows (alias ``L``) that match nothing on the right; ``read``: the
    columns of tables joined before the left one the caller reads (``"ALIAS.COLUMN"``, see
    :meth:`ParsedJoin.left_from`)."""
    return (
        f"FROM {join.left_from(*read)} L\n"
        f"LEFT JOIN {join.right_table} R ON {_match(join)}\n"
        f"WHERE R.{quote_identifier(join.on[0][1])} IS NULL"
    )


def unmatched_rows_query(
    join: ParsedJoin, measure_column: str | None, item_column: str | None = None, count: str | None = None
) -> str:
    """Ready-to-run SQL: the left rows (their units, their items) that match nothing on the right, by key;
    the units as :func:`measure_join` counts them (``count``)."""
    keys = ", ".join(f"L.{quote_identifier(lc)}" for lc, _ in join.on)
    units = _units(measure_column, count)
    items = (
        f",\n  COUNT(DISTINCT L.{quote_identifier(item_column)}) AS UNMATCHED_ITEMS" if item_column else ""
    )
    return (
        f"SELECT {keys},\n  COUNT(*) AS UNMATCHED_ROWS,\n  {units} AS UNMATCHED_UNITS{items}\n"
        f"{unmatched_from(join, measure_column, item_column)}\n"
        f"GROUP BY {keys}\n"
        f"ORDER BY UNMATCHED_UNITS DESC"
    )


def _units(measure_column: str | None, count: str | None) -> str:
    """A key's units on the left rows ``L``: the measure's sum, or the count the total's lineage makes of it
    (``PER_KEY``), or the rows where the total has no measure."""
    if measure_column is None:
        return "COUNT(*)"
    column = f"L.{quote_identifier(measure_column)}"
    return PER_KEY[count].format(column) if count in PER_KEY else f"SUM({column})"


def _measure_query(
    join: ParsedJoin,
    measure_column: str | None,
    item_column: str | None,
    only: tuple[str, int] | None = None,
    count: str | None = None,
) -> str:
    """The unmatched rows by key, whether each key is on the right at all (the join's other conditions
    aside), and the fan-out of the right side's keys: one statement. ``count``: the count (``PER_KEY``) the
    total's lineage makes of ``measure_column``, the key's units then (a distinct count of people, not a sum
    of their ids)."""
    keys = ", ".join(f"L.{quote_identifier(lc)}" for lc, _ in join.on)
    units = _units(measure_column, count)
    items = f"COUNT(DISTINCT L.{quote_identifier(item_column)})" if item_column else "NULL"
    right_keys = ", ".join(quote_identifier(r) for _, r in join.on)
    present = (
        f"MAX(CASE WHEN A.{quote_identifier(join.on[0][1])} IS NOT NULL THEN 1 ELSE 0 END)"
        if _conditions(join)
        else "0"
    )
    anywhere = (
        f"\nLEFT JOIN (SELECT DISTINCT {right_keys} FROM {join.right_table}) A ON "
        + " AND ".join(f"A.{quote_identifier(r)} = L.{quote_identifier(lc)}" for lc, r in join.on)
        if _conditions(join)
        else ""
    )
    fanout = f"({_fanout_query(join)})"
    # A key of several columns: whether each of its values is on the right at all, to name the ones that fail.
    alone = [(i, r, lc) for i, (lc, r) in enumerate(join.on)] if len(join.on) > 1 else []
    each = "".join(
        f", MAX(CASE WHEN C{i}.{quote_identifier(r)} IS NOT NULL THEN 1 ELSE 0 END) AS IN_{i}"
        for i, r, _ in alone
    )
    each_join = "".join(
        f"\nLEFT JOIN (SELECT DISTINCT {quote_identifier(r)} FROM {join.right_table}) C{i}"
        f" ON C{i}.{quote_identifier(r)} = L.{quote_identifier(lc)}"
        for i, r, lc in alone
    )
    restrict = f" AND L.{quote_identifier(only[0])} IN ({placeholders(only[1])})" if only and only[1] else ""
    return (
        f"SELECT {keys}, COUNT(*) AS UNMATCHED_ROWS, {units} AS UNMATCHED_UNITS, {items} AS UNMATCHED_ITEMS,"
        f" {present} AS ON_RIGHT, {fanout} AS FANOUT{each}\n"
        f"FROM {join.left_from(measure_column, item_column)} L\nLEFT JOIN {join.right_table} R ON {_match(join)}{anywhere}{each_join}\n"
        f"WHERE R.{quote_identifier(join.on[0][1])} IS NULL{restrict}\n"
        f"GROUP BY {keys}\nORDER BY UNMATCHED_UNITS DESC\nLIMIT {MAX_KEYS}"
    )


def measure_join(
    cur: Any,
    asset_key: str,
    join: ParsedJoin,
    measure_column: str | None,
    item_column: str | None,
    only: tuple[str, list] | None = None,
    count: str | None = None,
) -> JoinEffect:
    """Rows (and units of ``measure_column``) on the left of a join that match nothing on the right, by left
    key (a NULL key reads ``COLUMN IS NULL``; a key of several columns names the columns that fail to
    match), and right keys that match several rows (fan-out). One
    statement; a key the join's other conditions exclude though it is on the right says so. ``only``: the
    left rows whose column holds one of these values (bound), and no others. ``count``: the units are that
    count of ``measure_column`` (``_measure_query``)."""
    if only and only[1]:
        cur.execute(
            _measure_query(join, measure_column, item_column, (only[0], len(only[1])), count), tuple(only[1])
        )
    else:
        cur.execute(_measure_query(join, measure_column, item_column, count=count))
    rows = cur.fetchall()
    width = len(join.on)
    # Shown as the node writes them: on the right side's own alias.
    shown = [re.sub(r"\bR\.", f"{quote_identifier(join.right_alias)}.", c) for c in join.right_conditions]
    shown += [r.shown for r in join.relations]
    unmatched = []
    for row in rows:
        values = [plain(v) for v in row[:width]]
        on_right = bool(row[width + 3])
        parts = [(lc, v) for (lc, _), v in zip(join.on, values, strict=True)] if width > 1 else []
        failing = [c for i, (c, v) in enumerate(parts) if v is None or not row[width + 5 + i]]
        failing = failing or [c for c, _ in parts]
        column, value = (failing[0], dict(parts)[failing[0]]) if parts else (join.on[0][0], values[0])
        unmatched.append(
            KeyGap(
                column=column,
                value=value,
                parts=parts,
                unmatched_columns=failing,
                rows=int(row[width]),
                units=float(row[width + 1] or 0),
                distinct_items=int(row[width + 2]) if item_column and row[width + 2] is not None else None,
                change=f"on {join.right_table} but excluded by the join's condition {' AND '.join(shown)}"
                if on_right
                else None,
            )
        )
    fanout = int(rows[0][width + 4] or 0) if rows else _fanout(cur, join)
    return JoinEffect(
        asset_key=asset_key,
        join_type=join.kind,
        left=join.left_table,
        right=join.right_table,
        # Each side on its own table, as the node's ON clause writes it (never ``ORGANIZATION_ID = ORGANIZATION_ID``).
        on=[f"{_qualified(join.left_alias, lc)} = {_qualified(join.right_alias, r)}" for lc, r in join.on]
        + shown,
        dropped_rows=sum(g.rows for g in unmatched),
        dropped_units=sum(g.units for g in unmatched),
        duplicated_rows=fanout,
        unmatched=unmatched,
    )


def _qualified(alias: str, column: str) -> str:
    return f"{alias}.{column}" if alias else column


def _fanout_query(join: ParsedJoin) -> str:
    """The right rows beyond the first that share a key. With relations (a type-2 dimension's versions of a
    key), the right rows beyond the first that one left key and the values the relations read all meet:
    overlapping versions, not the versions themselves."""
    right_keys = ", ".join(quote_identifier(r) for _, r in join.on)
    if not join.relations:
        return (
            f"SELECT COALESCE(SUM(N - 1), 0) FROM (SELECT COUNT(*) AS N FROM {join.right_table}"
            f" GROUP BY {right_keys} HAVING COUNT(*) > 1)"
        )
    read = dict.fromkeys([*(lc for lc, _ in join.on), *(c for r in join.relations for c in r.left_columns)])
    left = ", ".join(quote_identifier(c) for c in read)
    by = ", ".join(f"L.{quote_identifier(c)}" for c in read)
    return (
        f"SELECT COALESCE(SUM(N - 1), 0) FROM (SELECT COUNT(*) AS N FROM (SELECT DISTINCT {left}"
        f" FROM {join.left_from()}) L JOIN {join.right_table} R ON {_match(join)} GROUP BY {by}"
        " HAVING COUNT(*) > 1)"
    )


def _fanout(cur: Any, join: ParsedJoin) -> int:
    cur.execute(_fanout_query(join))
    return int(cur.fetchone()[0] or 0)


def measure_filter(
    cur: Any,
    asset_key: str,
    flt: ParsedFilter,
    measure_column: str | None,
    item_column: str | None,
    count: str | None = None,
) -> JoinEffect:
    """Rows (and units) of the FROM table the node's WHERE condition leaves out, by the condition's columns:
    one statement. A condition on several columns names each of them (``REGION=EU, STATUS=VOID``), as a join
    key of several columns does. ``count``: as ``measure_join``'s."""
    cols = ", ".join(f"L.{quote_identifier(c)}" for c in flt.columns)
    units = _units(measure_column, count)
    items = f"COUNT(DISTINCT L.{quote_identifier(item_column)})" if item_column else "NULL"
    cur.execute(
        f"SELECT {cols}, COUNT(*), {units}, {items} FROM {flt.table} L WHERE NOT COALESCE({flt.condition}, FALSE)"
        f" GROUP BY {cols} ORDER BY 3 DESC LIMIT {MAX_KEYS}"
    )
    width = len(flt.columns)
    gaps = []
    for row in cur.fetchall():
        values = [plain(v) for v in row[:width]]
        several = width > 1
        gaps.append(
            KeyGap(
                column=flt.columns[0],
                value=values[0],
                parts=list(zip(flt.columns, values, strict=True)) if several else [],
                unmatched_columns=list(flt.columns) if several else [],
                rows=int(row[width]),
                units=float(row[width + 1] or 0),
                distinct_items=int(row[width + 2]) if item_column and row[width + 2] is not None else None,
                change=f"left out by {asset_key}'s condition {flt.condition}",
            )
        )
    return JoinEffect(
        asset_key=asset_key,
        join_type="WHERE",
        left=flt.table,
        right="",
        on=[flt.condition],
        dropped_rows=sum(g.rows for g in gaps),
        dropped_units=sum(g.units for g in gaps),
        unmatched=gaps,
    )
