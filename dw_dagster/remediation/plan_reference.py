"""The plan for a join that drops rows a reference table should match (the reference night).

Three proposals, each owned by the team that owns what it touches:

- the reference row (``42 -> Enterprise, Direct``) for the table's owner, drafted from the context file's
  ``reference_tables`` rule: ``draft_sql`` for what a source knows, ``copy_from_donor`` for what the key
  the units came from has (found in the source total's per-key history), the rest given on approval;
- the node change for the node's owner, as a unified diff of its Coalesce definition;
- a scoped rerun: the node and everything downstream, plus the built nodes between the reference table
  and the node, so the new row reaches the join.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from dw_dagster.coalesce.sql import find_refs, resolve_refs
from dw_dagster.context.models import ReferenceTable
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Incident, JoinEffect, KeyGap
from dw_dagster.records.keys import typed
from dw_dagster.records.remediation import (
    Expectation,
    NodeChange,
    Proposal,
    ProposalKind,
    ReferenceRow,
    ScopedRerun,
)
from dw_dagster.remediation.node_change import definition, keep_unmatched, unified_diff
from dw_dagster.remediation.plan_common import NoPlan, PlanContext, back_to_baseline, reconciles, teams
from dw_dagster.sql import positional, quote_identifier, table_parts, table_reference


def reference_plan(
    incident: Incident, diagnosis: Diagnosis, radius: BlastRadius, ctx: PlanContext
) -> tuple[list[Proposal], list[Expectation]]:
    if not diagnosis.joins:
        raise NoPlan(
            f"{diagnosis.classification.value}: no join on the path drops the rows; nothing to fix in the project"
        )
    join = max(diagnosis.joins, key=lambda j: j.dropped_units)
    if not join.right:
        raise NoPlan(f"{join.asset_key}: its filter leaves the rows out; its owner decides whether it should")
    right_key = ctx.diagnosis.graph.key_for_table(join.right)
    if right_key is None:
        raise NoPlan(f"{join.right}: not an asset of the lineage graph")
    proposals: list[Proposal] = []
    rows = _reference_rows(join, right_key, diagnosis, incident, ctx)
    proposals += rows
    node = _node_change(join, right_key, ctx)
    proposals.append(node)
    assert node.node_change is not None
    reference_keys = [r.reference_row.asset_key for r in rows if r.reference_row]
    proposals.append(_scoped_rerun(node.node_change, reference_keys, ctx))
    return proposals, _expectations(incident, diagnosis, radius, join, node.node_change.test_name, ctx)


def _reference_rows(
    join: JoinEffect, right_key: str, diagnosis: Diagnosis, incident: Incident, ctx: PlanContext
) -> list[Proposal]:
    graph = ctx.diagnosis.graph
    out = []
    candidates = [k for k in [right_key, *graph.upstream(right_key)] if ctx.context.reference_table(k)]
    for ref_key in candidates:
        rule = ctx.context.reference_table(ref_key)
        assert rule is not None
        parts = table_parts(graph.info(ref_key).table_name)
        if parts is None:
            continue
        for gap in join.unmatched:
            if gap.value is None:
                continue  # a NULL key has no reference row: the node change keeps its rows visible
            right_column = next((r for left, r in _on_pairs(join) if left == gap.column), gap.column)
            traced = graph.trace_column((right_key, right_column), ref_key)
            if traced is None or traced[1].upper() != rule.key_column.upper():
                continue
            row = _draft_row(rule, ref_key, parts, gap, diagnosis, incident, ctx)
            owners = teams(graph.info(ref_key).owners, ctx)
            values = ", ".join(str(v) for k, v in row.values.items() if k != row.key_column and v is not None)
            out.append(
                Proposal(
                    proposal_id=f"row-{ref_key.replace('/', '.')}-{gap.value}",
                    kind=ProposalKind.REFERENCE_ROW,
                    title=f"Add {gap.value} -> {values} to {parts[2]}",
                    owners=owners,
                    reference_row=row,
                )
            )
    return out


def _on_pairs(join: JoinEffect) -> list[tuple[str, str]]:
    """``["A = B"]`` as ``[(left column, right column)]``."""
    pairs = []
    for clause in join.on:
        left, _, right = clause.partition("=")
        pairs.append((left.strip().split(".")[-1].strip('"'), right.strip().split(".")[-1].strip('"')))
    return pairs


def _draft_row(
    rule: ReferenceTable,
    ref_key: str,
    parts: tuple[str, str, str],
    gap: KeyGap,
    diagnosis: Diagnosis,
    incident: Incident,
    ctx: PlanContext,
) -> ReferenceRow:
    cur = ctx.diagnosis.cursor
    table = table_reference(*parts)
    schema = ctx.metadata(ref_key, "dagster/column_schema")
    columns = [c.name for c in schema.columns] if schema else []
    required = [
        c.name
        for c in (schema.columns if schema else [])
        if c.constraints and c.constraints.nullable is False
    ]
    key_column = next((c for c in columns if c.upper() == rule.key_column.upper()), rule.key_column)
    key_type = next((c.type for c in (schema.columns if schema else []) if c.name == key_column), "")
    key = typed(gap.value, key_type)
    audit = set(rule.audit_columns.values())
    values: dict[str, Any] = {c: None for c in columns if c not in audit}
    values[key_column] = key
    drafted = {
        key_column: f"the key that matches nothing: {diagnosis.upstream_change or 'new in the source'}"
    }

    if rule.draft_sql:
        # The file writes the key as %(key)s; it is bound server-side as a ?.
        cur.execute(*positional(resolve_refs(rule.draft_sql, ctx.diagnosis.resolve_table), {"key": key}))
        found = cur.fetchone()
        # Named as the owner knows it: the tables the draft query reads (its refs), not the file's field.
        read = ", ".join(f"{location}.{name}" for location, name in find_refs(rule.draft_sql))
        if found is not None:
            for d, v in zip(cur.description, found, strict=True):
                name = next((c for c in values if c.upper() == d[0].upper()), None)
                if name is not None and v is not None:
                    values[name] = v
                    drafted[name] = read or "the reference table's draft query"
    donor = _donor(gap, incident, ctx)
    if donor is not None and rule.copy_from_donor:
        cols = ", ".join(quote_identifier(c) for c in rule.copy_from_donor)
        cur.execute(
            f"SELECT {cols} FROM {table} WHERE {quote_identifier(key_column)} = ?",
            (typed(donor, key_type),),
        )
        found = cur.fetchone()
        if found is not None:
            for name, v in zip(rule.copy_from_donor, found, strict=True):
                if values.get(name) is None:
                    values[name] = v
                    drafted[name] = f"{key_column} {donor}, where the units came from"
    return ReferenceRow(
        asset_key=ref_key,
        table_parts=parts,
        key_column=key_column,
        values=values,
        drafted_from=drafted,
        required=[c for c in required if c not in audit],
        audit_columns=dict(rule.audit_columns),
    )


def _donor(gap: KeyGap, incident: Incident, ctx: PlanContext) -> str | None:
    """The key whose source total fell the most on the night the new key appeared: where its units came
    from (an existing account whose business moved to the new one)."""
    day = incident.business_date
    if day is None:
        return None
    label = f"{gap.column}={gap.value}"
    metrics = ctx.diagnosis.metrics
    # The source totals the incident's totals reconcile with: they hold every key, mapped or not.
    sources = {t.reconcile_with.total for t in metrics.totals if t.reconcile_with is not None}
    for total in (metrics.get(name) for name in sorted(sources)):
        history = ctx.diagnosis.history.metric_history(total.name, day + timedelta(days=1), 7)
        tonight = history.get(day)
        earlier = [d for d in history if d < day]
        if tonight is None or not earlier or label not in tonight.groups:
            continue
        rise = tonight.groups[label] - history[max(earlier)].groups.get(label, 0.0)
        before = history[max(earlier)]
        drops = {
            g: tonight.groups[g] - v for g, v in before.groups.items() if g in tonight.groups and g != label
        }
        if not drops or rise <= 0:
            continue
        group, change = min(drops.items(), key=lambda kv: kv[1])
        # Only a key that lost about what the new one gained is where its units came from.
        if abs(-change - rise) <= 0.1 * rise:
            return group.partition("=")[2]
    return None


def _node_change(join: JoinEffect, right_key: str, ctx: PlanContext) -> Proposal:
    graph = ctx.diagnosis.graph
    key = join.asset_key
    node_id = ctx.metadata(key, "coalesce/node_id")
    env = ctx.metadata(key, "coalesce/environment") or {}
    if not node_id or not env.get("id"):
        raise NoPlan(f"{key}: not a Coalesce node (no coalesce/node_id metadata)")
    node = ctx.coalesce.get_node(env["id"], node_id)
    right_columns = {}
    for column in graph.info(key).columns:
        for src_key, src_col in graph.column_sources((key, column)):
            if src_key == right_key:
                right_columns[column] = src_col
    after, right_ref, test_name = keep_unmatched(node, join.right, ctx.diagnosis.resolve_table, right_columns)
    before = definition(node)
    name = f"{node.location_name}/{node.name}"
    change = NodeChange(
        environment_id=env["id"],
        environment_name=env.get("name"),
        node_id=node_id,
        node_name=node.name,
        asset_key=key,
        before=before,
        after=after,
        diff=unified_diff(before, after, name),
        right_ref=right_ref,
        test_name=test_name,
    )
    return Proposal(
        proposal_id=f"node-{node.name}",
        kind=ProposalKind.NODE_CHANGE,
        title=f"{node.name}: LEFT JOIN {graph.info(right_key).table_name}, unmatched as UNMAPPED, add test {test_name}",
        owners=teams(graph.info(key).owners, ctx),
        node_change=change,
    )


def _scoped_rerun(change: NodeChange, reference_keys: Sequence[str], ctx: PlanContext) -> Proposal:
    graph = ctx.diagnosis.graph
    between: list[str] = []
    for ref in reference_keys:
        for k in graph.path(ref, change.asset_key)[1:-1]:
            name = table_parts(graph.info(k).table_name)
            if name and "coalesce" in graph.info(k).kinds and graph.info(k).node_type != "Source":
                between.append(name[2])
    between = list(dict.fromkeys(between))
    selector = " OR ".join([*(f"{{name: {n}}}" for n in between), f"{{name: {change.node_name}}}+"])
    reason = f"{change.node_name} and everything downstream"
    if between:
        reason += f", plus {', '.join(between)} so the new reference row reaches the join"
    return Proposal(
        proposal_id=f"rerun-{change.node_name}",
        kind=ProposalKind.SCOPED_RERUN,
        title=f"Rerun {selector} in {change.environment}",
        owners=teams(graph.info(change.asset_key).owners, ctx),
        rerun=ScopedRerun(
            environment_id=change.environment_id,
            environment_name=change.environment_name,
            include_selector=selector,
            reason=reason,
        ),
    )


def _expectations(
    incident: Incident,
    diagnosis: Diagnosis,
    radius: BlastRadius,
    join: JoinEffect,
    test_name: str,
    ctx: PlanContext,
) -> list[Expectation]:
    out = reconciles(diagnosis, ctx)
    out.append(Expectation(kind="node_test_passed", subject=test_name))
    # The node keeps the rows its join dropped: that night's row count plus them, exactly.
    parts = table_parts(ctx.diagnosis.graph.info(join.asset_key).table_name)
    day = incident.business_date
    night = (
        ctx.diagnosis.history.volume_history(join.asset_key, day + timedelta(days=1), 1).get(day)
        if day
        else None
    )
    if parts and night is not None and night.value is not None:
        out.append(
            Expectation(
                kind="rows_restored",
                subject=join.asset_key,
                target=night.value + join.dropped_rows,
                tolerance=0,
                table_parts=parts,
            )
        )
    return out + back_to_baseline(radius, ctx)
