"""Dimension attributes a total's table carries from a reference table, judged for shifts between their
values though no recorded total groups by them.

A reference row re-pointed to another value of an attribute (a biller's clearing network, a store's
region) moves money between that attribute's values while every recorded total, grouped by something else,
stays flat. The lineage says which columns of a total's table are such attributes, with nothing to
configure: a text column whose column lineage leads to a table none of the measure's columns come from (it
was brought by a join, from a reference table), that is neither a group key of the total nor declared
unique. A key a join brought from a reference table is such an attribute too, whatever its type (a
subscriber's plan id, read from the subscribers' table and joined on to the plans): a column of the total's
table copied from one column that a join on its path equates with another's. Re-pointed upstream (the
CRM moving subscribers from one plan to another), the old key's units go to the new key while every text
attribute of the plans may hold, and the key that lost them is the one to name. Each night the total's own
aggregate is measured again grouped by each such attribute (a part of the night's one statement: the
total's table is read anyway; at most ``MAX_VALUES`` + 1 values read), recorded as the series
``attribute:<total>:<COLUMN>``, and judged like the total's groups (``groups.py``): existing values that lost
while others gained, with the total holding, is a shift between the attribute's values (an ERROR on the
total's check, its evidence naming the attribute for the diagnosis). An attribute with more than
``MAX_VALUES`` values is not judged value by value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import date

import sqlglot
from sqlglot import exp

from dw_dagster.checks.baseline import BaselineMethod
from dw_dagster.checks.groups import MIN_SHARE_OF_TOTAL, SHARE_UNITS, GroupMove
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.measure import Part
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.context.joins import equated
from dw_dagster.context.lineage import Column, LineageGraph

MAX_VALUES = 50
_TEXT = ("VARCHAR", "TEXT", "STRING", "CHAR")


def attribute_series(total: str, column: str) -> str:
    return f"attribute:{total}:{column}"


def root_columns(graph: LineageGraph, column: tuple[str, str]) -> set[tuple[str, str]]:
    """The columns ``column`` is first derived from (those with no lineage above them)."""
    return {a for a in graph.column_ancestors(column) if graph.columns.in_degree(a) == 0}


def root_tables(graph: LineageGraph, column: tuple[str, str]) -> set[str]:
    """The assets of the columns ``column`` is first derived from."""
    return {a[0] for a in root_columns(graph, column)}


def joining_nodes(graph: LineageGraph, asset: str) -> list[str]:
    """``asset`` and the nodes above it whose joins can be read: each described with its inputs (an asset
    known only as another's dep has no columns or table), in a stable order."""
    described = {n for n, d in graph.assets.nodes(data=True) if "info" in d}
    return sorted(
        n for n in graph.upstream(asset) | {asset} if {n, *graph.assets.predecessors(n)} <= described
    )


def carried_keys(graph: LineageGraph, asset: str) -> set[str]:
    """The columns of ``asset`` that hold a join key: each copied from one column (not a key mixed with
    another column) that a join on the asset's path equates with another table's (``ON L.A = R.B``)."""
    if asset not in graph:
        return set()
    joined = {c for node in joining_nodes(graph, asset) for pair in equated(graph, node) for c in pair}
    out = set()
    for column in graph.info(asset).columns:
        own: Column = (asset, column)
        if len(root_columns(graph, own)) == 1 and ({own} | graph.column_ancestors(own)) & joined:
            out.add(column)
    return out


def carried_attributes(
    graph: LineageGraph, total: RecordedTotal, measures: Sequence[str], joined: set[str] | None = None
) -> list[str]:
    """The columns of the total's table that a join brought from a reference table: their lineage leads to
    tables the measure's columns do not come from. Text columns, and join keys of any type (``carried_keys``,
    or ``joined`` when the caller has them: the totals of one table share them) first: a key re-pointed moves
    every attribute it maps, its own values name where. Neither group keys nor unique columns."""
    if total.asset not in graph:
        return []
    info = graph.info(total.asset)
    wanted = {m.upper() for m in measures}
    by_upper = {c.upper(): c for c in info.columns}
    measure_roots = set().union(
        *(root_tables(graph, (total.asset, by_upper[m])) for m in wanted if m in by_upper)
    )
    if not measure_roots:
        return []
    keys = {k.upper() for k in total.group_keys}
    joined = carried_keys(graph, total.asset) if joined is None else joined
    out = []
    for column in info.columns:
        if column.upper() in keys | wanted or column in info.unique:
            continue
        if column not in joined and not info.type_of(column).upper().startswith(_TEXT):
            continue
        roots = root_tables(graph, (total.asset, column))
        if roots and not roots & measure_roots:
            out.append(column)
    return sorted(out, key=lambda c: c not in joined)


def one_table(sql: str) -> tuple[exp.Select, exp.Table, exp.Alias] | str:
    """The total's SELECT, the one table it reads and its VALUE projection; else why it has none."""
    try:
        tree = sqlglot.parse_one(sql, read="snowflake")
    except sqlglot.errors.ParseError:
        return "its SQL does not parse as Snowflake SQL"
    if not isinstance(tree, exp.Select):
        return "its SQL is not one SELECT (a set operation)"
    # sqlglot names the clause ``with_`` (``with`` before): read under "with" alone, a CTE's total was
    # regrouped over the CTE's name, and a column the CTE does not select failed the night's one statement.
    if tree.args.get("with_") or tree.args.get("with"):
        return "its SQL has a CTE"
    if tree.args.get("joins"):
        return "its SQL joins tables"
    source = tree.args.get("from_") or tree.args.get("from")  # the key sqlglot names it by, by version
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table):
        return "its SQL reads a subquery, not a table"
    value = next((p for p in tree.selects if isinstance(p, exp.Alias) and p.alias.upper() == "VALUE"), None)
    if value is None:
        return "its SQL has no VALUE column"
    return tree, table, value


