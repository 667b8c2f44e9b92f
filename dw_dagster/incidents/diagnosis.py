"""Diagnosis: from an incident's findings to its cause, by evidence measured in the warehouse.

The walk starts at the failing total or table and goes upstream through the lineage graph. Each class is
decided by a measurement, never by the words of an alert: a failed Coalesce node is a failed load; an input
whose latest load is older than the build is stale input; a gap to the source that sits on keys an inner
join drops is value loss (or a reference-data change, when the key used to match); a per-key jump by a
clean factor is a unit change (x12) or, with duplicate rows in the source, a duplication; rows missing
where the input is fresh is volume loss.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import sqlglot
from sqlglot import exp

from dw_dagster.checks.history import HistorySession, Recorded
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.coalesce.sql import quote_identifier, table_parts, table_reference
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.joins import measure_inner_join, parse_joins, unmatched_rows_query
from dw_dagster.incidents.models import CauseClass, Diagnosis, Finding, Incident, JoinEffect, KeyGap

# Factors a unit-of-measure change produces: eaches/dozens, cents, grams, thousands...
UNIT_FACTORS = (12, 24, 100, 1000, 10, 1 / 12, 1 / 24, 1 / 100, 1 / 1000, 1 / 10)
_SCHEMA_WORDS = re.compile(r"invalid identifier|does not exist|not found|no such column|Binder Error", re.I)


@dataclass
class DiagnosisContext:
    """What the diagnosis reads: the graph, the recorded totals and their history, and the warehouse."""

    graph: LineageGraph
    metrics: MetricsFile
    resolve_table: Callable[[str, str], str]
    history: HistorySession
    cursor: Any


def _total_of(finding: Finding, metrics: MetricsFile) -> RecordedTotal | None:
    name = finding.check_name.removeprefix("total_")
    return (
        next((t for t in metrics.totals if t.name == name), None)
        if finding.check_name.startswith("total_")
        else None
    )


def measure_column(total: RecordedTotal) -> str | None:
    """The column a total sums (``SUM("ONHAND_QTY") AS "VALUE"``), or None for a count."""
    tree = sqlglot.parse_one(total.sql.replace("{{", "").replace("}}", ""), read="snowflake")
    for alias in tree.find_all(exp.Alias):
        if alias.alias.upper() == "VALUE" and isinstance(alias.this, exp.Sum):
            column = alias.this.find(exp.Column)
            return column.name if column is not None else None
    return None


def _last_good(history: Mapping[date, Recorded], day: date) -> Recorded | None:
    good = [d for d, r in history.items() if d < day and not r.flagged and r.value is not None]
    return history[max(good)] if good else None


def _first_seen(history: Mapping[date, Recorded], group: str) -> date | None:
    days = sorted(d for d, r in history.items() if group in r.groups)
    return days[0] if days else None


def by_priority(findings: Sequence[Finding]) -> list[Finding]:
    """Findings with the likeliest root first: failed load, stale input, reconciliation, totals, volume."""

    def rank(f: Finding) -> int:
        if f.check_name == "coalesce_run":
            return 0
        if f.check_name == "input_freshness":
            return 1
        if f.evidence.get("reconciliation", {}).get("passed") is False:
            return 2
        if f.check_name.startswith("total_"):
            return 3
        return 4

    return sorted(findings, key=rank)


def diagnose(incident: Incident, findings: Sequence[Finding], ctx: DiagnosisContext) -> Diagnosis:
    if not findings:
        return Diagnosis(
            incident_id=incident.incident_id, classification=CauseClass.UNKNOWN, cause="no findings"
        )
    primary = by_priority(findings)[0]
    if primary.check_name == "coalesce_run":
        return _failed_load(incident, primary, ctx)
    if primary.check_name == "input_freshness":
        return _stale_input(incident, primary, ctx)
    total = _total_of(primary, ctx.metrics)
    if (
        total is not None
        and total.reconcile_with
        and primary.evidence.get("reconciliation", {}).get("passed") is False
    ):
        return _reconciliation_gap(incident, primary, total, ctx)
    if total is not None:
        return _total_anomaly(incident, primary, total, ctx)
    return _volume(incident, primary, ctx)


def _failed_load(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    error = json.dumps(finding.evidence)
    schema = bool(_SCHEMA_WORDS.search(error))
    upstream = sorted(ctx.graph.upstream(finding.asset_key)) if finding.asset_key in ctx.graph else []
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.SCHEMA_CHANGE if schema else CauseClass.FAILED_LOAD,
        cause=f"The Coalesce build of {finding.asset_key} failed: {finding.summary}"
        + (
            " The error names a column or object that no longer matches the node's definition."
            if schema
            else ""
        ),
        evidence={"coalesce_run_id": finding.coalesce_run_id or ""},
        path=[*upstream, finding.asset_key],
        owners=ctx.graph.owners_on([finding.asset_key]) if finding.asset_key in ctx.graph else [],
    )


def _stale_input(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    rule = next(r for r in ctx.metrics.freshness.inputs if r.asset == finding.asset_key)
    feeders = [k for k in ctx.graph.upstream(rule.input) if "coalesce" not in ctx.graph.info(k).kinds]
    replication = [k for k in feeders if rule.input in ctx.graph.assets.successors(k)]
    path = (
        ctx.graph.path(replication[0], finding.asset_key) if replication else [rule.input, finding.asset_key]
    )
    age = finding.evidence.get("input_age_hours")
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.STALE_INPUT,
        cause=(
            f"{finding.asset_key} was rebuilt on stale input: the latest load of {rule.input} is "
            f"{age:.1f} h older than the build"
            if isinstance(age, float)
            else f"{finding.summary}"
        )
        + (
            f"; {', '.join(replication)} has delivered nothing new (replication stalled?)."
            if replication
            else "."
        ),
        evidence={k: v for k, v in finding.evidence.items() if isinstance(v, int | float | str)},
        upstream_change=f"no new rows from {', '.join(replication) or rule.input}",
        path=path,
        owners=ctx.graph.owners_on(replication or [rule.input]),
        test_query=(
            f"SELECT MAX({quote_identifier(rule.input_column)}) AS LATEST_LOAD FROM {_table(ctx, rule.input)}"
        ),
    )


def _table(ctx: DiagnosisContext, key: str) -> str:
    return table_reference(*table_parts(ctx.graph.info(key).table_name))  # type: ignore[misc]


def _reconciliation_gap(
    incident: Incident, finding: Finding, total: RecordedTotal, ctx: DiagnosisContext
) -> Diagnosis:
    assert total.reconcile_with is not None
    source = ctx.metrics.get(total.reconcile_with.total)
    rec = finding.evidence["reconciliation"]
    day = finding.business_date
    measure = measure_column(total)
    item = total.item_key
    path = ctx.graph.path(source.asset, total.asset)
    source_history = ctx.history.metric_history(source.name, day, 120)
    target_history = ctx.history.metric_history(total.name, day, 120)

    joins: list[JoinEffect] = []
    test_query = None
    for key in path[1:]:
        info = ctx.graph.info(key)
        if not info.join:
            continue
        for join in parse_joins(info.join, ctx.resolve_table):
            if join.kind != "INNER":
                continue
            left_key = ctx.graph.key_for_table(join.left_table)
            left_measure = _traced(ctx, total.asset, measure, left_key)
            left_item = _traced(ctx, total.asset, item, left_key)
            effect = measure_inner_join(ctx.cursor, key, join, left_measure, left_item)
            if effect.dropped_rows:
                joins.append(effect)
                test_query = test_query or unmatched_rows_query(join, left_measure, left_item)

    gap = float(rec["gap_change"])
    keys: list[KeyGap] = []
    for effect in joins:
        for g in effect.unmatched:
            label = f"{g.column}={g.value}"
            seen = _first_seen(source_history, label)
            keys.append(g.model_copy(update={"new_in_source_since": day if seen is None else None}))
    main_join = max(joins, key=lambda e: e.dropped_units, default=None)
    evidence: dict[str, float | int | str] = {
        "gap_units": gap,
        "target_change_pct": rec.get("target_change_pct") or 0.0,
        "source_change_pct": rec.get("source_change_pct") or 0.0,
    }
    if main_join is not None and keys:
        top = max(keys, key=lambda k: k.units)
        evidence.update({"dropped_units": main_join.dropped_units, "dropped_rows": main_join.dropped_rows})
        previously_matched = any(f"{top.column}={top.value}" in r.groups for r in target_history.values())
        right_key = ctx.graph.key_for_table(main_join.right)
        reference = _reference_systems(ctx, right_key)
        klass = CauseClass.REFERENCE_DATA_CHANGE if previously_matched else CauseClass.VALUE_LOSS
        items = f" over {top.distinct_items:,} items" if top.distinct_items else ""
        news = (
            f"{top.column} {top.value} is new in {source.asset} since {day}"
            if top.new_in_source_since
            else f"{top.column} {top.value} used to match and no longer does"
        )
        cause = (
            f"{main_join.asset_key} inner-joins {main_join.left} to {main_join.right} on "
            f"{', '.join(main_join.on)}; {news} and has no match in {main_join.right}, so its "
            f"{top.units:,.0f} units{items} drop out of {total.name}. The load is complete and fresh: the loss "
            f"is in values."
        )
        owners = ctx.graph.owners_on([main_join.asset_key, *([right_key] if right_key else []), *reference])
        return Diagnosis(
            incident_id=incident.incident_id,
            classification=klass,
            cause=cause,
            evidence=evidence,
            keys=keys,
            joins=joins,
            upstream_change=news,
            path=path,
            test_query=test_query,
            owners=owners,
        )
    return _total_anomaly(incident, finding, total, ctx, evidence_extra=evidence)


def _traced(ctx: DiagnosisContext, asset: str, column: str | None, to_asset: str | None) -> str | None:
    if column is None or to_asset is None:
        return None
    traced = ctx.graph.trace_column((asset, column), to_asset)
    return traced[1] if traced else None


def _reference_systems(ctx: DiagnosisContext, key: str | None) -> list[str]:
    """The hand-maintained systems (not Coalesce-built) upstream of a join's right side."""
    if key is None:
        return []
    return sorted(k for k in ctx.graph.upstream(key) | {key} if "coalesce" not in ctx.graph.info(k).kinds)


