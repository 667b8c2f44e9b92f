"""A shift between groups: a total held while its groups moved (one lost what another gained), traced to the
reference rows that changed.

The group column is followed through column lineage to the join that brings it (the join whose right side
the column is read from), and on through the lookups behind it (``chain.py``): each of their keys is what a
reference row may map to a group. Tonight's mapping is read from the joining node's table by every key and
the group (one statement); furthest up first, a key now wholly in a group that gained, whose units match
what the losing group lost (within 15%), is the key whose reference row was pointed elsewhere. Where a
recorded total is grouped by that key, its last good night says the same from the other side.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.coalesce.sql import quote_identifier
from dw_dagster.incidents.chain import chain_keys
from dw_dagster.incidents.evidence import DiagnosisContext, measure_column, reference_systems, traced
from dw_dagster.incidents.joins import JoinParseError, ParsedJoin, parse_node
from dw_dagster.incidents.keys import plain, split_label
from dw_dagster.incidents.models import CauseClass, Diagnosis, Incident, KeyGap
from dw_dagster.incidents.structure import derives_from, table

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
    tbl = table(ctx.graph, node)
    levels = chain_keys(ctx, node, join)
    if tbl is None or not levels:
        return None
    measure = traced(ctx, total.asset, measure_column(total), node)
    value = f"SUM(F.{quote_identifier(measure)})" if measure else "COUNT(*)"
    columns = ", ".join(f"{'D' if lv.on_lookup else 'F'}.{quote_identifier(lv.column)}" for lv in levels)
    lookup = table(ctx.graph, ctx.graph.key_for_table(join.right_table) or "")
    on_lookup = (
        f" LEFT JOIN {lookup} D ON D.{quote_identifier(join.on[0][1])} = F.{quote_identifier(levels[0].column)}"
        if lookup and any(lv.on_lookup for lv in levels)
        else ""
    )
    rows = ctx.rows(
        f"{node}'s {', '.join(lv.column for lv in levels)} by {node_group} tonight",
        f"SELECT {columns}, F.{quote_identifier(node_group)}, {value} FROM {tbl} F{on_lookup}"
        f" GROUP BY {', '.join(str(i + 1) for i in range(len(levels) + 1))}",
    )
    gained_groups = {split_label(g)[1] for g in gained}
    # Furthest up the lookups first: a row there moves every key below it at once, so a key of a nearer
    # lookup carries only part of what the group lost.
    for i in reversed(range(len(levels))):
        key_column, reference = levels[i].column, levels[i].reference
        units: dict[tuple, float] = {}
        for row in rows or []:
            k, grp = plain(row[i]), plain(row[len(levels)])
            units[(k, grp)] = units.get((k, grp), 0.0) + float(row[-1] or 0)
        keys = _matching(
            ctx, key_column, units, lost, gained_groups, tonight, before, node_group, total, reference
        )
        if keys:
            break
    else:
        reference, keys = levels[0].reference, []
    right = ctx.graph.key_for_table(join.right_table)
    owners = ctx.graph.owners_on(
        [node, *([right] if right else []), *([reference] if reference != right else []),
         *reference_systems(ctx, reference)]
    )  # fmt: skip
    return Shift(group_column, lost, gained, node, join, keys[:5], reference, owners)


def _matching(
    ctx: DiagnosisContext, key_column: str, units: dict[tuple, float], lost: dict[str, float],
    gained_groups: set, tonight: Recorded, before: Recorded, node_group: str, total: RecordedTotal,
    reference: str,
) -> list[KeyGap]:  # fmt: skip
    """The key (of one lookup) now wholly in a group that gained whose units tonight come closest to what a
    losing group lost (within 15%), one per losing group; or whose share on the last good night (a total
    grouped by the key) matches its share. The closest, not every one within 15%: the gaining group's own
    keys may be of a similar size, while the key that moved carries what the group lost to the unit."""
    per_key = _per_key(ctx, key_column, before)
    by_key: dict = {}
    for (k, _), v in units.items():
        by_key[k] = by_key.get(k, 0.0) + v
    where = table(ctx.graph, reference) or reference
    keys = []
    for g, amount in sorted(lost.items(), key=lambda kv: -kv[1]):
        share = amount / tonight.value if tonight.value else 0.0
        _, was = split_label(g)
        for (k, grp), v in sorted(units.items(), key=lambda kv: abs(kv[1] - amount)):
            if grp not in gained_groups or not v or abs(v - by_key[k]) > 0.01 * abs(by_key[k]):
                continue
            earlier = per_key.groups.get(f"{key_column}={k}") if per_key and per_key.value else None
            matches = abs(v - amount) <= MATCH * amount or (
                earlier is not None and abs(earlier / per_key.value - share) <= MATCH * share  # type: ignore[union-attr, operator]
            )
            if matches:
                keys.append(
                    KeyGap(column=key_column, value=k, units=v, rows=0,
                           change=f"its row in {where} now maps it to {node_group}={grp}; it was in {total.group_keys[0]}={was}")
                )  # fmt: skip
                break
    return keys


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
