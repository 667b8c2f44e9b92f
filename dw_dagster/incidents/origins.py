"""Where a dropped key came from: a key new in the source, or a reference row deleted or changed.

Told apart by the rows themselves, not by whether the key happens to be a group key of a recorded total:

- the **source's own rows**: the earliest date any time column of the source table holds for the key (the
  column the key is read from, traced through column lineage to its Source table; each input of a union of
  registers, the earliest of them). A key whose rows date
  from the target's last good night or before (the latest not flagged and with no incident) was there when
  the join matched it; one first seen since (on the incident's first night, read again the night after) is
  new, however many nights ago that was;
- the **recorded histories**, where the key is a group key: the target total had the key on an earlier
  night (it matched then), or the source total had it by the last good night;
- the **reference table's rows**: whether the key is still on the join's right side (and in the Source table
  behind it, or in any of a union's). Still there, it no longer matches (a changed row, or the join's condition now excludes it);
  gone, it was deleted if it was there before (by the evidence above), else it is missing from the reference
  (it never matched: a new key nobody mapped).

One statement of each table's rows, whatever the number of keys (their values bound): two where the key is
read from one Source table on each side, one more for each other input of a union; the nights with
an incident (for the last good night) are read once per diagnosis, shared with its other steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.context.joins import ParsedJoin
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import HISTORY_DAYS, DiagnosisContext, last_good_night
from dw_dagster.incidents.structure import key_tables, table, time_columns
from dw_dagster.records.incidents import JoinEffect, KeyGap
from dw_dagster.records.keys import plain, same_key, typed
from dw_dagster.sql import placeholders, quote_identifier


@dataclass
class KeyOrigin:
    key: KeyGap
    reference_changed: bool
    """The key used to match (its reference row was deleted or changed); False: new in the source."""
    story: str
    """What changed upstream, in one clause."""
    in_reference: bool = False
    """The key is still in the reference's Source table: the lookup node itself no longer carries it."""


def _local(v: object, zone: ZoneInfo) -> object:
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).astimezone(zone)
    return v


def _as_date(v: object) -> date | None:
    if isinstance(v, datetime):
        return v.date()
    if isinstance(v, date):
        return v
    if isinstance(v, str) and len(v) >= 10:
        try:
            return date.fromisoformat(v[:10])
        except ValueError:
            return None
    return None


Keys = tuple[str | None, ...]


def _matching(ctx: DiagnosisContext, key: str, columns: list[str], values: list[Keys]) -> tuple[str, tuple]:
    """``WHERE`` text and binds for the rows holding any of ``values`` (tuples, in ``columns``' order)."""
    info = ctx.graph.info(key)
    if len(columns) == 1:
        text = f"{quote_identifier(columns[0])} IN ({placeholders(len(values))})"
    else:
        one = " AND ".join(f"{quote_identifier(c)} = ?" for c in columns)
        text = " OR ".join([f"({one})"] * len(values))
    binds = tuple(typed(v, info.type_of(c)) for t in values for c, v in zip(columns, t, strict=True))
    return text, binds


def first_seen_in_rows(
    ctx: DiagnosisContext, key: str, columns: list[str], values: list[Keys]
) -> dict[Keys, date | None]:
    """The earliest business date any time column of the source table holds for each key (a tuple of
    ``columns``' values; one statement). A freshness rule's load column is UTC by convention and is read in
    the business day's time zone; other time columns are taken as they are (business time)."""
    times = [c for c in time_columns(ctx.graph, key) if c not in columns]
    utc = {r.input_column for r in ctx.metrics.freshness.inputs if r.input == key}
    zone = ZoneInfo(ctx.metrics.business_day.timezone)
    tbl = table(ctx.graph, key)
    if not times or not values or tbl is None:
        return {}
    cols = ", ".join(quote_identifier(c) for c in columns)
    mins = ", ".join(f"MIN({quote_identifier(c)})" for c in times)
    where, binds = _matching(ctx, key, columns, values)
    rows = ctx.rows(
        f"when the dropped keys first appear in {key}",
        f"SELECT {cols}, {mins} FROM {tbl} WHERE {where} GROUP BY {cols}",
        binds,
    )
    width = len(columns)
    out: dict[Keys, date | None] = {}
    for row in rows or []:
        dates = [
            d
            for c, v in zip(times, row[width:], strict=True)
            if (d := _as_date(_local(v, zone) if c in utc else v)) is not None
        ]
        out[tuple(plain(v) for v in row[:width])] = min(dates) if dates else None
    return out


def rows_on_table(
    ctx: DiagnosisContext, key: str, columns: list[str], values: list[Keys]
) -> dict[Keys, int] | None:
    """How many rows of ``key``'s table hold each key (a tuple of ``columns``' values; one statement); None
    if unmeasured."""
    tbl = table(ctx.graph, key)
    if tbl is None or not values:
        return None
    cols = ", ".join(quote_identifier(c) for c in columns)
    where, binds = _matching(ctx, key, columns, values)
    rows = ctx.rows(
        f"whether the dropped keys are in {key}",
        f"SELECT {cols}, COUNT(*) FROM {tbl} WHERE {where} GROUP BY {cols}",
        binds,
    )
    if rows is None:
        return None
    return {tuple(plain(v) for v in r[: len(columns)]): int(r[len(columns)]) for r in rows}


