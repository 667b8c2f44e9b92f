"""A shift between groups: a total held while its groups moved (one lost what another gained), traced to the
reference rows that changed. The groups are those the finding's check judged moved against their own history
(``judged_groups``), whatever their share of the total: a small group gone is a shift of a few share points.

The group column is followed through column lineage to the join that brings it (the join whose right side
the column is read from), and on through the lookups behind it (``chain.py``): each of their keys is what a
reference row may map to a group. Tonight's mapping is read from the joining node's table by every key and
the group (one statement). Nothing keeps a key's group of the night before, so a key is named moved only on
evidence, furthest up the lookups first:

- where the node keeps its rows by a DATE column and still holds the last good night's (``_moved_since``),
  that night's rows mapped as tonight differ from the totals recorded that night by exactly the units of
  the keys that moved: the key whose units that night are a gaining group's excess and a losing group's
  shortfall moved from the one to the other, however many keys of its new group are of its size;
- otherwise (a table of the latest day only) only sizes are left (``_matching``): the keys now wholly in a
  gaining group whose units tonight are what a losing group lost, within that group's own noise (its
  shares' spread on the good nights), are named as what may have moved, every one alike, and the text
  claims no former group for any. Where a recorded total is grouped by that key, its last good night's
  share says the same from the other side.

Where no key carries the move, no shift is traced: the finding's other evidence is read instead (a group
that lost alone raised the others' shares, and that is a loss). An attribute that is itself a join key is
then named by its own values (``_key_shift``): the rows that hold it were re-pointed upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from statistics import mean, median, pstdev
from typing import Any

from dw_dagster.checks.attributes import carried_keys, root_columns, root_tables
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.coalesce.transforms import COUNT_ROWS, PER_KEY
from dw_dagster.context.joins import JoinParseError, ParsedJoin, parse_node
from dw_dagster.incidents.chain import Level, chain_keys
from dw_dagster.incidents.drilldown import NOISE_Z
from dw_dagster.incidents.evidence import (
    HISTORY_DAYS,
    DiagnosisContext,
    good_nights,
    last_good_night,
    measure_column,
    measure_columns,
    measure_sum,
    reference_systems,
    traced,
)
from dw_dagster.incidents.origins import on_table, rows_on_table
from dw_dagster.incidents.structure import derives_from, is_date, table
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.records.keys import key_label, plain, split_label, split_labels
from dw_dagster.sql import quote_identifier

MATCH = 0.15
RECORDED = 0.005
"""How nearly a node's rows of a night must sum to the total recorded that night to stand for it."""
MIN_NIGHTS = 3
"""Good nights a group's own shares need before they judge its move (when the finding judged no group)."""


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


@dataclass(frozen=True)
class Judged:
    """The groups judged to have lost and gained tonight, each against its own history: a small group that
    lost all its value moves few points of the total's share, yet it is the move."""

    lost: frozenset[str]
    gained: frozenset[str]
    spreads: Mapping[str, float] = field(default_factory=dict)
    """Each group's day-to-day spread of its share of the total, on the good nights (from ``MIN_NIGHTS``):
    what a group lost is known only to that noise."""
    levels: Mapping[str, float] = field(default_factory=dict)
    """Each group's own expected units: the median of its units on the good nights (from ``MIN_NIGHTS``)."""


