"""What a node's joins do to a measured quantity: rows and units an inner join drops, rows a join fans out.

A node's join text (Coalesce's ``sourceMapping[].join.joinCondition``) is parsed with sqlglot after its
refs are resolved; every measurement is one aggregate query pushed down to the warehouse, with identifiers
quoted and nothing from metadata spliced in unquoted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from dw_dagster.checks.recorded_totals import plain_value
from dw_dagster.coalesce.sql import quote_identifier, resolve_refs
from dw_dagster.incidents.models import JoinEffect, KeyGap


@dataclass(frozen=True)
class ParsedJoin:
    kind: str
    """INNER, LEFT, RIGHT, FULL or CROSS."""
    left_table: str
    right_table: str
    on: list[tuple[str, str]]
    """Pairs of (left column, right column) equated in the ON clause."""


def parse_joins(join_text: str, resolve_table: Callable[[str, str], str]) -> list[ParsedJoin]:
    """The joins of a Coalesce join condition, each with the table on each side of its equalities."""
    sql = "SELECT * " + resolve_refs(join_text, resolve_table)
    tree = sqlglot.parse_one(sql, read="snowflake")
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None:
        return []
    tables: dict[str, str] = {}

    def add(table: exp.Expression) -> None:
        if isinstance(table, exp.Table):
            name = ".".join(quote_identifier(p.name) for p in table.parts)
            tables[table.alias_or_name] = name

    add(source.this)
    out = []
    for join in tree.args.get("joins") or []:
        add(join.this)
        right_alias = join.this.alias_or_name
        kind = (join.side or join.kind or "INNER").upper()
        on = join.args.get("on")
        pairs: list[tuple[str, str]] = []
        left_alias = None
        for eq in on.find_all(exp.EQ) if on is not None else []:
            a, b = eq.left, eq.right
            if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
                continue
            if a.table == right_alias:
                a, b = b, a
            if b.table == right_alias and a.table in tables:
                pairs.append((a.name, b.name))
                left_alias = left_alias or a.table
        if pairs and left_alias:
            out.append(ParsedJoin(kind, tables[left_alias], tables[right_alias], pairs))
    return out


def unmatched_from(join: ParsedJoin) -> str:
    """``FROM ... WHERE ...`` of the left rows (alias ``L``) that match nothing on the right."""
    on = " AND ".join(f"R.{quote_identifier(r)} = L.{quote_identifier(lc)}" for lc, r in join.on)
    return (
        f"FROM {join.left_table} L\n"
        f"LEFT JOIN {join.right_table} R ON {on}\n"
        f"WHERE R.{quote_identifier(join.on[0][1])} IS NULL"
    )


def unmatched_rows_query(join: ParsedJoin, measure_column: str | None, item_column: str | None = None) -> str:
    """Ready-to-run SQL: the left rows (their units, their items) that match nothing on the right, by key."""
    keys = ", ".join(f"L.{quote_identifier(lc)}" for lc, _ in join.on)
    units = f"SUM(L.{quote_identifier(measure_column)})" if measure_column else "COUNT(*)"
    items = (
        f",\n  COUNT(DISTINCT L.{quote_identifier(item_column)}) AS UNMATCHED_ITEMS" if item_column else ""
    )
    return (
        f"SELECT {keys},\n  COUNT(*) AS UNMATCHED_ROWS,\n  {units} AS UNMATCHED_UNITS{items}\n"
        f"{unmatched_from(join)}\n"
        f"GROUP BY {keys}\n"
        f"ORDER BY UNMATCHED_UNITS DESC"
    )


def measure_inner_join(
    cur: Any,
    asset_key: str,
    join: ParsedJoin,
    measure_column: str | None,
    item_column: str | None,
) -> JoinEffect:
    """Rows (and units of ``measure_column``) on the left of an inner join that match nothing on the right,
    by left key, and right keys that match several rows (fan-out)."""
    cur.execute(unmatched_rows_query(join, measure_column, item_column))
    unmatched = []
    width = len(join.on)
    for row in cur.fetchall():
        unmatched.append(
            KeyGap(
                column=", ".join(lc for lc, _ in join.on),
                value=", ".join(plain_value(v) for v in row[:width]),
                rows=int(row[width]),
                units=float(row[width + 1] or 0),
                distinct_items=int(row[width + 2]) if item_column else None,
            )
        )
    right_keys = ", ".join(quote_identifier(r) for _, r in join.on)
    cur.execute(
        f"SELECT COALESCE(SUM(N - 1), 0) FROM (SELECT COUNT(*) AS N FROM {join.right_table}"
        f" GROUP BY {right_keys} HAVING COUNT(*) > 1)"
    )
    return JoinEffect(
        asset_key=asset_key,
        join_type=join.kind,
        left=join.left_table,
        right=join.right_table,
        on=[f"{lc} = {r}" for lc, r in join.on],
        dropped_rows=sum(g.rows for g in unmatched),
        dropped_units=sum(g.units for g in unmatched),
        duplicated_rows=int(cur.fetchone()[0] or 0),
        unmatched=unmatched,
    )