def not_regrouped(sql: str) -> str | None:
    """Why a total's SQL cannot be measured again by another column (its attributes' drill, its subsets'
    typical rows), or None when it can: the check says so rather than leaving those checks out unseen."""
    found = one_table(sql)
    return found if isinstance(found, str) else None


def projected(
    sql: str,
    column: str,
    projections: Callable[[exp.Column, exp.Alias], list[exp.Expression] | None],
) -> tuple[exp.Select, exp.Column] | None:
    """The total's SELECT row by row, selecting the ``projections(key, value)`` it is given (``key``:
    ``column`` qualified as the total's table is; ``value``: the total's VALUE projection; None from it: none),
    its filters kept and its grouping, order and limit dropped; with ``key``. None when its SQL is not one
    SELECT over one table with a VALUE (``not_regrouped`` says why)."""
    found = one_table(sql)
    if isinstance(found, str):
        return None
    tree, table, value = found
    # The alias as the total's SQL writes it: Snowflake folds an unquoted alias to upper case, so ``FROM T f``
    # is ``F``, and a quoted ``"f"`` names nothing.
    alias = table.args.get("alias")
    qualifier = alias.this.copy() if alias is not None and alias.this is not None else None
    key = exp.column(exp.to_identifier(column, quoted=True), table=qualifier)
    selected = projections(key, value)
    if selected is None:
        return None
    rows = tree.copy()
    rows.set("expressions", selected)
    for clause in ("group", "order", "limit", "having", "qualify"):
        rows.set(clause, None)
    return rows, key


def regrouped(
    sql: str,
    column: str,
    names: Sequence[str],
    alias: str,
    projections: Callable[[exp.Column, exp.Alias], list[exp.Expression] | None],
    limit: int | None = None,
) -> exp.Select | None:
    """A total's SQL grouped by ``column`` instead of its group keys, selecting ``names`` from the
    ``projections(key, value)`` it is given (``projected``), at most ``limit`` groups when given, or None when
    its SQL is not one SELECT over one table with a VALUE (a join, a CTE, a set operation: then it is not
    regrouped, ``not_regrouped`` says why). Shared by the attributes' parts and the subsets' typical rows."""
    found = projected(sql, column, projections)
    if found is None:
        return None
    regrouped, key = found
    regrouped.set("group", exp.Group(expressions=[key.copy()]))
    if limit is not None:
        regrouped = regrouped.limit(limit)
    return outer_select(regrouped, names, alias)