def judged_groups(
    moves: Sequence[Mapping[str, Any]],
    reconciliation: Mapping[str, Any] | None,
    nights: Callable[[], Sequence[Recorded]],
    tonight: Recorded,
) -> Judged:
    """The groups the finding's check judged moved (``moves``: its ``GroupMove`` records, each against the
    group's own baseline; the reconciliation's groups whose gap to the source changed beyond its tolerance);
    when it judged none, the groups whose share tonight is beyond ``NOISE_Z`` spreads of their own shares on
    the good ``nights`` (at least ``MIN_NIGHTS``). Those spreads are kept either way: they bound how nearly a
    key's units can be known to match what a group lost."""
    lost = {str(m["group"]) for m in moves if m.get("status") in ("lost", "went")}
    gained = {str(m["group"]) for m in moves if m.get("status") == "gained"}
    if reconciliation:
        tolerance = float(reconciliation.get("tolerance") or 0.0)
        for g in reconciliation.get("groups") or []:
            change = float(g.get("gap_change") or 0.0)
            # The gap (source - target) grew: the target lost the group's units; it shrank: the target gained.
            if change > tolerance:
                lost.add(str(g["group"]))
            elif change < -tolerance:
                gained.add(str(g["group"]))
    good = nights()
    shares = _shares(good, tonight)
    spreads = {g: pstdev(v) for g, v in shares.items()}
    levels = {g: median((r.groups.get(g) or 0.0) for r in good if r.value) for g in shares}
    if lost:
        return Judged(frozenset(lost), frozenset(gained), spreads, levels)
    if not shares or not tonight.value:
        return Judged(frozenset(), frozenset(), spreads, levels)
    lost, gained = set(), set()  # the check judged no group lost: its gains alone are no shift
    for g, past in shares.items():
        now = (tonight.groups.get(g) or 0.0) / tonight.value
        # A floor of float rounding only: shares steady to the last digit still move on any real change.
        if abs(now - mean(past)) > NOISE_Z * max(spreads[g], 1e-9):
            (lost if now < mean(past) else gained).add(g)
    return Judged(frozenset(lost), frozenset(gained), spreads, levels)


def _shares(nights: Sequence[Recorded], tonight: Recorded) -> dict[str, list[float]]:
    """Each group's shares of the total on the good ``nights`` (none when fewer than ``MIN_NIGHTS``)."""
    usable = [r for r in nights if r.value]
    if len(usable) < MIN_NIGHTS:
        return {}
    return {
        g: [(r.groups.get(g) or 0.0) / r.value for r in usable]  # type: ignore[operator]
        for g in set(tonight.groups).union(*(r.groups for r in usable))
    }


def moved_groups(
    tonight: Recorded, before: Recorded, judged: Judged
) -> tuple[dict[str, float], dict[str, float]] | None:
    """(lost, gained) by group, in tonight's units, when a judged group's share of the total fell (by shares:
    the day's level may differ from the last good night's by its weekday) and others' rose; None otherwise.
    The groups that gained are the judged ones whose share rose, or when none was judged (a large group's
    gain of a small group's loss is within its own noise), every group whose share rose and whose units
    tonight are above its own expected units (``Judged.levels``; the last good night's without them) by at
    least half the smallest loss. A share is a part of the whole: a group that lost alone raises every other
    group's share while their units hold, and a loss is not a shift (nor is a rise with the total's
    rounding)."""
    if not before.value or not tonight.value:
        return None
    groups = set(tonight.groups) | set(before.groups)
    change = {
        g: tonight.groups.get(g, 0.0) / tonight.value - before.groups.get(g, 0.0) / before.value
        for g in groups
    }
    lost = {g: -c * tonight.value for g, c in change.items() if g in judged.lost and c < 0}
    if not lost:
        return None
    rose = {g: c * tonight.value for g, c in change.items() if c > 0}
    least = 0.5 * min(lost.values())
    gained = {g: v for g, v in rose.items() if g in judged.gained} or {
        g: v
        for g, v in rose.items()
        if v >= least
        and (tonight.groups.get(g) or 0.0) - judged.levels.get(g, before.groups.get(g) or 0.0) >= least
    }
    return (lost, gained) if gained else None


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


def _per_key(
    ctx: DiagnosisContext, columns: tuple[str, ...], before: Recorded
) -> tuple[Recorded, list[str]] | None:
    """The last good night of a recorded total grouped by the join's key (all its columns), if the metrics
    file has one, with its group keys in the order its labels name them."""
    wanted = {c.upper() for c in columns}
    for t in ctx.metrics.totals:
        if wanted <= {g.upper() for g in t.group_keys} and len(t.group_keys) == len(wanted):
            night = ctx.history.metric_history(t.name, before.business_date + timedelta(days=1), 1).get(
                before.business_date
            )
            return (night, t.group_keys) if night is not None else None
    return None


def _label(columns: tuple[str, ...], values: tuple, order: list[str]) -> str:
    """A key's label as a total grouped by it records it (``COLUMN=value``, a NULL as ``None``), its columns
    in the total's ``order``."""
    by = {c.upper(): v for c, v in zip(columns, values, strict=True)}
    return ", ".join(f"{g}={by[g.upper()]}" for g in order)


