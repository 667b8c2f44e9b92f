"""A reference row re-pointed, read by its own key: which value of a dimension attribute each reference key
maps to in a total's table, night by night, and the keys whose value changed.

An attribute carried from a reference table (``attributes.py``) is judged by its values' shares of the
total; a re-pointed row whose units are smaller than those shares' own spread moves nothing the shares can
tell (a customer group of 8% of the intake moved to a district whose share ranges over ten points from day
to day). The reference row itself tells it: the lineage says which table the attribute is read from and
which join looks it up there (``ON "ACCOUNTS"."GROUP_ID" = "GROUPS"."GROUP_ID"``);
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

from dw_dagster.checks.attributes import joining_nodes, outer_select, projected, root_columns, root_tables
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
RECENT = 7
"""Days within which a key's last night with rows must be (its ``MAPPED_NIGHTS`` within three times as many)."""
_SPLIT = object()


def mapping_series(total: str, column: str) -> str:
    return f"attribute_keys:{total}:{column}"


def _tables(graph: LineageGraph, column: Column) -> set[str]:
    """The tables ``column`` is first read from (itself, where no lineage leads above it)."""
    return root_tables(graph, column) or {column[0]}


def reference_key(graph: LineageGraph, asset: str, column: str) -> list[str]:
    """The columns of ``asset`` that hold the key of the reference row its ``column`` is read from: the
    column's lineage leads to one table, and the join that looks it up (in a node on that lineage, equating
    columns of the input the attribute is read from, which lead to that table, with another input's: the
    nearest that table first) is by key alone; ``asset`` carries each of its key columns (:func:`_carried`).
    Empty when it does not, or when one reference column is looked up twice in that node (a bill-to and a
    ship-to customer: which one the attribute follows is not told)."""
    if asset not in graph or (asset, column) not in graph.columns:
        return []
    tables = _tables(graph, (asset, column))
    if len(tables) != 1:
        return []
    chain = {(asset, column)} | graph.column_ancestors((asset, column))
    readable = set(joining_nodes(graph, asset))
    for node in sorted({n for n, _ in chain} & readable, key=lambda n: (len(graph.upstream(n)), n)):
        inputs = {s[0] for c in chain if c[0] == node for s in graph.column_sources(c)}
        # The reference is a join's right side: a second join hung off it (``C.REGION_ID = R.ID``) looks up
        # another table by one of its columns, not it by its key.
        pairs = [
            (lookup, reference)
            for lookup, reference in equated(graph, node, by_key_alone=True)
            if reference[0] in inputs
            and _tables(graph, reference) == tables
            and _tables(graph, lookup) != tables
        ]
        if not pairs:
            continue
        if len({r for _, r in pairs}) != len(pairs):
            return []
        keys = [_carried(graph, asset, column, lookup, reference) for lookup, reference in pairs]
        return [] if None in keys else list(dict.fromkeys(keys))  # type: ignore[arg-type]
    return []


def _carried(
    graph: LineageGraph, asset: str, attribute: str, lookup: Column, reference: Column
) -> str | None:
    """The column of ``asset`` that holds a join's key: copied down from one of its two sides (one root
    column); of several, the one named as either side is (a band derived from the key has one root too);
    None when none is, or several and none by that name."""
    found = [
        c
        for c in graph.info(asset).columns
        if c != attribute
        and len(root_columns(graph, (asset, c))) <= 1
        and {lookup, reference} & ({(asset, c)} | graph.column_ancestors((asset, c)))
    ]
    named = [c for c in found if c.upper() in {lookup[1].upper(), reference[1].upper()}]
    return named[0] if named else found[0] if len(found) == 1 else None


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
    """A key's row in the series: ``GROUP_ID=21, DISTRICT=NORTH``."""
    return ", ".join(f"{k}={v}" for k, v in [*zip(keys, values, strict=True), (column, value)])


class Repointed(BaseModel):
    key: str
    """The reference key's label (``GROUP_ID=21``)."""
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
    is the last one seen, and a key that returns to its old value is no new change. A key's last nights
    must be recent (``RECENT``): a key with rows once a month is not compared with last month. A move from one
    value to another that two keys of this attribute or more made before, on nights no incident flagged (an
    order's status, a tenure band: a lifecycle, not a re-pointing), or away from the value NULL keys hold (a
    default member a late key leaves), is none."""
    if not whole:
        return []
    nights = [(d, _mapped(past[d].groups or {})) for d in sorted(past) if d < day]
    moved_by: dict[tuple[object, object], set[str]] = {}
    defaults: set[object] = set()
    last: dict[str, object] = {}
    for d, mapped in nights:
        for key, (value, _) in mapped.items():
            if all(split_label(p)[1] is None for p in split_labels(key)):
                defaults.add(value)
            # A move made on an incident's night (a re-pointing found, or its fix) teaches nothing routine.
            if key in last and last[key] != value and not past[d].flagged:
                moved_by.setdefault((last[key], value), set()).add(key)
            last[key] = value
    routine = {move for move, keys in moved_by.items() if len(keys) >= 2}
    out = []
    for key, (after, units) in _mapped(groups).items():
        if after is None or after is _SPLIT or abs(units) < MIN_SHARE_OF_TOTAL * abs(whole):
            continue
        seen = [(d, n[key][0]) for d, n in reversed(nights) if key in n][:MAPPED_NIGHTS]
        before = seen[0][1] if seen else None
        if (
            len(seen) < MAPPED_NIGHTS
            or (day - seen[0][0]).days > RECENT
            or (day - seen[-1][0]).days > 3 * RECENT
            or any(v != before for _, v in seen)
        ):
            continue
        if before is None or before is _SPLIT or before == after or before in defaults:
            continue
        if (before, after) in routine:
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
