"""Value loss: a total fell away from its source total while the load is complete and fresh, because a join
or a filter on the path drops rows it should keep.

Every join and filter of the nodes between the source total's table and the total's is measured (one
statement each): an inner join, a join whose condition also filters the right side, a left join to a lookup
the measure is read from, a WHERE condition on the FROM table. The one whose dropped units explain the gap
is the cause; its keys that hold the gap are named, and each is told apart (``origins.py``) as a key new in
the source or a reference row deleted or changed. A key still in its lookup's Source table was dropped by
the lookup's own joins: the chain of lookups is walked (``chain.py``) to the row that really changed.
"""

from __future__ import annotations

from datetime import date, timedelta

import networkx as nx

from dw_dagster.checks.keys import KEYS_LOOKBACK_DAYS, key_change, rows_series
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.context.joins import JoinParseError, ParsedJoin, parse_node
from dw_dagster.incidents.chain import UpstreamDrop, dropped_upstream
from dw_dagster.incidents.evidence import (
    DiagnosisContext,
    counted_on,
    measure_column,
    reference_systems,
    traced,
    traced_left,
)
from dw_dagster.incidents.joins import measure_filter, measure_join, unmatched_rows_query
from dw_dagster.incidents.origins import KeyOrigin, key_origins
from dw_dagster.incidents.structure import derives_from, is_time, source_column
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, JoinEffect, KeyGap
from dw_dagster.records.keys import same_key, split_label

MAX_NAMED_KEYS = 5


def _measured_joins(
    ctx: DiagnosisContext, path: list[str], total: RecordedTotal
) -> list[tuple[JoinEffect, ParsedJoin | None]]:
    measure, item = measure_column(total), total.item_key
    out: list[tuple[JoinEffect, ParsedJoin | None]] = []
    for key in path[1:]:
        info = ctx.graph.info(key)
        if not info.join:
            continue
        try:
            node = parse_node(key, info.join, ctx.resolve_table)
        except JoinParseError as e:
            ctx.note(f"{e}; its joins and filters were not measured")
            continue
        for join in node.joins:
            left_key = ctx.graph.key_for_table(join.left_table)
            right_key = ctx.graph.key_for_table(join.right_table)
            node_measure = traced(ctx, total.asset, measure, key)
            # A left join loses value only where the measure is read from the right side (a lookup), and
            # not through a default: a row that finds no right row keeps its value with the default.
            reads_right = (
                node_measure is not None
                and right_key is not None
                and derives_from(ctx.graph, (key, node_measure), right_key)
                and not _defaulted_right(ctx, key, node_measure, join, right_key)
            )
            if join.kind not in ("INNER", "CROSS") and not (join.kind == "LEFT" and reads_right):
                continue
            left_measure = _on_left(ctx, total, measure, join)
            left_item = _on_left(ctx, total, item, join)
            count = counted_on(ctx, total, left_key, left_measure) if left_key else None
            with ctx.purpose(f"rows {key}'s {join.kind} join to {join.right_table} drops"):
                try:
                    effect = measure_join(ctx.cursor, key, join, left_measure, left_item, count=count)
                except Exception as e:  # noqa: BLE001 - recorded in the trail; the other joins still count
                    ctx.note(f"{key}: its join to {join.right_table} could not be measured: {e}")
                    continue
            if effect.dropped_rows:
                out.append((effect, join))
        for flt in node.filters:
            from_key = ctx.graph.key_for_table(flt.table)
            if from_key is None or any(is_time(ctx.graph, from_key, c) for c in flt.columns):
                continue  # a window on time leaves out every other day by design
            with ctx.purpose(f"rows {key}'s condition {flt.condition} leaves out"):
                try:
                    on_from = traced(ctx, total.asset, measure, from_key)
                    effect = measure_filter(
                        ctx.cursor,
                        key,
                        flt,
                        on_from,
                        traced(ctx, total.asset, item, from_key),
                        counted_on(ctx, total, from_key, on_from),
                    )
                except Exception as e:  # noqa: BLE001 - recorded in the trail
                    ctx.note(f"{key}: its condition {flt.condition} could not be measured: {e}")
                    continue
            if effect.dropped_rows:
                out.append((effect, None))
    return out