def trace_shift(
    ctx: DiagnosisContext, total: RecordedTotal, tonight: Recorded, before: Recorded, judged: Judged
) -> Shift | None:
    moved = moved_groups(tonight, before, judged)
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
    value = _key_units(ctx, total, node)
    if value is None:
        return None
    read = [(lv.on_lookup, c) for lv in levels for c in lv.columns]
    columns = ", ".join(f"{'D' if on_lookup else 'F'}.{quote_identifier(c)}" for on_lookup, c in read)
    lookup = table(ctx.graph, ctx.graph.key_for_table(join.right_table) or "")
    on = " AND ".join(
        f"D.{quote_identifier(r)} = F.{quote_identifier(c)}"
        for (_, r), c in zip(join.on, levels[0].columns, strict=True)
    )
    on_lookup = f" LEFT JOIN {lookup} D ON {on}" if lookup and any(lv.on_lookup for lv in levels) else ""
    select = f"SELECT {columns}, F.{quote_identifier(node_group)}"
    width = len(read) + 1
    read_what = f"{node}'s {', '.join(c for _, c in read)} by {node_group}"
    rows, last = _dated_rows(
        ctx, node, f"{tbl} F{on_lookup}", select, value, width, read_what, tonight, before
    )
    if rows is None:
        rows = ctx.rows(
            f"{read_what} tonight",
            f"{select}, {value} FROM {tbl} F{on_lookup} GROUP BY {', '.join(str(i + 1) for i in range(width))}",
        )
    # Furthest up the lookups first: a row there moves every key below it at once, so a key of a nearer
    # lookup carries only part of what the group lost.
    starts = [sum(len(lv.columns) for lv in levels[:i]) for i in range(len(levels))]
    for i in reversed(range(len(levels))):
        level = levels[i]
        units = _by_key(rows or [], starts[i], level, len(read))
        if last is not None:
            # The last good night's own rows say which key moved: no key is named by its size alone.
            keys = _moved_since(
                ctx, level, units, _by_key(last, starts[i], level, len(read)), before, node_group
            )
        else:
            keys = _matching(
                ctx, level, units, lost, gained, judged.spreads, tonight, before, node_group, total
            )
        if keys:
            reference = level.reference
            break
    else:
        # No key carries what the groups lost: a shift named by no row is no cause, and a loss read by
        # shares (a group gone raises the others') is left to the loss's own evidence.
        return None
    right = ctx.graph.key_for_table(join.right_table)
    owners = ctx.graph.owners_on(
        [
            node,
            *([right] if right else []),
            *([reference] if reference != right else []),
            *reference_systems(ctx, reference),
        ]
    )
    return Shift(group_column, lost, gained, node, join, keys[:5], reference, owners)


def _key_units(ctx: DiagnosisContext, total: RecordedTotal, node: str) -> str | None:
    """A key's units on ``node`` (as table ``F``), so they compare with what a group lost: the total's own sum
    (all its columns, e.g. net plus tax); where a column on the way from the node to the total counts the
    node's rows (a distinct count of people per group and day, which the total sums), the key's own count
    of them, a row count for a COUNT. None, noted, where an aggregate on the way is not split by key (a
    group's MAX or AVG is not the sum of its keys'): summed per key it would be a number of nothing."""
    measure = measure_column(total)
    found = traced(ctx, total.asset, measure, node)
    applied = [
        a
        for c in measure_columns(total)
        if (source := traced(ctx, total.asset, c, node)) is not None
        for a in ctx.graph.aggregates_between((node, source), (total.asset, c))
    ]
    if not applied:
        return measure_sum(ctx, total, node, "F") or (
            f"SUM(F.{quote_identifier(found)})" if found else "COUNT(*)"
        )
    (column, aggregate), *more = applied
    # The count's one argument on the node (a count of several columns is not one column's count).
    read = [a for a in ctx.graph.column_ancestors(column) if a[0] == node]
    if (
        not more
        and found
        and measure_columns(total) == [measure]
        and aggregate in PER_KEY
        and (aggregate == COUNT_ROWS or len(read) == 1)
    ):
        return PER_KEY[aggregate].format(f"F.{quote_identifier(found)}")
    ctx.note(
        f"{total.name} sums {column[0]}.{column[1]}, a {aggregate} of {node}'s rows"
        + (f", and {len(more)} more aggregate{'s' if len(more) > 1 else ''} on the way" if more else "")
        + ": not measured per key (a group's MAX or AVG is not the sum of its keys', nor is a count of"
        " several columns one column's count), so the keys that moved were not traced"
    )
    return None