def outer_select(inner: exp.Select, names: Sequence[str], alias: str) -> exp.Select:
    """``SELECT names FROM (inner) AS alias``, each name quoted."""
    outer = exp.to_identifier(alias, quoted=True)
    return exp.select(*(exp.column(exp.to_identifier(n, quoted=True), table=outer) for n in names)).from_(
        inner.subquery(outer)
    )


def attribute_part(total: RecordedTotal, sql: str, column: str) -> Part | None:
    """The total's aggregate grouped by ``column`` instead of its group keys, or None when its SQL is not one
    SELECT over one table (a join, a CTE, a set operation: then it is not regrouped). Each value as text,
    so a numeric key shares the attributes' columns in the night's statement; one value beyond
    ``MAX_VALUES`` read, which says there are too many to judge without reading them all (a key of every
    customer)."""
    query = regrouped(
        sql,
        column,
        ("ATTRIBUTE", "VALUE"),
        "a",
        lambda attribute, value: [
            exp.alias_(exp.cast(attribute, "VARCHAR"), "ATTRIBUTE", quoted=True),
            value.copy(),
        ],
        MAX_VALUES + 1,
    )
    return None if query is None else Part(("attribute", total.name, column), query, shape="attribute")


def shifted_shares(
    total: RecordedTotal,
    day: date,
    groups: Mapping[str, float | None],
    past: Mapping[date, Recorded],
    *,
    excluded_days: Collection[date],
    share: int,
) -> list[GroupMove]:
    """The values of an attribute whose *share* of the total moved against each other tonight: one that fell
    and one that rose, each beyond its own shares of the nights before (less ``excluded_days``: incidents' and
    the calendar's; at the table's rate split over the attribute's values), while the values that did neither held theirs. Empty when none did.

    A share cancels the night's common level: on a night the calendar (learned or declared) makes unlike the
    others, a value's own record of like nights is one or two nights long, too thin to judge its level on,
    but its share of the total is the share it has on ordinary nights. A key newly mapped into one value
    dilutes every other value's share alike; a reference row re-pointed takes the share of one value alone,
    so the values neither side moved must have held (relatively, within the attribute's ``MAX_VALUES``), and
    an attribute of two values (a fall of one is the rise of the other) is left to the values' own levels."""
    names = [g for g, v in groups.items() if v is not None and v > 0]
    whole = sum(groups[g] or 0.0 for g in names)
    if len(names) < 3 or not whole:
        return []
    config = total.baseline.model_copy(
        update={"method": BaselineMethod.DAY_OVER_DAY, "small_below": 0, "calendar": False}
    )
    moves, ratios = [], {}
    for g in names:
        series = {
            d: SHARE_UNITS * (r.groups.get(g) or 0.0) / r.value
            for d, r in past.items()
            if r.value and r.groups and g in r.groups and d < day
        }
        tonight = groups[g] or 0.0
        verdict = judge(
            series,
            day,
            SHARE_UNITS * tonight / whole,
            config,
            excluded_days=excluded_days,
            share=share * len(names),
        )
        expected = verdict.result.expected
        if not expected:
            return []  # a value too new for its own shares: a key still arriving
        ratios[g] = tonight / whole * SHARE_UNITS / expected
        if verdict.severity != "ERROR" or abs(tonight / whole - expected / SHARE_UNITS) < MIN_SHARE_OF_TOTAL:
            continue
        moves.append(
            GroupMove(
                group=g,
                value=tonight,
                expected=expected / SHARE_UNITS * whole,
                change=tonight - expected / SHARE_UNITS * whole,
                share_before=expected / SHARE_UNITS,
                share_after=tonight / whole,
                status="gained" if ratios[g] > 1 else "lost",
            )
        )
    moved = {m.group for m in moves}
    held = [r for g, r in ratios.items() if g not in moved]
    if not held or not {m.status for m in moves} == {"lost", "gained"}:
        return []
    # Diluted alike (a newcomer's rows): every value that did not gain fell by the same factor.
    level = sorted(held)[len(held) // 2]
    if any(abs(math.log(level)) > abs(math.log(ratios[m.group])) / 2 for m in moves if m.status == "lost"):
        return []
    return sorted(moves, key=lambda m: -abs(m.change))
