"""From a diagnosis to a remediation plan: what to change, who must approve each part, and how to verify.

For an inner join that drops a key missing from a hand-maintained reference table (the reference night),
the plan holds three proposals, each owned by the team that owns what it touches:

- the reference row (``7120 -> DC7, South``) for the table's owner, drafted from the context file's
  ``reference_tables`` rule: ``draft_sql`` for what a source knows, ``copy_from_donor`` for what the key
  the units came from has (found in the source total's per-key history), the rest given on approval;
- the node change for the node's owner, as a unified diff of its Coalesce definition;
- a scoped rerun: the node and everything downstream, plus the built nodes between the reference table
  and the node, so the new row reaches the join.

Other classes (a duplicate load, a stalled replication, ...) are fixed upstream of the project: their
incidents are diagnosed and alerted, and get no plan here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.sql import quote_identifier, resolve_refs, table_parts, table_reference
from dw_dagster.context.models import Autonomy, ContextFile, ReferenceTable
from dw_dagster.incidents.diagnosis import DiagnosisContext
from dw_dagster.incidents.models import BlastRadius, CauseClass, Diagnosis, Incident, JoinEffect, KeyGap
from dw_dagster.notifications.owners import owner_team
from dw_dagster.notifications.routing import incident_domain
from dw_dagster.remediation.models import (
    Expectation,
    NodeChange,
    Proposal,
    ProposalKind,
    ReferenceRow,
    RemediationPlan,
    ScopedRerun,
)
from dw_dagster.remediation.node_change import definition, keep_unmatched, unified_diff

PLANNED_CLASSES = (CauseClass.VALUE_LOSS, CauseClass.REFERENCE_DATA_CHANGE)


@dataclass
class PlanContext:
    diagnosis: DiagnosisContext
    context: ContextFile
    specs: Mapping[str, dg.AssetSpec]
    coalesce: CoalesceClient

    def metadata(self, key: str, name: str) -> Any:
        value = self.specs[key].metadata.get(name)
        return getattr(value, "value", getattr(value, "data", value))


class NoPlan(Exception):
    """Why an incident gets no plan (said in the log, not an error)."""


def plan_remediation(
    incident: Incident,
    diagnosis: Diagnosis,
    radius: BlastRadius,
    ctx: PlanContext,
    now: datetime | None = None,
) -> RemediationPlan:
    """The plan for an incident's diagnosis. Raises :class:`NoPlan` when there is nothing to propose."""
    found = incident_domain(ctx.context, diagnosis, radius)
    domain_name, domain = found if found else (None, None)
    autonomy = domain.autonomy if domain else Autonomy.L1
    if not autonomy.at_least(Autonomy.L2):
        raise NoPlan(
            f"domain {domain_name or '(none)'} is at {autonomy.value}: observe only, nothing is proposed"
        )
    if diagnosis.classification not in PLANNED_CLASSES or not diagnosis.joins:
        raise NoPlan(f"{diagnosis.classification.value}: fixed upstream of the project; no plan")
    join = max(diagnosis.joins, key=lambda j: j.dropped_units)
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

    now = now or datetime.now(UTC)
    hours = domain.approval_timeout_hours if domain else 12.0
    body = [p.model_dump(mode="json") for p in proposals]
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
    return RemediationPlan(
        plan_id=f"{incident.incident_id}-{digest}",
        incident_id=incident.incident_id,
        domain=domain_name,
        autonomy=autonomy.value,
        proposals=proposals,
        expectations=_expectations(incident, diagnosis, radius, join, node.node_change.test_name, ctx),
        created_at=now,
        expires_at=now + timedelta(hours=hours),
    )


def _teams(owners: Sequence[str], ctx: PlanContext) -> list[str]:
    teams = [t for t in (owner_team(o, ctx.context) for o in owners) if t]
    return list(dict.fromkeys(teams))


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
            right_column = next((r for left, r in _on_pairs(join) if left == gap.column), gap.column)
            traced = graph.trace_column((right_key, right_column), ref_key)
            if traced is None or traced[1].upper() != rule.key_column.upper():
                continue
            row = _draft_row(rule, ref_key, parts, gap, diagnosis, incident, ctx)
            owners = _teams(graph.info(ref_key).owners, ctx)
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


def _typed(value: str, data_type: str) -> Any:
    """A key value from a group label, as the key column holds it: a whole number for an integer column
    (NUMBER(38,0), INT...), else the text as it is (a VARCHAR key keeps its leading zeros)."""
    t = data_type.upper().replace(" ", "")
    integral = t.startswith(("INT", "BIGINT", "SMALLINT")) or (t.startswith(("NUMBER", "DECIMAL", "NUMERIC")) and (
        "," not in t or t.endswith(",0)")))  # fmt: skip
    if integral:
        try:
            return int(value)
        except ValueError:
            pass
    return value


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
    key = _typed(gap.value, key_type)
    audit = set(rule.audit_columns.values())
    values: dict[str, Any] = {c: None for c in columns if c not in audit}
    values[key_column] = key
    drafted = {
        key_column: f"the key that matches nothing: {diagnosis.upstream_change or 'new in the source'}"
    }

    if rule.draft_sql:
        cur.execute(resolve_refs(rule.draft_sql, ctx.diagnosis.resolve_table), {"key": key})
        found = cur.fetchone()
        if found is not None:
            for d, v in zip(cur.description, found, strict=True):
                name = next((c for c in values if c.upper() == d[0].upper()), None)
                if name is not None and v is not None:
                    values[name] = v
                    drafted[name] = "the source (draft_sql)"
    donor = _donor(gap, incident, ctx)
    if donor is not None and rule.copy_from_donor:
        cols = ", ".join(quote_identifier(c) for c in rule.copy_from_donor)
        cur.execute(
            f"SELECT {cols} FROM {table} WHERE {quote_identifier(key_column)} = %s",
            (_typed(donor, key_type),),
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
    from (an org's transfers out to the new org)."""
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
        owners=_teams(graph.info(key).owners, ctx),
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
        title=f"Rerun {selector} in environment {change.environment_id}",
        owners=_teams(graph.info(change.asset_key).owners, ctx),
        rerun=ScopedRerun(
            environment_id=change.environment_id,
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
    metrics = ctx.diagnosis.metrics
    out = [
        Expectation(kind="reconciles", subject=t.name)
        for t in metrics.totals
        if t.reconcile_with is not None and t.asset in diagnosis.path
    ]
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
                table=table_reference(*parts),
            )  # fmt: skip
        )
    for asset in radius.assets:
        for name, change in asset.change.items():
            if not isinstance(change, dict) or "before" not in change:
                continue
            total = next((t for t in metrics.totals if t.name == name), None)
            if total is None or change.get("before") is None:
                continue
            tolerance = max(1.0, abs(change["before"]) * max(total.baseline.min_relative_change, 0.01))
            out.append(
                Expectation(
                    kind="back_to_baseline", subject=name, target=change["before"], tolerance=tolerance
                )
            )
    return out