def _by_key(rows: Sequence[tuple], start: int, level: Level, group_at: int) -> dict[tuple, float]:
    """Units by (key of ``level``, group) from the rows read (the key's columns from ``start``, the group at
    ``group_at``, the units last)."""
    units: dict[tuple, float] = {}
    for row in rows:
        k = tuple(plain(v) for v in row[start : start + len(level.columns)])
        grp = plain(row[group_at])
        units[(k, grp)] = units.get((k, grp), 0.0) + float(row[-1] or 0)
    return units


def _day_column(ctx: DiagnosisContext, node: str) -> str | None:
    """The node's first DATE column: where it keeps its rows by day, the last good night's rows are there."""
    return next((c for c in ctx.graph.info(node).columns if is_date(ctx.graph, node, c)), None)


def _dated_rows(
    ctx: DiagnosisContext,
    node: str,
    source: str,
    select: str,
    value: str,
    width: int,
    what: str,
    tonight: Recorded,
    before: Recorded,
) -> tuple[list[tuple] | None, list[tuple] | None]:
    """(tonight's rows, the last good night's rows) of a node that keeps its rows by a DATE column, both
    nights read in one statement, each night's units checked against the total recorded that
    night (within ``RECORDED``): rows that are not what the total measured are no evidence. (None, None)
    when the node has no such column or tonight's rows are not so dated (then it is read whole, as before);
    (rows, None) when it does not keep the last good night's rows (a table of the latest day only)."""
    day = _day_column(ctx, node)
    if day is None or not before.value or not tonight.value:
        return None, None
    d = f"CAST(F.{quote_identifier(day)} AS DATE)"
    rows = ctx.rows(
        f"{what}, the last good night and tonight",
        f"{select}, {d}, {value} FROM {source} WHERE {d} IN (?, ?)"
        f" GROUP BY {', '.join(str(i + 1) for i in range(width + 1))}",
        (before.business_date, tonight.business_date),
    )
    if rows is None:
        return None, None
    now = [r[:width] + r[width + 1 :] for r in rows if r[width] == tonight.business_date]
    last = [r[:width] + r[width + 1 :] for r in rows if r[width] == before.business_date]
    if not _as_recorded(now, tonight.value):
        return None, None
    return now, last if _as_recorded(last, before.value) else None


def _as_recorded(rows: Sequence[tuple], recorded: float) -> bool:
    return bool(rows) and abs(sum(float(r[-1] or 0) for r in rows) - recorded) <= RECORDED * abs(recorded)


def _moved_since(
    ctx: DiagnosisContext,
    level: Level,
    units: dict[tuple, float],
    last: dict[tuple, float],
    before: Recorded,
    node_group: str,
) -> list[KeyGap]:
    """The keys whose group changed since the last good night, shown by that night's own rows: mapped as
    tonight (each key to its group in tonight's rows), they put more units in a group than its total
    recorded that night, and fewer in another, each by the key's own units that night (within
    ``RECORDED`` of them). A key that was in its group all along explains no difference, however near its
    size; a key whose move explains no group's difference is not named."""
    tonight_group: dict[tuple, str | None] = {}
    for k, grp in units:
        tonight_group.setdefault(k, grp)
    then: dict[tuple, float] = {}
    remapped: dict[str | None, float] = {}
    for (k, grp), v in last.items():
        then[k] = then.get(k, 0.0) + v
        g = tonight_group.get(k, grp)
        remapped[g] = remapped.get(g, 0.0) + v
    recorded = {split_label(label)[1]: v or 0.0 for label, v in before.groups.items()}
    column = split_label(next(iter(before.groups), node_group))[0]
    diff = {g: remapped.get(g, 0.0) - recorded.get(g, 0.0) for g in set(remapped) | set(recorded)}
    found: dict[tuple, tuple[float, str | None, str | None]] = {}
    for k, v in sorted(then.items(), key=lambda kv: -abs(kv[1])):
        g = tonight_group.get(k)
        if k in tonight_group and v and _explains(v, diff.get(g, 0.0)):
            found[k] = (v, g, next((x for x in diff if x != g and _explains(-v, diff[x])), None))
    now = _now_maps(ctx, level, {k: g for k, (_, g, _) in found.items()}, node_group)
    day = before.business_date.isoformat()
    keys = []
    for k, (v, g, was) in found.items():
        # That night's rows, mapped as tonight, differ from what was recorded by exactly this key's units.
        story = (
            f"on {day} its {v:,.0f} units were in {key_label(column, was)}'s recorded total, not"
            f" {key_label(column, g)}'s"
            if was is not None
            else f"on {day} its {v:,.0f} units were not in {key_label(column, g)}'s recorded total"
        )
        keys.append(_key_gap(level, k, units.get((k, g), 0.0), f"{now[k]}; {story}"))
    return keys


