"""The chain of lookups behind a join: where a reference row that changed really sits.

A fact joins a lookup (a dimension), which joins further lookups of its own (an item -> its group ->
its parent group). A key the fact's join drops may still be in the lookup's Source table: the lookup dropped it itself,
through one of its own joins, because a row further up was deleted or no longer matches. A group that moved
between values may be brought by a join further up too: the row that was pointed elsewhere is the one of the
table that carries the mapping, named by its own key, not by the fact's key. Both are read from the
pipeline's structure (each node's join text, column lineage) and from the reference tables' own rows.

- :func:`dropped_upstream`: the join inside a lookup node (or further up, up to ``MAX_DEPTH`` lookups) that
  drops rows, its keys, and whether each key's row was deleted, changed or excluded by the join's condition
  (one statement per join, one per reference probe).
- :func:`chain_keys`: the key columns of every join on the way from a node's join to the table the group
  column is read from, nearest first, as columns of the node (to read tonight's mapping by each of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from dw_dagster.context.joins import ParsedJoin
from dw_dagster.incidents.evidence import DiagnosisContext, node_joins, traced_left
from dw_dagster.incidents.joins import measure_join
from dw_dagster.incidents.origins import on_table
from dw_dagster.incidents.structure import source_column, table
from dw_dagster.records.incidents import JoinEffect, KeyGap
from dw_dagster.records.keys import typed

MAX_DEPTH = 3
"""Lookups walked up from the fact's join, at most."""


@dataclass
class UpstreamDrop:
    node: str
    """The lookup node whose own join drops the rows."""
    join: ParsedJoin
    effect: JoinEffect
    keys: list[KeyGap]
    """The keys of that join that match nothing, each with what happened to its row."""
    reference: str
    """The asset key of the table the rows were deleted from or changed in."""


def _only(
    ctx: DiagnosisContext, node: str, column: str, join: ParsedJoin, values: list
) -> tuple[str, list] | None:
    """The join's left rows that carry ``values`` of ``node``'s ``column`` (typed as the left table holds
    them); None when the left side does not carry the column (then every left row is measured). A subquery
    of registers carries it when one of its inputs does, under the subquery's own name for it."""
    found = traced_left(ctx, node, column, join) if values else None
    if found is None:
        return None
    name, (left, traced) = found
    return name, [typed(v, ctx.graph.info(left).type_of(traced)) for v in values]


def dropped_upstream(ctx: DiagnosisContext, lookup: str, column: str, values: list) -> UpstreamDrop | None:
    """The join of ``lookup`` (or of a lookup further up) that drops the rows of ``values`` of its ``column``
    (keys the fact's join lost though they are still in the lookup's Source table); None when no join up
    the chain drops them."""
    node = lookup
    for _ in range(MAX_DEPTH):
        found = None
        for join in node_joins(ctx, node):
            if join.kind not in ("INNER", "CROSS"):
                continue  # a left join keeps its left rows
            with ctx.purpose(f"rows {node}'s {join.kind} join to {join.right_table} drops"):
                try:
                    only = _only(ctx, node, column, join, values)
                    effect = measure_join(ctx.cursor, node, join, None, None, only)
                except Exception as e:  # noqa: BLE001 - recorded in the trail; the diagnosis goes on
                    ctx.note(f"{node}: its join to {join.right_table} could not be measured: {e}")
                    continue
            if effect.dropped_rows:
                found = (join, effect)
                break
        if found is None:
            return None
        join, effect = found
        right = ctx.graph.key_for_table(join.right_table)
        if right is None:
            return None
        reference = source_column(ctx.graph, (right, join.on[0][1])) or (right, join.on[0][1])
        values = [k.value for k in effect.unmatched if k.value is not None]
        present = on_table(ctx, reference[0], reference[1], values) if len(join.on) == 1 else None
        ref_table = table(ctx.graph, reference[0]) or join.right_table
        still = [k for k in effect.unmatched if k.value is not None and present and present.get(k.value)]
        if still and not any(k.change for k in still) and right != reference[0] and node_joins(ctx, right):
            # The row is there but the next lookup drops it itself: one more step up.
            node, column, values = right, join.on[0][1], [k.value for k in still]
            continue
        keys = []
        for k in effect.unmatched:
            if k.change:
                story = f"its row is {k.change}"
            elif present is not None and k.value is not None and present.get(k.value):
                story = f"its row in {ref_table} changed and matches nothing in {join.right_table}"
            elif present is not None and k.value is not None:
                story = f"its row was deleted from {ref_table}"
            else:
                story = f"it matches nothing in {join.right_table}"
            keys.append(k.model_copy(update={"change": story}))
        return UpstreamDrop(node, join, effect, keys, reference[0])
    return None