def _defaulted_right(ctx: DiagnosisContext, key: str, column: str, join: ParsedJoin, right_key: str) -> bool:
    """Whether ``key``'s ``column`` reads every column of the join's right side it reads only through a
    default (``"L"."AMOUNT" * COALESCE("R"."SHARE", 1)``): a left join keeps the rows that find no right row,
    with the default. It may change their value; it drops none of it."""
    read = ctx.graph.info(key).transform_of(column)
    if read is None or not read.defaulted:
        return False
    alias = join.right_alias.upper()
    defaulted = {c.upper() for a, c in read.defaulted if a.upper() in ("", alias)}
    right = [c for t, c in ctx.graph.column_sources((key, column)) if t == right_key]
    return bool(right) and all(c.upper() in defaulted for c in right)


def _on_left(ctx: DiagnosisContext, total: RecordedTotal, column: str | None, join: ParsedJoin) -> str | None:
    """The total's ``column`` as the join's left side reads it: the left table's, or a union of registers';
    else, where the rows that
    reach the join are read (a range on an earlier table's date), an earlier table's, as ``"ALIAS.COLUMN"``:
    the units a dimension's join drops are then the fact's, not a count of rows."""
    on_left = traced_left(ctx, total.asset, column, join)
    found = on_left[0] if on_left else None
    if found is not None or join.reaching is None:
        return found
    for alias, _, table in join.reaching.tables:
        earlier = traced(ctx, total.asset, column, ctx.graph.key_for_table(table))
        if earlier is not None:
            return f"{alias}.{earlier}"
    return None


def _rows_went(
    ctx: DiagnosisContext, join: ParsedJoin | None, excluded: list[KeyGap], day: date
) -> list[KeyOrigin]:
    """The right side's rows that went tonight, when the join's relations leave keys with no row they meet
    though other rows of the key are on the right (a type-2 dimension's current version deleted, its closed
    one kept): the join's key says which left rows went, the right table's own recorded keys (its ``rows:``
    series, or its Source table's) name the row that went."""
    right_key = ctx.graph.key_for_table(join.right_table) if join is not None and join.relations else None
    if join is None or right_key is None or not excluded:
        return []
    behind = source_column(ctx.graph, (right_key, join.on[0][1]))
    for asset in dict.fromkeys([right_key, *([behind[0]] if behind else [])]):
        past = ctx.history.metric_history(rows_series(asset), day + timedelta(days=1), KEYS_LOOKBACK_DAYS)
        if day not in past:
            continue
        went = key_change("", past[day].groups, {d: r for d, r in past.items() if d < day}).went
        if not went:
            continue
        lost = ", ".join(k.label for k in excluded)
        meet = " AND ".join(r.shown for r in join.relations)
        story = f"went from {asset} tonight, so {lost} has no row of {join.right_table} that meets {meet}"
        # One row that went holds the whole loss; of several, which holds what is not known.
        one = len(went) == 1
        return [
            KeyOrigin(
                KeyGap(
                    column=column,
                    value=value,
                    units=sum(k.units for k in excluded) if one else 0.0,
                    rows=sum(k.rows for k in excluded) if one else 0,
                    change=story,
                ),
                True,
                story,
            )
            for column, value in (split_label(label) for label in went[:MAX_NAMED_KEYS])
        ]
    return []


def _explaining(effects: list[tuple[JoinEffect, ParsedJoin | None]], gap: float):
    """The join or filter whose dropped units come closest to the gap (a filter that leaves out far more
    than the gap every night is by design, not the cause)."""
    fits = [(e, j) for e, j in effects if e.dropped_units <= 3 * gap or j is not None]
    return min(fits, key=lambda ej: abs(ej[0].dropped_units - gap), default=None)


def _gap_keys(effect: JoinEffect, rec: dict, gap: float) -> list[KeyGap]:
    """The keys that hold tonight's gap: those whose group's gap changed, when the join's key is a group
    key of the reconciliation; else the largest, until they cover the gap."""
    groups = rec.get("groups") or []
    changed = [
        g
        for g in effect.unmatched
        if any(same_key(x["group"], g.column, g.value) and abs(x.get("gap_change") or 0) > 0 for x in groups)
    ]
    if changed:
        return changed[:MAX_NAMED_KEYS]
    out: list[KeyGap] = []
    covered = 0.0
    for g in sorted(effect.unmatched, key=lambda k: -abs(k.units)):
        out.append(g)
        covered += g.units
        if len(out) >= MAX_NAMED_KEYS or covered >= 0.9 * gap:
            break
    return out