def _explains(units: float, difference: float) -> bool:
    """Whether a key's units that night are a group's difference between that night's rows mapped as tonight
    and its recorded total: the same rows, so to their rounding, not to a size alike."""
    return bool(difference) and abs(difference - units) <= RECORDED * abs(units)


def _key_gap(level: Level, values: tuple, units: float, change: str) -> KeyGap:
    if len(level.columns) == 1:
        return KeyGap(column=level.columns[0], value=values[0], units=units, rows=0, change=change)
    return KeyGap(
        column=level.columns[0],
        value=values[0],
        units=units,
        rows=0,
        change=change,
        parts=list(zip(level.columns, values, strict=True)),
        unmatched_columns=list(level.columns),
    )


def _matching(
    ctx: DiagnosisContext,
    level: Level,
    units: dict[tuple, float],
    lost: dict[str, float],
    gained: dict[str, float],
    spreads: Mapping[str, float],
    tonight: Recorded,
    before: Recorded,
    node_group: str,
    total: RecordedTotal,
) -> list[KeyGap]:
    """The keys (of one lookup) now wholly in a group that gained whose units tonight are what a losing group
    lost, within ``_band`` of it; or whose share on the last good night (a total grouped by the key) matches
    that share. Where one group lost to one other whose share was the steadier on the good nights, what that
    group gained is the nearer measure of the key that moved (a busy night of the loser's other keys hides
    part of its loss), and is matched instead.
    Every such key, nearest first: a key that was in the gaining group all along may be as large as the one
    that moved, or nearer by chance, and tonight's mapping cannot tell them apart (nothing keeps a key's
    group of the night before), so the text says so rather than name one of them moved. A key now in no
    group (NULL: a left join that no longer finds its row) is told deleted or changed by its row."""
    per_key = _per_key(ctx, level.columns, before)
    by_key: dict = {}
    for (k, _), v in units.items():
        by_key[k] = by_key.get(k, 0.0) + v
    into = {split_label(g)[1] for g in gained}
    # What each losing group lost, into any group that gained; or, one group's loss gone to one other group
    # whose share on the good nights was steadier, what that group gained: it is known more nearly.
    targets = [
        (g, amount, into, f"what {g} lost") for g, amount in sorted(lost.items(), key=lambda kv: -kv[1])
    ]
    if len(lost) == 1 and len(gained) == 1:
        ((loser, _),), ((winner, amount),) = lost.items(), gained.items()
        # Not keys now in no group (a left join that lost their row): what NULL gained names no mapping.
        named = split_label(winner)[1] is not None
        if named and winner in spreads and loser in spreads and spreads[winner] < spreads[loser]:
            targets = [(winner, amount, into, f"what {winner} gained")]
    found: dict[tuple, tuple[float, str | None, str, float]] = {}
    for g, amount, groups, what in targets:
        share = amount / tonight.value if tonight.value else 0.0
        band = _band(amount, spreads.get(g), tonight)
        for (k, grp), v in sorted(units.items(), key=lambda kv: abs(kv[1] - amount)):
            if k in found or grp not in groups or not v or abs(v - by_key[k]) > 0.01 * abs(by_key[k]):
                continue
            earlier = None
            if per_key is not None and per_key[0].value:
                earlier = per_key[0].groups.get(_label(level.columns, k, per_key[1]))
            if abs(v - amount) <= band or (
                earlier is not None and abs(earlier / per_key[0].value - share) <= MATCH * share  # type: ignore[index, operator]
            ):
                found[k] = (v, grp, what, amount)
    now = _now_maps(ctx, level, {k: grp for k, (_, grp, _, _) in found.items()}, node_group)
    keys = []
    for k, (v, _, what, amount) in found.items():
        alike = sum(1 for _, _, other, _ in found.values() if other == what)
        carries = f"its {v:,.0f} units tonight are about {what} ({amount:,.0f})"
        if alike > 1:
            carries += (
                f", as are those of {alike - 1} other key{'s' if alike > 2 else ''} now in a gaining group:"
                " tonight's mapping cannot tell which of them moved"
            )
        keys.append(_key_gap(level, k, v, f"{now[k]}; {carries}"))
    return keys


