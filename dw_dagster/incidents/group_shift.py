"""A shift between groups: a total held while its groups moved (one lost what another gained), traced to the
reference rows that changed.

The group column is followed through column lineage to the join that brings it (the join whose right side
the column is read from): that join's key is what a reference row maps to a group. Tonight's mapping is read
from the joining node's table, by key and group (one statement); a key now in a group that gained, whose
units match what the losing group lost (within 15%), is the key whose reference row was pointed elsewhere.
Where a recorded total is grouped by that key, its last good night says the same from the other side.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.coalesce.sql import quote_identifier
from dw_dagster.incidents.evidence import DiagnosisContext, measure_column, reference_systems, traced
from dw_dagster.incidents.joins import JoinParseError, ParsedJoin, parse_node
from dw_dagster.incidents.keys import plain, split_label
from dw_dagster.incidents.models import CauseClass, Diagnosis, Incident, KeyGap
from dw_dagster.incidents.structure import derives_from, source_column, table

MOVED = 0.05
"""A group's share of the total moved by more than 5 points."""
MATCH = 0.15


@dataclass
class Shift:
    group_column: str
    lost: dict[str, float]
    gained: dict[str, float]
    node: str
    join: ParsedJoin
    keys: list[KeyGap]
    reference: str | None
    owners: list[str]


def moved_groups(tonight: Recorded, before: Recorded) -> tuple[dict[str, float], dict[str, float]] | None:
    """(lost, gained) by group, in tonight's units, when groups' shares of the total moved (by shares: the
    day's level may differ from the last good night's by its weekday); None otherwise."""
    if not before.value or not tonight.value:
        return None
    groups = set(tonight.groups) | set(before.groups)
    change = {
        g: tonight.groups.get(g, 0.0) / tonight.value - before.groups.get(g, 0.0) / before.value
        for g in groups
    }
    lost = {g: -c * tonight.value for g, c in change.items() if c < -MOVED}
    gained = {g: c * tonight.value for g, c in change.items() if c > MOVED}
    return (lost, gained) if lost and gained else None


def _carrying_join(
    ctx: DiagnosisContext, total: RecordedTotal, column: str
) -> tuple[str, ParsedJoin, str] | None:
    """The node, join and node column that bring the group column from a join's right side."""
    graph = ctx.graph
    for key in [total.asset, *sorted(graph.upstream(total.asset), key=lambda k: -len(graph.upstream(k)))]:
        info = graph.info(key)
        if not info.join:
            continue
        node_column = traced(ctx, total.asset, column, key)
        if node_column is None:
            continue
        try:
            joins = parse_node(key, info.join, ctx.resolve_table).joins
        except JoinParseError as e:
            ctx.note(f"{e}; the group's join was not traced")
            continue
        for join in joins:
            right = graph.key_for_table(join.right_table)
            if right is not None and derives_from(graph, (key, node_column), right):
                return key, join, node_column
    return None


def _per_key(ctx: DiagnosisContext, key_column: str, before: Recorded) -> Recorded | None:
    """The last good night of a recorded total grouped by the join's key, if the metrics file has one."""
    for t in ctx.metrics.totals:
        if key_column.upper() in (g.upper() for g in t.group_keys):
            return ctx.history.metric_history(t.name, before.business_date + timedelta(days=1), 1).get(
                before.business_date
            )
    return None


def trace_shift(
    ctx: DiagnosisContext, total: RecordedTotal, tonight: Recorded, before: Recorded
) -> Shift | None:
    moved = moved_groups(tonight, before)
    if moved is None or not total.group_keys:
        return None
    lost, gained = moved
    group_column = total.group_keys[0]
    found = _carrying_join(ctx, total, group_column)
    if found is None:
        return None
    node, join, node_group = found
    left_key, right_key = join.on[0]
    left = ctx.graph.key_for_table(join.left_table)
    key_column = next(
        (c for c in ctx.graph.info(node).columns if (left, left_key) in ctx.graph.column_sources((node, c))),
        left_key,
    )
    measure = traced(ctx, total.asset, measure_column(total), node)
    tbl = table(ctx.graph, node)
    if tbl is None or key_column not in ctx.graph.info(node).columns:
        return None
    per_key = _per_key(ctx, key_column, before)
    value = f"SUM({quote_identifier(measure)})" if measure else "COUNT(*)"
    rows = ctx.rows(
        f"{node}'s {key_column} by {node_group} tonight",
        f"SELECT {quote_identifier(key_column)}, {quote_identifier(node_group)}, {value} FROM {tbl}"
        f" GROUP BY 1, 2",
    )
    gained_groups = {split_label(g)[1] for g in gained}
    keys = []
    for g, amount in sorted(lost.items(), key=lambda kv: -kv[1]):
        for k, grp, v in rows or []:
            v = float(v or 0)
            # Tonight's units of the key match what the group lost; or its share on the last good night
            # (a total grouped by the key) matches the share the group lost.
            share = amount / tonight.value if tonight.value else 0.0
            earlier = per_key.groups.get(f"{key_column}={plain(k)}") if per_key and per_key.value else None
            matches = abs(v - amount) <= MATCH * amount or (
                earlier is not None and abs(earlier / per_key.value - share) <= MATCH * share  # type: ignore[union-attr, operator]
            )
            if plain(grp) in gained_groups and matches:
                _, was = split_label(g)
                keys.append(
                    KeyGap(column=key_column, value=plain(k), units=v, rows=0,
                           change=f"its reference row now maps it to {node_group}={plain(grp)}; it was in {group_column}={was}")
                )  # fmt: skip
    right = ctx.graph.key_for_table(join.right_table)
    ref = source_column(ctx.graph, (right, right_key)) if right else None
    owners = ctx.graph.owners_on([node, *([right] if right else []), *reference_systems(ctx, right)])
    return Shift(group_column, lost, gained, node, join, keys[:5], ref[0] if ref else right, owners)


def shift_diagnosis(
    incident: Incident, total: RecordedTotal, shift: Shift, ctx: DiagnosisContext, evidence: dict
) -> Diagnosis:
    lost = ", ".join(f"{g} lost {v:,.0f}" for g, v in shift.lost.items())
    gained = ", ".join(f"{g} gained {v:,.0f}" for g, v in shift.gained.items())
    named = "; ".join(f"{k.label}: {k.change}" for k in shift.keys) or "no single key carries the moved units"
    where = table(ctx.graph, shift.reference) if shift.reference else shift.join.right_table
    cause = (
        f"{total.name} held while its groups moved ({lost}; {gained}): {shift.node} takes {shift.group_column} "
        f"from {shift.join.right_table}, so a reference row in {where} was pointed at another group. {named}."
    )
    start = shift.reference or total.asset
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.REFERENCE_DATA_CHANGE,
        cause=cause,
        evidence={**evidence, "groups_lost": lost, "groups_gained": gained},
        keys=shift.keys,
        upstream_change=f"reference rows of {where} changed group" + (f": {named}" if shift.keys else ""),
        path=ctx.graph.path(start, total.asset)
        if start in ctx.graph and start != total.asset
        else [total.asset],
        owners=shift.owners,
    )