def diagnose_gap(
    incident: Incident, finding: Finding, total: RecordedTotal, ctx: DiagnosisContext
) -> Diagnosis | None:
    """Value loss or a reference-data change on the path, or None when no join or filter explains the gap."""
    rec = finding.evidence["reconciliation"]
    # One source total, declared; or the several an implied reconciliation sums (a UNION's inputs), largest
    # first: the joins between each of them and the total.
    declared = total.reconcile_with.total if total.reconcile_with else None
    sources = [ctx.metrics.get(n) for n in rec.get("sources") or [rec.get("source") or declared]]
    source = sources[0]
    path = ctx.graph.path(source.asset, total.asset)
    if len(sources) > 1:
        between = {n for s in sources for n in ctx.graph.path(s.asset, total.asset)}
        path = list(nx.topological_sort(ctx.graph.assets.subgraph(between)))
    gap = float(rec["gap_change"])
    if gap <= 0:
        # The total rose above what its sources give (or they fell beneath it): rows a join or a filter drops
        # make a total fall short of its sources, never exceed them, so none on the path explains this gap.
        ctx.note(f"{total.name} is above its sources by {-gap:,.2f} units: not a loss in a join or filter")
        return None
    evidence: dict[str, float | int | str] = {
        "gap_units": gap,
        "target_change_pct": rec.get("target_change_pct") or 0.0,
        "source_change_pct": rec.get("source_change_pct") or 0.0,
    }
    return _through_joins(incident, finding.business_date, total, source, ctx, path, gap, rec, evidence)


def diagnose_fall(
    incident: Incident,
    finding: Finding,
    total: RecordedTotal,
    ctx: DiagnosisContext,
    fall: float,
    evidence: dict[str, float | int | str],
) -> Diagnosis | None:
    """A total with no source total that fell while its rows held: the joins and filters of every node it
    is built from are measured the same way (the fall stands for the gap, in the total's units); None when
    none drops rows."""
    upstream = ctx.graph.assets.subgraph(ctx.graph.upstream(total.asset) | {total.asset})
    path = list(nx.topological_sort(upstream))
    evidence = {**evidence, "fall_units": fall}
    return _through_joins(incident, finding.business_date, total, total, ctx, path, fall, {}, evidence)


def _through_joins(
    incident: Incident,
    day: date,
    total: RecordedTotal,
    source: RecordedTotal,
    ctx: DiagnosisContext,
    path: list[str],
    gap: float,
    rec: dict,
    evidence: dict[str, float | int | str],
) -> Diagnosis | None:
    found = _explaining(_measured_joins(ctx, path, total), gap)
    if found is None:
        return None
    effect, join = found
    keys = _gap_keys(effect, rec, gap)
    if not keys:
        return None
    went = _rows_went(ctx, join, [k for k in keys if k.change], day)
    origins = went + key_origins(ctx, effect, join, keys, day, total, source)
    keys = [o.key for o in origins]
    top = max(origins, key=lambda o: abs(o.key.units))
    evidence.update({"dropped_units": effect.dropped_units, "dropped_rows": effect.dropped_rows})
    right_key = ctx.graph.key_for_table(effect.right) if effect.right else None
    # Keys the lookup's Source table holds but the lookup node does not (a changed row, or a new key mapped
    # to a parent the next table lacks): dropped by the lookup's own joins, further up.
    kept = [o.key.value for o in origins if o.in_reference]
    upper = (
        dropped_upstream(ctx, right_key, join.on[0][1], kept)
        if right_key is not None and join is not None and len(join.on) == 1 and kept
        else None
    )
    if upper is not None:
        if not any(o.reference_changed for o in origins if o.in_reference):
            # New keys mapped to a parent the next table lacks: its row was never added, not deleted.
            lower = ", ".join(o.key.label for o in origins if o.in_reference)
            upper.keys = [
                k.model_copy(
                    update={
                        "change": (k.change or "").replace("its row was deleted from", "no row in")
                        + f" ({lower}, new, point at it)"
                    }
                )
                for k in upper.keys
            ]
        return _upstream_diagnosis(incident, total, effect, join, keys, upper, evidence, path, ctx)
    klass = CauseClass.REFERENCE_DATA_CHANGE if top.reference_changed else CauseClass.VALUE_LOSS
    items = f" over {top.key.distinct_items:,} items" if top.key.distinct_items else ""
    where = (
        f"{effect.asset_key} {effect.join_type.lower()}-joins {effect.left} to {effect.right} on "
        f"{', '.join(effect.on)}"
        if join is not None
        else f"{effect.asset_key} filters {effect.left} with {', '.join(effect.on)}"
    )
    also = f" ({len(keys) - 1} more key{'s' if len(keys) > 2 else ''} listed)" if len(keys) > 1 else ""
    cause = (
        f"{where}; {top.key.label} {top.story}, so its {top.key.units:,.0f} units{items} drop out of "
        f"{total.name}{also}. The load is complete and fresh: the loss is in values."
    )
    owners = ctx.graph.owners_on(
        [effect.asset_key, *([right_key] if right_key else []), *reference_systems(ctx, right_key)]
    )
    if evidence.get("gap_units") and abs(effect.dropped_units - gap) > 0.1 * abs(gap):
        ctx.note(
            f"the join explains {effect.dropped_units:,.0f} of the {gap:,.0f} units of the gap; the rest is "
            "not attributed"
        )
    left_key = ctx.graph.key_for_table(effect.left)
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=klass,
        cause=cause,
        evidence=evidence,
        keys=keys,
        joins=[effect],
        upstream_change=f"{top.key.label} {top.story}",  # the key is the sentence's subject
        cause_asset=effect.asset_key,
        path=path,
        test_query=_unmatched_rows(ctx, total, join, left_key),
        owners=owners,
    )