def _now_maps(
    ctx: DiagnosisContext, level: Level, groups: Mapping[tuple, str | None], node_group: str
) -> dict[tuple, str]:
    """What each key's row in the reference table says tonight: the group it maps the key to, or, a key now
    in no group (NULL: a left join no longer finds its row), whether its row was deleted or changed."""
    where = table(ctx.graph, level.reference) or level.reference
    gone = [k for k, grp in groups.items() if grp is None]
    present = rows_on_table(ctx, level.reference, list(level.reference_columns), gone) if gone else None
    out = {}
    for k, grp in groups.items():
        if grp is not None:
            out[k] = f"its row in {where} now maps it to {node_group}={grp}"
        elif present is not None and not present.get(k):
            out[k] = f"its row was deleted from {where}: it now has no {node_group}"
        else:
            out[k] = f"its row in {where} no longer matches: it now has no {node_group}"
    return out


def _band(amount: float, spread: float | None, tonight: Recorded) -> float:
    """How far a key's units may be from what a group lost and still carry it. What the group lost is its
    share tonight against the last good night's, each as noisy as its shares on the good nights: ``NOISE_Z``
    of their spreads (at least 1%, for rounding); ``MATCH`` of it where no spread is known."""
    if spread is None:
        return MATCH * amount
    return max(NOISE_Z * spread * (tonight.value or 0.0), 0.01 * amount)


def attribute_shift_diagnosis(
    incident: Incident, finding: Finding, total: RecordedTotal, ctx: DiagnosisContext
) -> Diagnosis | None:
    """A shift between the values of a dimension attribute the check measured the total by (its table carries
    it from a reference table; no total groups by it): traced like a shift between groups, on the attribute's
    own recorded series. None when the finding names no attribute or the shift is not traced."""
    named = finding.evidence.get("attribute_shift") or {}
    column, series = named.get("column"), named.get("series")
    if not column or not series:
        return None
    if named.get("repointed"):
        return _repointed(incident, total, column, named["repointed"], ctx)
    day = finding.business_date
    history = ctx.history.metric_history(series, day + timedelta(days=1), HISTORY_DAYS)
    tonight, before = history.get(day), last_good_night(ctx, history, day)
    if tonight is None or before is None:
        return None
    by = total.model_copy(update={"group_keys": [column]})
    judged = judged_groups(
        named.get("moves") or [],
        None,
        lambda: [history[d] for d in good_nights(ctx, history, day)],
        tonight,
    )
    shift = trace_shift(ctx, by, tonight, before, judged)
    if shift is None:
        return _key_shift(
            incident, by, ctx, tonight, before, judged, {"total": total.name, "attribute": column}
        )
    return shift_diagnosis(incident, by, shift, ctx, {"total": total.name, "attribute": column})


