"""Small keyed tables: which rows appeared or went, by key, and the new keys that explain a bigger table's
new level.

A monitored table with a unique column (``dagster/column_schema``: a unique or primary key, or a unique
test) and fewer rows than the small-count size has its keys recorded every night, in ``METRIC_HISTORY`` as
the series ``rows:<asset>`` grouped by key (a ``SELECT DISTINCT`` of a small table, a part of the night's
statement: ``measure.py``). Then a change in it is named
("1 row appeared: ACCOUNT_ID=42"), and when a table downstream of it grows, the rows that carry the new keys
are counted: if the growth is those rows, a new key was mapped the same day, and the growth is the table's
new level, not an anomaly. The column that carries the key in the grown table is found by following the key
down the column lineage and across each join on the way whose ON clause equates it with a column of the
other side, whatever that column is called (``ACCOUNT_ID`` joined as ``SRC_ACCOUNT_ID``, carried on as
``ACCOUNT_KEY``); where the lineage does not say, by the key's own name.

The joins are read from each node's join text (``coalesce/join``) by :func:`parse_node`, which the
diagnosis measures joins with too (``incidents/joins.py``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import dagster as dg
from sqlglot import exp

from dw_dagster.checks.history import Reading, Recorded
from dw_dagster.checks.measure import Part, quoted_table
from dw_dagster.checks.recorded_totals import plain_value
from dw_dagster.context.joins import equated
from dw_dagster.context.lineage import Column, LineageGraph
from dw_dagster.sql import placeholders, quote_identifier, table_reference

KEYS_LOOKBACK_DAYS = 14


def rows_series(asset_key: str) -> str:
    return f"rows:{asset_key}"


def table_columns(spec: dg.AssetSpec) -> list[dg.TableColumn]:
    schema = spec.metadata.get("dagster/column_schema")
    schema = getattr(schema, "schema", schema)  # a TableSchemaMetadataValue or the TableSchema itself
    return list(getattr(schema, "columns", ()) or ())


def unique_column(spec: dg.AssetSpec) -> str | None:
    """The table's key: its first column declared unique (a unique or primary key, or a unique test)."""
    for column in table_columns(spec):
        if column.constraints is not None and column.constraints.unique:
            return column.name
    return None


def key_label(column: str, value: Any) -> str:
    """How a key reads in a message and in the recorded groups (``ACCOUNT_ID=42``, not ``42.0``)."""
    return f"{column}={plain_value(value)}"


@dataclass
class KeyChange:
    column: str
    appeared: dict[str, Any] = field(default_factory=dict)
    """label -> raw value, as the table holds it (to bind in a query)."""
    went: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = []
        for labels, verb in ((list(self.appeared), "appeared"), (self.went, "went")):
            if labels:
                shown = ", ".join(labels[:5]) + (f" and {len(labels) - 5} more" if len(labels) > 5 else "")
                parts.append(f"{len(labels)} row{'s' if len(labels) != 1 else ''} {verb}: {shown}")
        return "; ".join(parts)


def keys_part(
    key: Hashable, table: tuple[str, str, str], column: str, only_if: exp.Condition | None = None
) -> Part:
    """Tonight's keys of a small table, as a part of the night's statement; with ``only_if`` (the table is
    still small tonight), none when it does not hold, so a table that grew is not read whole."""
    query = (
        exp.select(exp.column(exp.to_identifier(column, quoted=True))).distinct().from_(quoted_table(*table))
    )
    return Part(("keys", key), query if only_if is None else query.where(only_if))


def keys_reading(column: str, rows: Sequence[tuple]) -> tuple[dict[str, Any], Reading]:
    """The keys a part read (label -> raw value, as the table holds it), and tonight's ``rows:`` reading."""
    raw = {key_label(column, r[0]): r[0] for r in rows}
    return raw, Reading(value=float(len(raw)), groups=dict.fromkeys(raw, 1.0))


def key_change(column: str, raw: Mapping[str, Any], past: Mapping[date, Recorded]) -> KeyChange:
    """What changed in a small table since its last recorded night (``past``: its ``rows:`` series)."""
    if not past:
        return KeyChange(column=column)
    before = past[max(past)].groups
    return KeyChange(
        column=column,
        appeared={k: v for k, v in raw.items() if k not in before},
        went=sorted(k for k in before if k not in raw),
    )


def rows_with_keys(cur: Any, table: tuple[str, str, str], column: str, values: Sequence[Any]) -> int:
    cur.execute(
        f"SELECT COUNT(*) FROM {table_reference(*table)} WHERE {quote_identifier(column)} IN ({placeholders(len(values))})",
        tuple(values),
    )
    return int(cur.fetchone()[0])


def key_columns(graph: LineageGraph, small: str, key: str, grown: str) -> list[str]:
    """The columns of ``grown`` that hold the values of ``small``'s column ``key``, in the table's order:
    node by node from ``small`` down, a column is the key's when every column it is built from is (not the
    key mixed with another column: a label, a price times a rate), and a join that equates a column of one side with the key
    makes that column the key's in the joined rows (``ON "STG"."SRC_ACCOUNT_ID" = "DIM"."ACCOUNT_ID"``)."""
    if small not in graph or grown not in graph:
        return []
    held: set[Column] = {(small, key)}
    for node in graph.path(small, grown)[1:]:
        here = set(held)
        pairs = equated(graph, node)
        grew = True
        while grew:  # a key equated along a chain of joins in one node
            grew = False
            for a, b in pairs:
                if (a in here) != (b in here):
                    here |= {a, b}
                    grew = True
        for column in graph.info(node).columns:
            sources = graph.column_sources((node, column))
            if sources and all(s in here for s in sources):
                held.add((node, column))
    return [c for c in graph.info(grown).columns if (grown, c) in held]


def new_key_candidates(
    graph: LineageGraph, asset: str, changes: Mapping[str, KeyChange]
) -> list[tuple[str, KeyChange, str]]:
    """Upstream small tables whose keys appeared tonight, each with the column of ``asset`` that holds its
    key (:func:`key_columns`), else a column of the key's own name, as a join on the key usually gives (the
    lineage or a join text the checks cannot read may not say)."""
    if asset not in graph:
        return []
    out = []
    for small in sorted(graph.upstream(asset)):
        change = changes.get(small)
        if change is None or not change.appeared:
            continue
        named = [change.column] if change.column in graph.info(asset).columns else []
        columns = key_columns(graph, small, change.column, asset) or named
        if columns:
            out.append((small, change, columns[0]))
    return out
