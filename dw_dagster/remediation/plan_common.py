"""What every remediation plan is built with: the context it reads, who owns what, the scoped rerun, and the
verification every plan shares (totals back in line with their source and with their last good night)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.notifications.owners import owner_team
from dw_dagster.records.incidents import BlastRadius, Diagnosis
from dw_dagster.records.remediation import Expectation, Proposal, ProposalKind, ScopedRerun
from dw_dagster.sql import table_parts


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


def teams(owners: Sequence[str], ctx: PlanContext) -> list[str]:
    """Team ids of asset owners (``team:x``, a member's email), without repeats."""
    found = [t for t in (owner_team(o, ctx.context) for o in owners) if t]
    return list(dict.fromkeys(found))


def asset_teams(key: str, ctx: PlanContext) -> list[str]:
    graph = ctx.diagnosis.graph
    return teams(graph.info(key).owners, ctx) if key in graph else []


def source_owner_teams(key: str, ctx: PlanContext) -> list[str]:
    """Who owns a source table: the teams of the systems that feed it (the replication task, the sheet),
    else the table's own owners."""
    graph = ctx.diagnosis.graph
    feeding = [k for k in graph.assets.predecessors(key) if "coalesce" not in graph.info(k).kinds]
    found = [t for k in feeding for t in asset_teams(k, ctx)]
    return list(dict.fromkeys(found)) or asset_teams(key, ctx)


def environment_of(key: str, ctx: PlanContext) -> tuple[str, str | None]:
    """The Coalesce environment a node is in: its id and its name."""
    env = ctx.metadata(key, "coalesce/environment") or {}
    if not env.get("id"):
        raise NoPlan(f"{key}: not a Coalesce node (no coalesce/environment metadata)")
    return str(env["id"]), env.get("name")


def node_name(key: str, ctx: PlanContext) -> str | None:
    parts = table_parts(ctx.diagnosis.graph.info(key).table_name)
    return parts[2] if parts else None


def built_children(key: str, ctx: PlanContext) -> list[str]:
    """The Coalesce-built nodes that read a table directly."""
    graph = ctx.diagnosis.graph
    return sorted(
        k
        for k in graph.assets.successors(key)
        if "coalesce" in graph.info(k).kinds and graph.info(k).node_type != "Source" and node_name(k, ctx)
    )


def rerun_proposal(
    environment: tuple[str, str | None],
    roots: Sequence[str],
    reason: str,
    owners: list[str],
    ctx: PlanContext,
    also: Sequence[str] = (),
) -> Proposal:
    """A scoped rerun: each root node and everything downstream of it, plus ``also`` (nodes only)."""
    names = [n for n in (node_name(k, ctx) for k in roots) if n]
    extra = [n for n in (node_name(k, ctx) for k in also) if n and n not in names]
    if not names:
        raise NoPlan("nothing to rerun: no Coalesce node downstream of the cause")
    selector = " OR ".join(
        [*(f"{{name: {n}}}" for n in dict.fromkeys(extra)), *(f"{{name: {n}}}+" for n in names)]
    )
    rerun = ScopedRerun(
        environment_id=environment[0],
        environment_name=environment[1],
        include_selector=selector,
        reason=reason,
    )
    return Proposal(
        proposal_id=f"rerun-{'-'.join(names)}",
        kind=ProposalKind.SCOPED_RERUN,
        title=f"Rerun {selector} in {rerun.environment}",
        owners=owners,
        rerun=rerun,
    )


def reconciles(diagnosis: Diagnosis, ctx: PlanContext, changed: Sequence[str] = ()) -> list[Expectation]:
    """Every reconciled total on the diagnosis's path, or reading what the fix changes (``changed``: tables
    and everything downstream of them), is back in line with its source."""
    graph = ctx.diagnosis.graph
    near = set(diagnosis.path) | set(changed)
    for key in changed:
        near |= graph.downstream(key) if key in graph else set()
    metrics = ctx.diagnosis.metrics
    return [
        Expectation(kind="reconciles", subject=t.name)
        for t in metrics.totals
        if t.reconcile_with is not None
        and (t.asset in near or metrics.get(t.reconcile_with.total).asset in near)
    ]


def back_to_baseline(
    radius: BlastRadius, ctx: PlanContext, also: Mapping[str, float] | None = None
) -> list[Expectation]:
    """Totals the incident moved are back to their value before it, within their baseline's band; ``also``
    adds totals (name -> value before) the blast radius does not list (the failing total itself)."""
    metrics = ctx.diagnosis.metrics
    before: dict[str, float] = dict(also or {})
    for asset in radius.assets:
        for name, change in asset.change.items():
            if isinstance(change, dict) and change.get("before") is not None:
                before.setdefault(name, float(change["before"]))
    out = []
    for name, value in before.items():
        total = next((t for t in metrics.totals if t.name == name), None)
        if total is None:
            continue
        tolerance = max(1.0, abs(value) * max(total.baseline.min_relative_change, 0.01))
        out.append(Expectation(kind="back_to_baseline", subject=name, target=value, tolerance=tolerance))
    return out