def on_table(ctx: DiagnosisContext, key: str, column: str, values: list[str]) -> dict[str, int] | None:
    """How many rows of ``key``'s table hold each value in ``column`` (one statement); None if unmeasured."""
    found = rows_on_table(ctx, key, [column], [(v,) for v in values])
    return None if found is None else {str(k[0]): n for k, n in found.items()}


def _left_sources(graph: LineageGraph, join: ParsedJoin | None) -> list[tuple[str, list[str]]]:
    """The Source tables the join's left key is read from, each with its columns: the left table's, or each
    input's of a subquery that unions registers."""
    out: list[tuple[str, list[str]]] = []
    for written in join.left_tables() if join is not None and join.on else []:
        asset = graph.key_for_table(written)
        columns = [dict(join.left_sources(lc)).get(written) for lc, _ in join.on]  # type: ignore[union-attr]
        if asset is not None and all(columns):
            out += key_tables(graph, asset, columns)  # type: ignore[arg-type]
    return out


def _in_history(history: dict, column: str, value: str | None, until: date | None = None) -> bool:
    """Whether a night of ``history`` (up to ``until``, when given) had the key among its groups."""
    return any(
        same_key(g, column, value)
        for d, r in history.items()
        if until is None or d <= until
        for g in r.groups
    )


def key_origins(
    ctx: DiagnosisContext,
    effect: JoinEffect,
    join: ParsedJoin | None,
    keys: list[KeyGap],
    day: date,
    total: RecordedTotal,
    source_total: RecordedTotal,
) -> list[KeyOrigin]:
    graph = ctx.graph
    target_history = ctx.history.metric_history(total.name, day, HISTORY_DAYS)
    source_history = ctx.history.metric_history(source_total.name, day, HISTORY_DAYS)
    right_key = graph.key_for_table(effect.right) if effect.right else None
    on = join.on if join is not None else []
    values = [k.values for k in keys if all(v is not None for v in k.values)]

    # Each Source table the key is read from (each input of a union of registers): when its rows first
    # appear in any of them, and whether any of the reference's holds it still.
    sources = _left_sources(graph, join)
    seen: dict[Keys, tuple[date | None, str]] = {}
    for source, columns in sources:
        for k, first in first_seen_in_rows(ctx, source, columns, values).items():
            if k not in seen or (first is not None and (seen[k][0] is None or first < seen[k][0])):
                seen[k] = (first, source)
    references: list[tuple[str, list[str]]] = []
    present: dict[Keys, int] | None = None
    if on and right_key is not None:
        references = key_tables(graph, right_key, [r for _, r in on]) or [(right_key, [r for _, r in on])]
        counts = [rows_on_table(ctx, reference, columns, values) for reference, columns in references]
        # Unmeasured in one of them: whether the key is held is not known.
        if all(c is not None for c in counts):
            present = {k: sum(c.get(k, 0) for c in counts) for c in counts for k in c}  # type: ignore[union-attr]
    where = " or ".join(s for s, _ in sources) or effect.left
    # The key was there before only if it was by the target's last good night: rows first seen on the
    # incident's first night are new on its second night too. No recorded night: before tonight.
    good = last_good_night(ctx, target_history, day) if target_history else None
    until = good.business_date if good is not None else day - timedelta(days=1)
    ref_table = " or ".join(table(graph, r) or r for r, _ in references) or effect.right

    out = []
    for k in keys:
        if k.value is None:
            out.append(
                KeyOrigin(
                    k.model_copy(update={"change": k.change or f"{k.rows:,} rows arrive with {k.label}"}),
                    False,
                    f"{k.rows:,} of {where}'s rows arrive with {k.label}, which matches nothing",
                )
            )
            continue
        first, source = seen.get(k.values, (None, where))
        matched_before = _in_history(target_history, k.column, k.value)
        in_source_before = (first is not None and first <= until) or _in_history(
            source_history, k.column, k.value, until
        )
        # The join's own condition excludes a row that is on the reference side: a changed row, whatever
        # the histories say.
        excluded = join is not None and bool(k.change)
        if excluded or matched_before or in_source_before:
            since = (
                f" (its rows in {source} date back to {first.isoformat()})" if first and first < day else ""
            )
            kept = not k.change and present is not None and bool(present.get(k.values))
            if excluded:
                story = f"used to match and no longer does: its row is {k.change}{since}"
            elif present is not None and present.get(k.values):
                story = f"used to match and no longer does: its row in {ref_table} changed{since}"
            elif present is not None:
                story = f"used to match and no longer does: its row was deleted from {ref_table}{since}"
            else:
                story = f"used to match and no longer does{since}"
            out.append(KeyOrigin(k.model_copy(update={"change": story}), True, story, kept))
        else:
            since_day = first if first is not None and first < day else day
            # A new key no reference row holds was never there to be deleted: it is missing.
            missing = present is not None and not present.get(k.values)
            story = f"is new in {source} since {since_day.isoformat()} and " + (
                f"is missing from {ref_table}"
                if missing
                else f"has no match in {effect.right or effect.left}"
            )
            # A new key whose row the reference's Source table has (it was mapped) yet the lookup node lacks:
            # the lookup's own join dropped it, one table further up (``chain.py`` walks there).
            mapped = not k.change and present is not None and bool(present.get(k.values))
            out.append(
                KeyOrigin(
                    k.model_copy(update={"change": story, "new_in_source_since": since_day}),
                    False,
                    story,
                    mapped,
                )
            )
    return out
