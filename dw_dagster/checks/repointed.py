"""A reference row re-pointed, read by its own key: which value of a dimension attribute each reference key
maps to in a total's table, night by night, and the keys whose value changed.

An attribute carried from a reference table (``attributes.py``) is judged by its values' shares of the
total; a re-pointed row whose units are smaller than those shares' own spread moves nothing the shares can
tell (a customer group of 8% of the intake moved to a district whose share ranges over ten points from day
to day). The reference row itself tells it: the lineage says which table the attribute is read from and
which join looks it up there (``ON "CUSTOMERS"."CUSTOMER_GROUP_ID" = "CUSTOMER_GROUPS"."CUSTOMER_GROUP_ID"``);
where the total's table carries that key too, the total's aggregate is measured by the key and the attribute
(a part of the night's one statement, at most ``MAX_MAPPED`` + 1 rows read) and recorded as the series
``attribute_keys:<total>:<COLUMN>``. A key whose units were wholly under one value on each of its last
``MAPPED_NIGHTS`` nights and are wholly under another tonight, from ``MIN_SHARE_OF_TOTAL`` of the total, was
re-pointed (an ERROR on the total's check when nothing else is wrong with it, its evidence naming the key).
A key that newly appears (a new key mapped), one whose value was or is NULL (mapped late, or its lookup row
gone: the loss's own checks), one split between values (an attribute that varies within the key) and a key
that returns to its old value (a fix) are not re-pointings; nor is a type-2 dimension's row (a join that also
relates the sides by date: a key's value changes on its new version's first day). Join keys carried as attributes are left out:
their values move between themselves every day (``attributes.carried_keys``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date

from pydantic import BaseModel
from sqlglot import exp

from dw_dagster.checks.attributes import joining_nodes, outer_select, projected, root_columns
from dw_dagster.checks.groups import MIN_SHARE_OF_TOTAL
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.measure import Part
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.context.joins import equated
from dw_dagster.context.lineage import Column, LineageGraph
from dw_dagster.records.keys import split_label, split_labels

MAX_MAPPED = 500
"""Rows of (key, value) read per total and attribute: a lookup of more keys is not kept night by night."""
MAPPED_NIGHTS = 3
"""Nights a key's value must have held, each night it had rows, before a change of it is a re-pointing."""
WHOLLY = 0.99
"""The part of a key's units one value holds for the key to be mapped to it (rounding aside)."""
_SPLIT = object()


def mapping_series(total: str, column: str) -> str:
    return f"attribute_keys:{total}:{column}"


def _tables(graph: LineageGraph, column: Column) -> set[str]:
    """The tables ``column`` is first read from (itself, where no lineage leads above it)."""
    return {a for a, _ in root_columns(graph, column)} or {column[0]}


def reference_key(graph: LineageGraph, asset: str, column: str) -> list[str]:
    """The columns of ``asset`` that hold the key of the reference row its ``column`` is read from: the
    column's lineage leads to one table, a join on the asset's path equates columns with that table's (all
    of them: its key), and ``asset`` carries each side's column of that join, copied from one column. Empty
    when it does not (the key is not carried, or the attribute mixes tables)."""
    if asset not in graph or (asset, column) not in graph.columns:
        return []
    tables = _tables(graph, (asset, column))
    if len(tables) != 1:
        return []
    carried: dict[Column, str] = {}
    for c in graph.info(asset).columns:
        if c != column and len(root_columns(graph, (asset, c))) <= 1:
            for ancestor in {(asset, c)} | graph.column_ancestors((asset, c)):
                carried.setdefault(ancestor, c)
    for node in joining_nodes(graph, asset):
        keys = []
        for a, b in equated(graph, node, by_key_alone=True):
            lookup, reference = (a, b) if _tables(graph, b) == tables else (b, a)
            if _tables(graph, reference) != tables or _tables(graph, lookup) == tables:
                continue
            held = carried.get(lookup) or carried.get(reference)
            if held is None:
                keys = []
                break
            keys.append(held)
        if keys:
            return list(dict.fromkeys(keys))
    return []


