"""Plans for causes in a source table: a load applied twice, a feed that stopped.

Duplication: the source's owner confirms (their approval of the de-duplication), the remediation job removes
the copies of the duplicated keys from the source table, keeping them in the ops schema for undo, then a
scoped rerun rebuilds everything that reads the source. Their owner may prefer to reload the table from its
system instead: they reject the plan and say so, and nothing is changed.

Stale input: the source's owner confirms the feed is fixed (their approval of the wait), the job waits until
the source holds a load later than the stale one, then a scoped rerun rebuilds what read it.

Both are verified like the reference night's: the class's own check (no copies left; the rebuilt table
holds the source's latest load), totals reconciled and back to their baseline.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from dw_dagster.incidents.duplication import load_column
from dw_dagster.incidents.structure import is_source
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Incident
from dw_dagster.records.remediation import AwaitSource, Dedupe, Expectation, Proposal, ProposalKind
from dw_dagster.remediation.plan_common import (
    NoPlan,
    PlanContext,
    asset_teams,
    back_to_baseline,
    built_children,
    environment_of,
    reconciles,
    rerun_proposal,
    source_owner_teams,
)
from dw_dagster.sql import table_parts, table_reference


def _sources_of(diagnosis: Diagnosis, ctx: PlanContext, evidence_key: str) -> list[str]:
    """The source tables the diagnosis names in its evidence (``a/b, c/d``)."""
    graph = ctx.diagnosis.graph
    named = str(diagnosis.evidence.get(evidence_key) or "")
    candidates = [k.strip() for k in named.split(",") if k.strip()] or diagnosis.path[:1]
    found = [
        k for k in candidates if k in graph and is_source(graph, k) and table_parts(graph.info(k).table_name)
    ]
    if not found:
        raise NoPlan(f"{diagnosis.classification.value}: the diagnosis names no source table to act on")
    return found


def _rerun_owner(children: list[str], ctx: PlanContext) -> list[str]:
    owners = [t for k in children for t in asset_teams(k, ctx)]
    return list(dict.fromkeys(owners))[:1]


def _baselines(diagnosis: Diagnosis, radius: BlastRadius, ctx: PlanContext) -> list[Expectation]:
    name = str(diagnosis.evidence.get("total") or "")
    expected = diagnosis.evidence.get("baseline_expected")
    also = {name: float(expected)} if name and isinstance(expected, int | float) else {}
    return back_to_baseline(radius, ctx, also)


def dedupe_plan(
    incident: Incident, diagnosis: Diagnosis, radius: BlastRadius, ctx: PlanContext
) -> tuple[list[Proposal], list[Expectation]]:
    key = _sources_of(diagnosis, ctx, "duplicates_in")[0]
    graph = ctx.diagnosis.graph
    parts = table_parts(graph.info(key).table_name)
    assert parts is not None
    columns = list(graph.info(key).columns)
    if not columns:
        raise NoPlan(f"{key}: its columns are not known; a copy cannot be told from its original")
    keyed = [k for k in diagnosis.keys if k.value is not None and k.column in columns]
    key_column = keyed[0].column if keyed else None
    values = [str(k.value) for k in keyed if k.column == key_column]
    digest = hashlib.sha256(f"{incident.incident_id}|{key}|{values}".encode()).hexdigest()[:10]
    backup = (parts[0], ctx.diagnosis.metrics.ops_schema, f"DW_DEDUPE_{digest.upper()}")
    extra = int(diagnosis.evidence.get("duplicate_rows") or sum(k.rows for k in keyed))
    children = built_children(key, ctx)
    if not children:
        raise NoPlan(f"{key}: no Coalesce node reads it; nothing to rebuild")
    env = environment_of(children[0], ctx)
    owners = source_owner_teams(key, ctx)
    scope = f" of {key_column} {', '.join(values)}" if values else ""
    load = diagnosis.evidence.get("duplicate_load")
    dedupe = Proposal(
        proposal_id=f"dedupe-{parts[2]}",
        kind=ProposalKind.DEDUPE,
        title=f"Remove the {extra:,} duplicate rows{scope} from {parts[2]}"
        + (f" ({load})" if load else "")
        + f", keeping one of each; the copies are kept in {table_reference(*backup)} for undo",
        owners=owners,
        dedupe=Dedupe(
            asset_key=key,
            table_parts=parts,
            columns=columns,
            key_column=key_column,
            key_values=values,
            extra_rows=extra,
            backup_parts=backup,
        ),
    )
    rerun = rerun_proposal(
        env,
        children,
        f"everything that reads {parts[2]}, rebuilt without the copies",
        _rerun_owner(children, ctx) or owners,
        ctx,
    )
    expectations = [
        Expectation(kind="no_duplicates", subject=key, table_parts=parts, columns=columns),
        *reconciles(diagnosis, ctx, [key]),
        *_baselines(diagnosis, radius, ctx),
    ]
    return [dedupe, rerun], expectations


def stale_plan(
    incident: Incident, diagnosis: Diagnosis, radius: BlastRadius, ctx: PlanContext
) -> tuple[list[Proposal], list[Expectation]]:
    graph = ctx.diagnosis.graph
    keys = _sources_of(diagnosis, ctx, "stale_tables")
    waits, children = [], []
    for key in keys:
        parts = table_parts(graph.info(key).table_name)
        assert parts is not None
        column = load_column(ctx.diagnosis, key)
        if column is None:
            raise NoPlan(f"{key}: no column says when its rows were loaded; caught up cannot be measured")
        latest = _latest(ctx, parts, column)
        feeding = [k for k in graph.assets.predecessors(key) if "coalesce" not in graph.info(k).kinds]
        system = feeding[0] if feeding else None
        children += [c for c in built_children(key, ctx) if c not in children]
        waits.append(
            Proposal(
                proposal_id=f"await-{parts[2]}",
                kind=ProposalKind.AWAIT_SOURCE,
                title=f"Once {system or parts[2]} has caught up ({parts[2]} loads a row after "
                f"{latest:%Y-%m-%d %H:%M}), rerun; approve once the feed is fixed",
                owners=source_owner_teams(key, ctx),
                await_source=AwaitSource(
                    asset_key=key, table_parts=parts, column=column, stale_since=latest, system=system
                ),
            )
        )
    if not children:
        raise NoPlan(f"{', '.join(keys)}: no Coalesce node reads it; nothing to rebuild")
    env = environment_of(children[0], ctx)
    owners = _rerun_owner(children, ctx) or waits[0].owners
    rerun = rerun_proposal(
        env, children, "everything that reads the stopped tables, rebuilt on the caught-up input", owners, ctx
    )
    rules = [r for r in ctx.diagnosis.metrics.freshness.inputs if r.input in keys]
    fresh = [
        Expectation(
            kind="input_fresh",
            subject=r.asset,
            table_parts=table_parts(graph.info(r.asset).table_name),
            columns=[r.column, r.input_column],
            source_parts=table_parts(graph.info(r.input).table_name),
            max_lag_minutes=r.max_lag_minutes,
        )
        for r in rules
        if table_parts(graph.info(r.asset).table_name)
    ]
    return [*waits, rerun], [*fresh, *reconciles(diagnosis, ctx, keys)]


def _latest(ctx: PlanContext, parts: tuple[str, str, str], column: str) -> datetime:
    from dw_dagster.sql import quote_identifier

    cur = ctx.diagnosis.cursor
    cur.execute(f"SELECT MAX({quote_identifier(column)}) FROM {table_reference(*parts)}")
    value = cur.fetchone()[0]
    if not isinstance(value, datetime):
        raise NoPlan(f"{table_reference(*parts)}: no {column} to wait on")
    return value if value.tzinfo else value.replace(tzinfo=UTC)