def _total_anomaly(
    incident: Incident,
    finding: Finding,
    total: RecordedTotal,
    ctx: DiagnosisContext,
    evidence_extra: dict[str, float | int | str] | None = None,
) -> Diagnosis:
    day = finding.business_date
    history = ctx.history.metric_history(total.name, day + timedelta(days=1), 120)
    tonight = history.get(day)
    before = _last_good(history, day)
    evidence: dict[str, float | int | str] = dict(evidence_extra or {})
    path = sorted(ctx.graph.upstream(total.asset)) + [total.asset]
    if tonight is None or before is None:
        return Diagnosis(
            incident_id=incident.incident_id, classification=CauseClass.UNKNOWN, cause=finding.summary,
            evidence=evidence, path=path, owners=ctx.graph.owners_on([total.asset]),
        )  # fmt: skip
    evidence.update({"value": tonight.value or 0.0, "last_good_value": before.value or 0.0})
    ratios = {
        g: tonight.groups[g] / before.groups[g]
        for g in tonight.groups
        if g in before.groups and before.groups[g]
    }
    moved = {g: r for g, r in ratios.items() if abs(r - 1) > 0.05}
    duplicates = _duplicate_rows(ctx, total.asset)
    if duplicates:
        evidence["duplicate_rows"] = duplicates
        return Diagnosis(
            incident_id=incident.incident_id,
            classification=CauseClass.DUPLICATION,
            cause=f"{total.asset} holds {duplicates:,} exact duplicate rows tonight (a load applied twice?): "
            f"{total.name} is {tonight.value:,.0f} against {before.value:,.0f} on the last good night.",
            evidence=evidence,
            keys=[_gap(g, tonight, before) for g in sorted(moved, key=lambda g: -abs(moved[g] - 1))[:5]],
            upstream_change=f"duplicate rows loaded into {total.asset}",
            path=path,
            owners=ctx.graph.owners_on(_feeders(ctx, total.asset)),
            test_query=_duplicates_query(ctx, total.asset),
        )
    for g, r in sorted(moved.items(), key=lambda kv: -abs(kv[1] - 1)):
        factor = next((f for f in UNIT_FACTORS if abs(r / f - 1) < 0.03), None)
        if factor is not None:
            shown = f"x{factor:g}" if factor >= 1 else f"/{1 / factor:g}"
            evidence.update({"factor": factor, "key": g})
            return Diagnosis(
                incident_id=incident.incident_id,
                classification=CauseClass.UNIT_CHANGE,
                cause=f"{total.name} for {g} changed by a clean factor ({shown}, {r:.3f} measured) overnight "
                f"while the other keys held: the source posts that key's quantities in another unit.",
                evidence=evidence,
                keys=[_gap(g, tonight, before)],
                upstream_change=f"unit of {measure_column(total) or 'the measure'} changed for {g} ({shown})",
                path=path,
                owners=ctx.graph.owners_on(_feeders(ctx, total.asset)),
            )
    missing = [g for g in before.groups if g not in tonight.groups]
    if missing or (tonight.value or 0) < (before.value or 0):
        return Diagnosis(
            incident_id=incident.incident_id,
            classification=CauseClass.VOLUME_LOSS,
            cause=f"{total.name} fell to {tonight.value:,.0f} from {before.value:,.0f}"
            + (f"; keys missing tonight: {', '.join(missing[:5])}" if missing else ""),
            evidence=evidence,
            keys=[_gap(g, tonight, before) for g in missing[:5]],
            path=path,
            owners=ctx.graph.owners_on([total.asset]),
        )
    return Diagnosis(
        incident_id=incident.incident_id, classification=CauseClass.UNKNOWN, cause=finding.summary,
        evidence=evidence, path=path, owners=ctx.graph.owners_on([total.asset]),
    )  # fmt: skip


