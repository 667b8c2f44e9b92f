"""Blast radius: every asset and consumer downstream of the failing one, with its owners, what changed in
numbers tonight, and when a person reads it next."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import networkx as nx
from croniter import croniter

from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.joins import JoinParseError
from dw_dagster.incidents.evidence import DiagnosisContext, last_good
from dw_dagster.incidents.joins import parse_joins, unmatched_from
from dw_dagster.records.incidents import AffectedAsset, BlastRadius, Diagnosis
from dw_dagster.sql import quote_identifier, table_parts, table_reference

MAX_FLAGGED = 5000


def next_read(reads: tuple[dict, ...], after: datetime) -> str | None:
    """The soonest scheduled read after ``after``, e.g. '09:00 sales review, Tue 2025-06-17 09:00
    Europe/Paris'."""
    best: tuple[datetime, str] | None = None
    for read in reads:
        tz = ZoneInfo(read.get("timezone", "UTC"))
        at = croniter(read["cron"], after.astimezone(tz)).get_next(datetime)
        if best is None or at < best[0]:
            best = (at, f"{read['what']}, {at:%a %Y-%m-%d %H:%M} {read.get('timezone', 'UTC')}")
    return best[1] if best else None


def _morning_after(day: date, metrics: MetricsFile) -> datetime:
    tz = ZoneInfo(metrics.business_day.timezone)
    return datetime(day.year, day.month, day.day, tzinfo=tz) + timedelta(
        days=1, hours=metrics.business_day.cutoff_hour
    )


def blast_radius(start: str, day: date, diagnosis: Diagnosis, ctx: DiagnosisContext) -> BlastRadius:
    graph = ctx.graph
    downstream = graph.downstream(start) if start in graph else set()
    order = [k for k in nx.topological_sort(graph.assets.subgraph(downstream))]
    after = _morning_after(day, ctx.metrics)
    totals_by_asset: dict[str, list] = {}
    for t in ctx.metrics.totals:
        totals_by_asset.setdefault(t.asset, []).append(t)

    assets: list[AffectedAsset] = []
    newly_flagged: list[str] = []
    summary: dict[str, float | int | str] = {"downstream_assets": len(order)}
    affected_items = _affected_items_sql(diagnosis, ctx)
    for key in order:
        info = graph.info(key)
        change: dict[str, Any] = {}
        for total in totals_by_asset.get(key, []):
            history = ctx.history.metric_history(total.name, day + timedelta(days=1), 120)
            tonight, before = history.get(day), last_good(history, day)
            if tonight is None or before is None:
                continue
            change[total.name] = {"before": before.value, "after": tonight.value}
            summary[f"{total.name}_before"] = before.value or 0
            summary[f"{total.name}_after"] = tonight.value or 0
            if total.group_keys and total.hurts.value in ("up", "both"):
                flagged = sorted(g.partition("=")[2] for g in set(tonight.groups) - set(before.groups))
                newly_flagged.extend(flagged[:MAX_FLAGGED])
                change[total.name]["newly_flagged"] = len(flagged)
        if affected_items and info.table_name and "coalesce" in info.kinds:
            rows = _rows_for_items(ctx, key, *affected_items)
            if rows is not None:
                change["rows_affected"] = rows
        assets.append(
            AffectedAsset(
                asset_key=key,
                name=(info.description.splitlines()[0] if info.description else key),
                kind=sorted(info.kinds)[0] if info.kinds else "asset",
                owners=list(info.owners),
                change=change,
                next_read=next_read(info.reads, after),
            )
        )
    summary["newly_flagged"] = len(newly_flagged)
    summary["consumers"] = sum(1 for a in assets if a.next_read)
    return BlastRadius(assets=assets, newly_flagged=newly_flagged, summary=summary)


def _affected_items_sql(diagnosis: Diagnosis, ctx: DiagnosisContext) -> tuple[str, tuple[str, str]] | None:
    """A subquery of the items in tonight's gap, and the (asset, column) it lists, when a join drop is the
    cause: the item column of the left side of the join."""
    if not diagnosis.joins or not diagnosis.joins[0].right:
        return None
    effect = diagnosis.joins[0]
    info = ctx.graph.info(effect.asset_key)
    try:
        parsed = parse_joins(info.join or "", ctx.resolve_table, effect.asset_key)
    except JoinParseError:
        return None  # the diagnosis says so; the radius goes without the rows about the items
    join = next((j for j in parsed if j.left_table == effect.left and j.right_table == effect.right), None)
    left_key = ctx.graph.key_for_table(effect.left)
    item_totals = [t for t in ctx.metrics.totals if t.item_key]
    if join is None or left_key is None or not item_totals:
        return None
    traced = ctx.graph.trace_column((item_totals[0].asset, item_totals[0].item_key), left_key)  # type: ignore[arg-type]
    if traced is None:
        return None
    return f"SELECT DISTINCT L.{quote_identifier(traced[1])} {unmatched_from(join)}", traced


def _rows_for_items(
    ctx: DiagnosisContext, key: str, items_sql: str, item_column: tuple[str, str]
) -> int | None:
    """Rows of ``key`` about the items in the gap: its column derived from the item column through column
    lineage, else its column of the same name (a mart may take the item id from the items' own table)."""
    graph = ctx.graph
    derived = (
        [c[1] for c in nx.descendants(graph.columns, item_column) if c[0] == key]
        if item_column in graph.columns
        else []
    )
    column = (
        derived[0] if derived else (item_column[1] if item_column[1] in graph.info(key).columns else None)
    )
    if column is None:
        return None
    table = table_reference(*table_parts(graph.info(key).table_name))  # type: ignore[misc]
    try:
        ctx.cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE {quote_identifier(column)} IN ({items_sql})")
        return int(ctx.cursor.fetchone()[0])
    except Exception as e:  # noqa: BLE001 - a count that cannot be taken is left out of the radius, not the alert
        ctx.note(f"{key}: its rows about the items could not be counted: {e}")
        return None
