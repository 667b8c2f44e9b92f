"""What every part of the diagnosis reads: the lineage graph, the metrics file, the recorded histories and
the warehouse, through one audited cursor; and the small readings they share (a total's measure column,
the last good night, a column traced upstream)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dw_dagster.checks.history import HistorySession, Recorded
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.coalesce.transforms import PER_KEY
from dw_dagster.context.joins import JoinParseError, ParsedJoin, parse_node
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.audit import (
    AuditedCursor,
    AuditedHistory,
    AuditTrail,
    QueryBudgetExceeded,
    QueryFailed,
)
from dw_dagster.records.incidents import Finding

HISTORY_DAYS = 120


@dataclass
class DiagnosisContext:
    """What the diagnosis reads: the graph, the recorded totals and their history, and the warehouse."""

    graph: LineageGraph
    metrics: MetricsFile
    resolve_table: Callable[[str, str], str]
    history: HistorySession | AuditedHistory
    cursor: Any
    trail: AuditTrail | None = None
    notes: list[str] = field(default_factory=list)

    def audited(self, trail: AuditTrail) -> DiagnosisContext:
        """The same context with every statement recorded in ``trail`` and held to its budget."""
        history = (
            self.history if isinstance(self.history, AuditedHistory) else AuditedHistory(self.history, trail)
        )
        return dataclasses.replace(
            self, history=history, cursor=AuditedCursor(self.cursor, trail), trail=trail, notes=[]
        )

    def purpose(self, what: str) -> AbstractContextManager[None]:
        """Statements sent inside the block are recorded as being for ``what``."""
        return self.trail.purpose(what) if self.trail is not None else nullcontext()

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def rows(self, purpose: str, sql: str, params: Any = None) -> list[tuple] | None:
        """Runs one measurement; None (and a note saying why) when it failed or the budget is spent."""
        if self.trail is None:
            self.cursor.execute(sql, params)
            return list(self.cursor.fetchall())
        try:
            with self.trail.purpose(purpose):
                self.cursor.execute(sql, params)
                return list(self.cursor.fetchall())
        except QueryBudgetExceeded as e:
            self.note(f"not measured ({purpose}): {e}")
        except QueryFailed as e:
            self.note(f"could not measure {e}")
        return None


def total_of(finding: Finding, metrics: MetricsFile) -> RecordedTotal | None:
    if not finding.check_name.startswith("total_"):
        return None
    name = finding.check_name.removeprefix("total_")
    return next((t for t in metrics.totals if t.name == name), None)


def _value_expressions(total: RecordedTotal) -> list[exp.Expression]:
    """What the total's SQL computes as ``VALUE``, every such alias in sqlglot's walking order; none when
    sqlglot cannot read the SQL."""
    try:
        tree = sqlglot.parse_one(total.sql.replace("{{", "").replace("}}", ""), read="snowflake")
    except SqlglotError:
        return []
    return [a.this for a in tree.find_all(exp.Alias) if a.alias.upper() == "VALUE"]


def measure_column(total: RecordedTotal) -> str | None:
    """The column a total sums (``SUM("AMOUNT") AS "VALUE"``), or None for a count or an expression
    sqlglot cannot read."""
    value = next((v for v in _value_expressions(total) if isinstance(v, exp.Sum)), None)
    if value is None:
        return None
    column = value.find(exp.Column)
    return column.name if column is not None else None


def measure_columns(total: RecordedTotal) -> list[str]:
    """Every column the total's VALUE is computed from (``SUM("QUANTITY" * "UNIT_PRICE")``: both)."""
    values = _value_expressions(total)
    return list(dict.fromkeys(c.name for c in values[0].find_all(exp.Column))) if values else []


def counted_on(ctx: DiagnosisContext, total: RecordedTotal, node: str, column: str | None) -> str | None:
    """The count (``PER_KEY``) the lineage makes of ``node``'s ``column`` on the way to the total's measure,
    when it is the one aggregate on the way: a total that sums a distinct count of people per group loses
    people where rows drop, not the sum of their ids. None where the total sums the column itself."""
    measure = measure_column(total)
    if measure is None or column is None or node not in ctx.graph:
        return None
    applied = ctx.graph.aggregates_between((node, column), (total.asset, measure))
    return applied[0][1] if len(applied) == 1 and applied[0][1] in PER_KEY else None