def _upstream_diagnosis(
    incident: Incident,
    total: RecordedTotal,
    effect: JoinEffect,
    join: ParsedJoin | None,
    lost: list[KeyGap],
    upper: UpstreamDrop,
    evidence: dict,
    path: list[str],
    ctx: DiagnosisContext,
) -> Diagnosis:
    """A reference row deleted or changed further up the lookups: the fact's join drops keys its lookup no
    longer carries, because the lookup's own join drops them."""
    units = sum(k.units for k in lost)
    named = [k.model_copy(update={"units": units if len(upper.keys) == 1 else k.units}) for k in upper.keys]
    top = named[0]
    lower = ", ".join(k.label for k in lost)
    story = f"{top.label}: {top.change}"
    lost = [k.model_copy(update={"change": f"{upper.node} no longer carries it ({story})"}) for k in lost]
    cause = (
        f"{upper.node} {upper.join.kind.lower()}-joins {upper.effect.left} to {upper.effect.right} on "
        f"{', '.join(upper.effect.on)}; {story}, so {upper.node} no longer carries {lower}, "
        f"{effect.asset_key}'s {effect.join_type.lower()} join to {effect.right} drops them, and their "
        f"{units:,.0f} units drop out of {total.name}. The load is complete and fresh: the loss is in values."
    )
    right_key = ctx.graph.key_for_table(effect.right) if effect.right else None
    owners = ctx.graph.owners_on(
        [
            effect.asset_key,
            upper.node,
            *([right_key] if right_key else []),
            *reference_systems(ctx, upper.reference),
        ]
    )
    left_key = ctx.graph.key_for_table(effect.left)
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.REFERENCE_DATA_CHANGE,
        cause=cause,
        evidence={**evidence, "reference_table": upper.reference, "lookup_node": upper.node},
        keys=[*named[:MAX_NAMED_KEYS], *lost],
        joins=[effect, upper.effect],
        upstream_change=story,
        cause_asset=upper.node,
        path=path,
        test_query=_unmatched_rows(ctx, total, join, left_key),
        owners=owners,
    )


__all__ = ["KeyOrigin", "diagnose_fall", "diagnose_gap"]


def _unmatched_rows(
    ctx: DiagnosisContext, total: RecordedTotal, join: ParsedJoin | None, left_key: str | None
) -> str | None:
    """The query a person runs to see the rows the join drops, in the join's left table's own columns."""
    if join is None:
        return None
    measure = _on_left(ctx, total, measure_column(total), join)
    count = counted_on(ctx, total, left_key, measure) if left_key else None
    return unmatched_rows_query(join, measure, _on_left(ctx, total, total.item_key, join), count)
