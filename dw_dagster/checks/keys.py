"""Small keyed tables: which rows appeared or went, by key, and the new keys that explain a bigger table's
new level.

A monitored table with a unique column (``dagster/column_schema``: a unique or primary key, or a unique
test) and fewer rows than the small-count size has its keys recorded every night, in ``METRIC_HISTORY`` as
the series ``rows:<asset>`` grouped by key (one cheap query of a small table). Then a change in it is named
("1 row appeared: ACCOUNT_ID=42"), and when a table downstream of it grows, the rows that carry the new keys
(the table has a column of the same name, as a join on the key does) are counted: if the growth is those
rows, a new key was mapped the same day, and the growth is the table's new level, not an anomaly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import dagster as dg

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.recorded_totals import plain_value
from dw_dagster.coalesce.sql import quote_identifier, table_reference

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


def read_keys(cur: Any, table: tuple[str, str, str], column: str) -> dict[str, Any]:
    """Tonight's keys of a small table: label -> raw value."""
    cur.execute(f"SELECT DISTINCT {quote_identifier(column)} FROM {table_reference(*table)}")
    return {key_label(column, r[0]): r[0] for r in cur.fetchall()}


def record_keys(
    history: HistorySession,
    keys: Mapping[str, tuple[str, dict[str, Any]]],
    day: date,
    run_ids: tuple[str | None, str | None],
) -> dict[str, KeyChange]:
    """Records tonight's keys of each small table (``asset key -> (column, keys)``), every table's history
    read in one statement and written in one; returns what changed in each since its last night."""
    series = {asset: rows_series(asset) for asset in keys}
    pasts = history.metric_histories(list(series.values()), day, KEYS_LOOKBACK_DAYS)
    history.record_metrics(
        day, {series[a]: (float(len(raw)), dict.fromkeys(raw, 1.0)) for a, (_, raw) in keys.items()}, *run_ids
    )
    changes = {}
    for asset, (column, raw) in keys.items():
        past = pasts[series[asset]]
        before = past[max(past)].groups if past else None
        changes[asset] = (
            KeyChange(column=column)
            if before is None
            else KeyChange(
                column=column,
                appeared={k: v for k, v in raw.items() if k not in before},
                went=sorted(k for k in before if k not in raw),
            )
        )
    return changes


def rows_with_keys(cur: Any, table: tuple[str, str, str], column: str, values: Sequence[Any]) -> int:
    marks = ", ".join(["%s"] * len(values))
    cur.execute(
        f"SELECT COUNT(*) FROM {table_reference(*table)} WHERE {quote_identifier(column)} IN ({marks})",
        tuple(values),
    )
    return int(cur.fetchone()[0])


def new_key_candidates(
    upstream: Sequence[str], changes: Mapping[str, KeyChange], columns: Sequence[str]
) -> list[tuple[str, KeyChange]]:
    """Upstream small tables whose keys appeared tonight, keyed on a column this table has."""
    return [
        (asset, changes[asset])
        for asset in upstream
        if asset in changes and changes[asset].appeared and changes[asset].column in columns
    ]