def measure_sum(ctx: DiagnosisContext, total: RecordedTotal, node: str, alias: str) -> str | None:
    """The total's ``SUM(...)`` written on ``node``'s columns as table ``alias`` (``SUM("NET" + "TAX")``
    whole, not its first column), every column traced through lineage; None when VALUE is not a SUM or a
    column is not carried by the node."""
    value = next(iter(_value_expressions(total)), None)
    if not isinstance(value, exp.Sum):
        return None
    copy = value.copy()
    for column in list(copy.find_all(exp.Column)):
        found = traced(ctx, total.asset, column.name, node)
        if found is None:
            return None
        column.set("table", exp.to_identifier(alias))
        column.set("this", exp.to_identifier(found, quoted=True))
    return copy.sql(dialect="snowflake")


def last_good(
    history: Mapping[date, Recorded], day: date, excluded: Collection[date] = ()
) -> Recorded | None:
    """The latest night before ``day`` that was not flagged (nor in ``excluded``: nights with an incident)."""
    good = [
        d
        for d, r in history.items()
        if d < day and not r.flagged and r.value is not None and d not in excluded
    ]
    return history[max(good)] if good else None


def good_nights(ctx: DiagnosisContext, history: Mapping[date, Recorded], day: date, n: int = 7) -> list[date]:
    """The last ``n`` good nights before ``day`` (not flagged, no incident), latest first."""
    excluded = ctx.history.incident_days(day - timedelta(days=HISTORY_DAYS))
    good = [
        d
        for d, r in history.items()
        if d < day and not r.flagged and r.value is not None and d not in excluded
    ]
    return sorted(good, reverse=True)[:n]


def last_good_night(ctx: DiagnosisContext, history: Mapping[date, Recorded], day: date) -> Recorded | None:
    """The last good night of a total: not flagged, and no incident opened on it (another total may have
    been the one that failed)."""
    return last_good(history, day, ctx.history.incident_days(day - timedelta(days=HISTORY_DAYS)))


def traced(ctx: DiagnosisContext, asset: str, column: str | None, to_asset: str | None) -> str | None:
    """The column of ``to_asset`` that ``asset``'s ``column`` is derived from."""
    if column is None or to_asset is None:
        return None
    found = ctx.graph.trace_column((asset, column), to_asset)
    return found[1] if found else None


def traced_left(
    ctx: DiagnosisContext, asset: str, column: str | None, join: ParsedJoin
) -> tuple[str, tuple[str, str]] | None:
    """The column of the join's left side (as the measurements read it, alias ``L``) that ``asset``'s
    ``column`` is derived from, and the table column it is: the left table's own, or, for a subquery that
    unions registers, the subquery's name for the column of whichever input carries it."""
    if column is None:
        return None
    for written in join.left_tables():
        left = ctx.graph.key_for_table(written)
        found = ctx.graph.trace_column((asset, column), left) if left else None
        if found is None:
            continue
        name = join.left_column(written, found[1])
        if name is not None:
            return name, found
    return None


def node_joins(ctx: DiagnosisContext, node: str) -> list[ParsedJoin]:
    """The joins of a node's join text; none when it has none, or when sqlglot cannot read it (noted)."""
    text = ctx.graph.info(node).join if node in ctx.graph else None
    if not text:
        return []
    try:
        return parse_node(node, text, ctx.resolve_table).joins
    except JoinParseError as e:
        ctx.note(f"{e}; its joins were not read")
        return []


def feeders(ctx: DiagnosisContext, key: str) -> list[str]:
    return [key, *sorted(k for k in ctx.graph.assets.predecessors(key))]


def reference_systems(ctx: DiagnosisContext, key: str | None) -> list[str]:
    """The hand-maintained systems (not Coalesce-built) upstream of a join's right side."""
    if key is None:
        return []
    return sorted(k for k in ctx.graph.upstream(key) | {key} if "coalesce" not in ctx.graph.info(k).kinds)


def replication_of(ctx: DiagnosisContext, key: str) -> list[str]:
    """The systems that feed a source table directly (a replication task, a hand-kept sheet)."""
    if key not in ctx.graph:
        return []
    return sorted(k for k in ctx.graph.assets.predecessors(key) if "coalesce" not in ctx.graph.info(k).kinds)