def _repointed(
    incident: Incident,
    total: RecordedTotal,
    column: str,
    rows: Sequence[Mapping[str, Any]],
    ctx: DiagnosisContext,
) -> Diagnosis:
    """The reference rows the check read re-pointed by their own key (``checks/repointed.py``: each key's
    value of the attribute, night by night, in the total's table): named as they are, with the table the
    attribute is read from, where its lineage leads to one."""
    roots = root_tables(ctx.graph, (total.asset, column))
    source = next(iter(roots)) if len(roots) == 1 else None
    where = (table(ctx.graph, source) or source) if source else f"the table {total.asset} reads {column} from"
    by = [c for c, _ in (split_label(p) for p in split_labels(str(rows[0]["key"])))]
    keys = []
    for r in rows[:5]:
        parts = [split_label(p) for p in split_labels(str(r["key"]))]
        change = f"{column} {r['before']} -> {r['after']}: {float(r['units']):,.0f} units moved with it"
        keys.append(
            KeyGap(
                column=parts[0][0],
                value=parts[0][1],
                units=float(r["units"]),
                rows=0,
                change=change,
                parts=parts if len(parts) > 1 else [],
                unmatched_columns=[c for c, _ in parts] if len(parts) > 1 else [],
            )
        )
    said = "; ".join(f"{k.label}: {k.change}" for k in keys)
    cause = (
        f"{total.name} carries {column} from {where}, looked up by {', '.join(by)}; "
        f"{'a row' if len(keys) == 1 else f'{len(keys)} rows'} there now point{'s' if len(keys) == 1 else ''} "
        f"to another {column}, where {'it' if len(keys) == 1 else 'each'} pointed on every night before. "
        f"{said}."
    )
    start = source or total.asset
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.REFERENCE_DATA_CHANGE,
        cause=cause,
        evidence={
            "total": total.name,
            "attribute": column,
            "repointed": [f"{k.label}: {k.change}" for k in keys],
        },
        keys=keys,
        upstream_change=f"reference rows of {where} changed {column}: {said}",
        cause_asset=start,
        path=ctx.graph.path(start, total.asset)
        if start in ctx.graph and start != total.asset
        else [total.asset],
        owners=ctx.graph.owners_on([start, *reference_systems(ctx, start)]) if start in ctx.graph else [],
    )


def _key_shift(
    incident: Incident,
    by: RecordedTotal,
    ctx: DiagnosisContext,
    tonight: Recorded,
    before: Recorded,
    judged: Judged,
    evidence: dict,
) -> Diagnosis | None:
    """An attribute that is itself a join key (``carried_keys``) whose values moved, no reference row of
    a lookup above it carrying the move: the rows that hold the key were re-pointed in the table it is read
    from (its lineage's one root), and the keys that lost are what changed (a plan's subscribers moved to
    another plan: the plan they left is named, not any one subscriber). How many of that table's rows still
    hold each is read (one statement). None when the column is no such key or its values did not move."""
    column = by.group_keys[0]
    moved = moved_groups(tonight, before, judged)
    roots = root_columns(ctx.graph, (by.asset, column))
    if moved is None or column not in carried_keys(ctx.graph, by.asset) or len(roots) != 1:
        return None
    lost, gained = moved
    ((source, source_column),) = roots
    where = table(ctx.graph, source) or source
    values = [split_label(g)[1] for g in lost]
    held = on_table(ctx, source, source_column, [v for v in values if v is not None])
    to = ", ".join(gained)
    keys = []
    for g, units in sorted(lost.items(), key=lambda kv: -kv[1]):
        value = split_label(g)[1]
        now = (
            f"{held.get(str(value), 0):,} rows of {where} hold it tonight"
            if held is not None and value is not None
            else f"its rows in {where} were not counted"
        )
        change = f"its {units:,.0f} units went to {to}; {now}"
        keys.append(KeyGap(column=column, value=value, units=units, rows=0, change=change))
    said = "; ".join(f"{k.label}: {k.change}" for k in keys[:5])
    cause = (
        f"{evidence.get('total', by.name)} held while its {column} values moved ({', '.join(lost)} lost; "
        f"{to} gained): {by.asset} carries {column} from {where}.{source_column}, a key a join on its path "
        f"looks up, so rows of {where} were re-pointed from one {column} to another. {said}."
    )
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.REFERENCE_DATA_CHANGE,
        cause=cause,
        evidence={
            **evidence,
            "groups_lost": ", ".join(f"{g} lost {v:,.0f}" for g, v in lost.items()),
            "groups_gained": ", ".join(f"{g} gained {v:,.0f}" for g, v in gained.items()),
        },
        keys=keys[:5],
        upstream_change=f"rows of {where} re-pointed from {', '.join(k.label for k in keys[:5])}",
        cause_asset=source,
        path=ctx.graph.path(source, by.asset) if source in ctx.graph and source != by.asset else [by.asset],
        owners=ctx.graph.owners_on([source, *reference_systems(ctx, source)]),
    )


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
        cause_asset=start,
        path=ctx.graph.path(start, total.asset)
        if start in ctx.graph and start != total.asset
        else [total.asset],
        owners=shift.owners,
    )