def _lineage(ctx: DiagnosisContext, column: tuple[str, str]) -> set[tuple[str, str]]:
    """The column and every column it is derived from."""
    columns = ctx.graph.columns
    return {column, *(nx.ancestors(columns, column) if column in columns else ())}


@dataclass(frozen=True)
class Level:
    """One key of the chain of lookups, as tonight's mapping can be read by it."""

    columns: tuple[str, ...]
    """The key's columns as the node (or the first lookup) carries them: one per column of the join's key."""
    on_lookup: bool
    """Read from the first lookup's table (the fact does not carry it), else from the fact's own."""
    reference: str
    """The table asset whose rows that key names."""
    reference_columns: tuple[str, ...]
    """The key's columns in that table, in the order of :attr:`columns`."""


def _carried(ctx: DiagnosisContext, owner: str, ends: list[set[tuple[str, str]]]) -> tuple[str, ...] | None:
    """A column of ``owner`` for each column of a join's key (each derived from one of its ``ends``, a
    different column each); None unless every one is carried."""
    out: list[str] = []
    for end in ends:
        column = next(
            (c for c in ctx.graph.info(owner).columns if c not in out and end & _lineage(ctx, (owner, c))),
            None,
        )
        if column is None:
            return None
        out.append(column)
    return tuple(out)


def chain_keys(ctx: DiagnosisContext, node: str, join: ParsedJoin) -> list[Level]:
    """The key of ``join`` and of every join further up the lookups on its right side, nearest first, each
    as columns of ``node`` or, where ``node`` does not carry them, of the first lookup (``join``'s right).
    A join on several columns is one key of several columns (a route is an origin and a destination)."""
    graph = ctx.graph
    lookup = graph.key_for_table(join.right_table)
    out: list[Level] = []
    chain: list[ParsedJoin] = [join]
    seen = {node}
    i = 0
    while i < len(chain) and len(seen) <= MAX_DEPTH + 1:
        j = chain[i]
        i += 1
        right = graph.key_for_table(j.right_table)
        ends = [
            {(k, c) for t, c in [*j.left_sources(lc), (j.right_table, rc)] if (k := graph.key_for_table(t))}
            for lc, rc in j.on
        ]
        level = None
        for owner in [node, *([lookup] if lookup and i > 1 else [])]:
            columns = _carried(ctx, owner, ends)
            if columns is not None:
                level = (columns, owner != node)
                break
        if level is None and i == 1:
            return []  # the node does not carry its own join's key: the lookups cannot be read from it
        if level is not None and right is not None and level not in ((x.columns, x.on_lookup) for x in out):
            rows_of = [source_column(graph, (right, rc)) for _, rc in j.on]
            if all(r is not None and r[0] == rows_of[0][0] for r in rows_of):  # type: ignore[index]
                reference, ref_columns = rows_of[0][0], tuple(r[1] for r in rows_of)  # type: ignore[index]
            else:
                reference, ref_columns = right, tuple(rc for _, rc in j.on)
            out.append(Level(level[0], level[1], reference, ref_columns))
        if right is not None and right not in seen:
            seen.add(right)
            chain += node_joins(ctx, right)
    return out