def mapping_part(total: RecordedTotal, sql: str, keys: Sequence[str], column: str) -> Part | None:
    """The total's aggregate by the reference key's columns and the attribute (each as text, so a numeric
    key shares the parts' columns), one row beyond ``MAX_MAPPED`` read; None when the total's SQL is not
    one SELECT over one table (``attributes.not_regrouped``)."""

    def projections(attribute: exp.Column, value: exp.Alias) -> list[exp.Expression]:
        return [
            *(exp.alias_(exp.cast(c, "VARCHAR"), f"K{i}", quoted=True) for i, c in enumerate(by(attribute))),
            exp.alias_(exp.cast(attribute, "VARCHAR"), "ATTRIBUTE", quoted=True),
            value.copy(),
        ]

    def by(attribute: exp.Column) -> list[exp.Column]:
        table = attribute.args.get("table")
        return [exp.column(exp.to_identifier(k, quoted=True), table=table and table.copy()) for k in keys]

    found = projected(sql, column, projections)
    if found is None:
        return None
    rows, attribute = found
    rows.set("group", exp.Group(expressions=[*by(attribute), attribute.copy()]))
    names = [*(f"K{i}" for i in range(len(keys))), "ATTRIBUTE", "VALUE"]
    return Part(
        ("attribute_keys", total.name, column),
        outer_select(rows.limit(MAX_MAPPED + 1), names, "m"),
        shape=f"attribute_keys:{len(keys)}",
    )


def mapping_label(keys: Sequence[str], values: Sequence[str], column: str, value: str) -> str:
    """A key's row in the series: ``CUSTOMER_GROUP_ID=21, SALES_DISTRICT=MUENCHEN``."""
    return ", ".join(f"{k}={v}" for k, v in [*zip(keys, values, strict=True), (column, value)])


class Repointed(BaseModel):
    key: str
    """The reference key's label (``CUSTOMER_GROUP_ID=21``)."""
    column: str
    before: str
    after: str
    units: float
    share: float
    """Of the total tonight."""

    def describe(self) -> str:
        return (
            f"{self.key} moved from {self.column}={self.before} to {self.column}={self.after} "
            f"({self.units:,.0f}, {self.share:.1%} of the total)"
        )


def _mapped(groups: Mapping[str, float | None]) -> dict[str, tuple[object, float]]:
    """Each key -> (the one value its units are under, its units), or ``_SPLIT`` for a key split between
    values; a NULL value reads None."""
    by_key: dict[str, dict[str | None, float]] = {}
    for label, units in groups.items():
        *key, value = split_labels(label)
        by_key.setdefault(", ".join(key), {})[split_label(value)[1]] = units or 0.0
    out: dict[str, tuple[object, float]] = {}
    for key, values in by_key.items():
        size = sum(abs(u) for u in values.values())
        if not size:
            continue
        value, units = max(values.items(), key=lambda kv: abs(kv[1]))
        out[key] = (value if abs(units) >= WHOLLY * size else _SPLIT, sum(values.values()))
    return out


def repointed(
    column: str, day: date, groups: Mapping[str, float | None], past: Mapping[date, Recorded], whole: float
) -> list[Repointed]:
    """The keys re-pointed tonight, largest first (see the module's docstring); ``whole``: the total
    tonight. Every recorded night counts, an incident's too: the night after a re-pointing, its new value
    is the last one seen, and a key that returns to its old value is no new change."""
    nights = [_mapped(past[d].groups or {}) for d in sorted(past, reverse=True) if d < day]
    out = []
    for key, (after, units) in _mapped(groups).items():
        if after is None or after is _SPLIT or abs(units) < MIN_SHARE_OF_TOTAL * abs(whole or 0.0):
            continue
        seen = [n[key][0] for n in nights if key in n][:MAPPED_NIGHTS]
        before = seen[0] if seen else None
        if len(seen) < MAPPED_NIGHTS or any(v != before for v in seen):
            continue
        if before is None or before is _SPLIT or before == after:
            continue
        out.append(
            Repointed(
                key=key,
                column=column,
                before=str(before),
                after=str(after),
                units=units,
                share=abs(units / whole),
            )
        )
    return sorted(out, key=lambda r: -abs(r.units))