def _volume(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    rows = finding.evidence.get("row_count")
    expected = (finding.evidence.get("baseline") or {}).get("expected")
    up = isinstance(rows, int | float) and isinstance(expected, int | float) and rows > expected
    duplicates = _duplicate_rows(ctx, finding.asset_key) if up else 0
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.DUPLICATION if duplicates else CauseClass.VOLUME_LOSS,
        cause=finding.summary,
        evidence={"row_count": rows or 0, "expected_rows": expected or 0, "duplicate_rows": duplicates},
        path=sorted(ctx.graph.upstream(finding.asset_key)) + [finding.asset_key],
        owners=ctx.graph.owners_on([finding.asset_key]),
    )


def _feeders(ctx: DiagnosisContext, key: str) -> list[str]:
    return [key, *sorted(k for k in ctx.graph.assets.predecessors(key))]


def _gap(group: str, tonight: Recorded, before: Recorded) -> KeyGap:
    column, _, value = group.partition("=")
    return KeyGap(
        column=column, value=value, rows=0,
        units=tonight.groups.get(group, 0.0) - before.groups.get(group, 0.0),
    )  # fmt: skip


def _columns(ctx: DiagnosisContext, key: str) -> list[str]:
    database, schema, name = table_parts(ctx.graph.info(key).table_name)  # type: ignore[misc]
    ctx.cursor.execute(
        f"SELECT COLUMN_NAME FROM {quote_identifier(database)}.INFORMATION_SCHEMA.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (schema, name),
    )
    return [r[0] for r in ctx.cursor.fetchall()]


def _duplicates_query(ctx: DiagnosisContext, key: str) -> str:
    cols = ", ".join(quote_identifier(c) for c in _columns(ctx, key))
    return f"SELECT {cols}, COUNT(*) AS COPIES FROM {_table(ctx, key)} GROUP BY {cols} HAVING COUNT(*) > 1"


def _duplicate_rows(ctx: DiagnosisContext, key: str) -> int:
    """Rows beyond the first of each group of exact duplicates."""
    if not ctx.graph.info(key).table_name:
        return 0
    ctx.cursor.execute(f"SELECT COALESCE(SUM(COPIES - 1), 0) FROM ({_duplicates_query(ctx, key)})")
    return int(ctx.cursor.fetchone()[0] or 0)
