"""The rows an event changes: the rows its ``where`` matches (in a night's new rows, or in SQL), a fraction
of them picked, a reference table's rows put back as installed or added once, and a new key written into a
night's rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dw_dagster.sql import quote_identifier
from dw_local.world import WorldError

if TYPE_CHECKING:
    from dw_local.worlds.night_world import Frames, NightWorld


def values_of(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def matching(frame: pd.DataFrame, where: dict[str, Any] | None) -> np.ndarray:
    mask = np.ones(len(frame), dtype=bool)
    for column, value in (where or {}).items():
        mask &= frame[column].isin(values_of(value)).to_numpy()
    return mask


def pick_rows(mask: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Exactly round(fraction x candidates) of the candidate rows (``mask``; at least one), chosen by ``rng``."""
    candidates = np.flatnonzero(mask)
    k = min(len(candidates), max(1, round(fraction * len(candidates))))
    out = np.zeros(len(mask), dtype=bool)
    out[rng.choice(candidates, size=k, replace=False)] = True
    return out


def pick_matching(event: Any, frame: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    """``pick_rows`` of the night's rows matching the event's ``where``."""
    mask = matching(frame, event.where)
    if not mask.any():
        # A night's rows are drawn when it is played, so this cannot be checked when the file is loaded.
        raise WorldError(
            f"{event.kind}: where: no row of {event.table}'s new rows on the night matches {event.where}"
        )
    return pick_rows(mask, event.fraction, rng)


def where_sql(where: dict[str, Any]) -> tuple[str, tuple]:
    clauses, args = [], []
    for column, value in where.items():
        values = values_of(value)
        clauses.append(f"{quote_identifier(column)} IN ({', '.join(['%s'] * len(values))})")
        args += values
    return " AND ".join(clauses), tuple(args)


def restore_rows(world: NightWorld, cur: Any, table: str, where: dict[str, Any]) -> None:
    """Puts the world file's rows matching ``where`` back in a once table, as they were installed."""
    clause, args = where_sql(where)
    cur.execute(f"DELETE FROM {world.tables[table].qualified} WHERE {clause}", args)
    original = world.once_frame(table)
    world.load(cur, table, original[matching(original, where)])


def check_row(world: NightWorld, table: str, row: dict[str, Any]) -> None:
    """``row`` can be added to ``table`` (named by ``reference``): a load: once source with every column the
    row names."""
    if world.source_load(table) != "once":
        raise ValueError(f"reference: {table} is not a load: once (reference) source")
    if wrong := sorted(set(row) - set(world.tables[table].columns)):
        raise ValueError(f"row: {table} has no column {wrong[0]}")


def add_row(world: NightWorld, cur: Any, table: str, row: dict[str, Any]) -> None:
    """Adds ``row`` to a once table unless a row with exactly its values is there: an event listed on each
    night its key keeps arriving adds its reference row once, not once a night."""
    clause, args = where_sql({k: v for k, v in row.items() if v is not None})  # NULL never matches
    cur.execute(f"SELECT COUNT(*) FROM {world.tables[table].qualified} WHERE {clause}", args)
    if cur.fetchone()[0]:
        return
    columns = ", ".join(quote_identifier(c) for c in row)
    marks = ", ".join(["%s"] * len(row))
    cur.execute(
        f"INSERT INTO {world.tables[table].qualified} ({columns}) VALUES ({marks})", tuple(row.values())
    )


def with_new_key(event: Any, world: NightWorld, frames: Frames, night: int) -> Frames:
    """``fraction`` of the night's rows matching ``where`` now carry the new key (orders on a new storefront);
    ``event`` is a ``new_key_unmapped``, a ``new_key_mapped`` or a ``new_key_parent_unmapped``."""
    frame = frames[event.table].copy()
    rows = pick_matching(event, frame, event.rng(world, night))
    frame.loc[rows, event.column] = event.value
    return {**frames, event.table: frame}
