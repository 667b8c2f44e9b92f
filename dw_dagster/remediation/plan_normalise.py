"""The plan for a unit or sign change on a subset: a node diff that normalises the subset's values where
the pipeline first reads them, with a node test that fails if they move again, then a scoped rerun.

The node is the first Coalesce node whose columns read the source column that moved (column lineage); the
subset's key must be a column the node reads from the same source. The divisor is the factor measured by
the diagnosis, to the precision the data supports (three per cent); the owner who applies the diff sees it and
the source's owner is told the source now posts another unit. The test's band comes from the node's own
table: the subset's average over the other rows' tonight, divided by the factor, is its usual ratio.
"""

from __future__ import annotations

import math

from dw_dagster.context.joins import JoinParseError, parse_node
from dw_dagster.incidents.structure import is_numeric, table
from dw_dagster.records.incidents import BlastRadius, CauseClass, Diagnosis, Incident
from dw_dagster.records.keys import typed
from dw_dagster.records.remediation import Expectation, NodeChange, Proposal, ProposalKind
from dw_dagster.remediation.node_change import definition, normalise, unified_diff
from dw_dagster.remediation.plan_common import (
    NoPlan,
    PlanContext,
    asset_teams,
    back_to_baseline,
    environment_of,
    reconciles,
    rerun_proposal,
    source_owner_teams,
)
from dw_dagster.sql import quote_identifier


def snap(factor: float, precision: float = 0.03) -> float:
    """The factor with the fewest significant digits within ``precision`` of the measured one (99.6 -> 100,
    11.99 -> 12, 3.68 -> 3.7, -0.98 -> -1)."""
    if factor == 0:
        return factor
    for digits in range(1, 5):
        shown = round(factor, digits - 1 - int(math.floor(math.log10(abs(factor)))))
        if abs(shown / factor - 1) <= precision:
            return shown
    return factor


def normalise_plan(
    incident: Incident, diagnosis: Diagnosis, radius: BlastRadius, ctx: PlanContext
) -> tuple[list[Proposal], list[Expectation]]:
    key = diagnosis.keys[0] if diagnosis.keys else None
    src, measure = (
        str(diagnosis.evidence.get("measure_source") or ""),
        str(diagnosis.evidence.get("measure") or ""),
    )
    if key is None or key.factor is None or not src or not measure or src not in ctx.diagnosis.graph:
        raise NoPlan(
            f"{diagnosis.classification.value}: the diagnosis names no subset, factor and source column"
        )
    g = ctx.diagnosis.graph
    total = next((t for t in ctx.diagnosis.metrics.totals if t.name == diagnosis.evidence.get("total")), None)
    key_src = str(diagnosis.evidence.get("key_source_column") or "")
    if key_src not in g.info(src).columns:
        raise NoPlan(f"{key.label}: not a column of {src}; the subset cannot be named where the values enter")
    readers = (
        sorted(
            c
            for c in g.columns.successors((src, measure))
            if c[0] in g and "coalesce" in g.info(c[0]).kinds and g.info(c[0]).node_type != "Source"
        )
        if (src, measure) in g.columns
        else []
    )
    keyed = [
        (reader, column, key_col)
        for reader, column in readers
        for key_col in sorted(g.columns.successors((src, key_src)), key=lambda c: c[1] != key_src)
        if key_col[0] == reader
    ]
    if not keyed:
        raise NoPlan(f"no Coalesce node reads both {src}.{measure} and {src}.{key_src}")
    reader, column, node_key = keyed[0]
    info = g.info(reader)
    try:
        aliases = parse_node(reader, info.join or "", ctx.diagnosis.resolve_table).aliases
    except JoinParseError as e:
        raise NoPlan(str(e)) from None
    alias = next((a for a, t in aliases.items() if t == table(g, src)), None)
    if alias is None:
        raise NoPlan(f"{reader}: its join text does not read {src} under an alias")
    factor = snap(key.factor)
    numeric = is_numeric(g, src, key_src)
    node_id = ctx.metadata(reader, "coalesce/node_id")
    env = environment_of(reader, ctx)
    node = ctx.coalesce.get_node(env[0], node_id)
    # The test names the subset by the node's own key column: one that carries the key as it is.
    carried = {c["name"]: c["transform"] for c in definition(node)["columns"]}
    plain_key = f"{quote_identifier(alias)}.{quote_identifier(key_src)}"
    if carried.get(node_key[1]) not in ("", None, plain_key):
        raise NoPlan(
            f"{reader}.{node_key[1]} is computed from {key_src} ({carried[node_key[1]]}), not {key_src} as it is"
        )
    band = _band(ctx, reader, node_key[1], column, key.value, numeric, factor)
    try:
        after, test_name = normalise(
            node,
            column,
            (alias, measure),
            (key_src, key.value, numeric),
            factor,
            (node_key[1], column, *band),
        )
    except ValueError as e:
        raise NoPlan(str(e)) from None
    before = definition(node)
    sign = diagnosis.classification is CauseClass.SIGN_CHANGE
    what = "restores the sign of" if sign else f"divides by {factor:g}"
    change = NodeChange(
        kind="normalise",
        environment_id=env[0],
        environment_name=env[1],
        node_id=node_id,
        node_name=node.name,
        asset_key=reader,
        before=before,
        after=after,
        diff=unified_diff(before, after, f"{node.location_name}/{node.name}"),
        test_name=test_name,
    )
    owners = asset_teams(reader, ctx)
    node_proposal = Proposal(
        proposal_id=f"node-{node.name}",
        kind=ProposalKind.NODE_CHANGE,
        title=f"{node.name}: {column} {what} {measure} for {key.label}, add test {test_name} "
        f"(tell {', '.join(source_owner_teams(src, ctx)) or 'the source owner'}: the source changed)",
        owners=owners,
        node_change=change,
    )
    rerun = rerun_proposal(env, [reader], f"{node.name} and everything downstream, normalised", owners, ctx)
    expected = diagnosis.evidence.get("baseline_expected")
    also = {total.name: float(expected)} if total and isinstance(expected, int | float) else {}
    # A source total read from the changed column keeps the source's new unit: its reconciliation with the
    # normalised totals would now fail by design, so only the others are expected to reconcile.
    metrics = ctx.diagnosis.metrics
    raw = {t.name for t in metrics.totals if t.asset == src}
    expectations = [
        Expectation(kind="node_test_passed", subject=test_name),
        *(
            e
            for e in reconciles(diagnosis, ctx, [src])
            if metrics.get(e.subject).reconcile_with.total not in raw
        ),  # type: ignore[union-attr]
        *(e for e in back_to_baseline(radius, ctx, also) if e.subject not in raw),
    ]
    return [node_proposal, rerun], expectations


def _band(
    ctx: PlanContext,
    reader: str,
    key_column: str,
    column: str,
    value: str | None,
    numeric: bool,
    factor: float,
) -> tuple[float, float]:
    """(low, high) of the subset's average over the other rows' once normalised; for a sign change, the
    sign the subset's values should have, twice. One statement on the node's table as built tonight."""
    k, m = quote_identifier(key_column), quote_identifier(column)
    subset = f"{k} IS NULL" if value is None else f"{k} = ?"
    params = () if value is None else (typed(value, "NUMBER" if numeric else ""),)
    cur = ctx.diagnosis.cursor
    cur.execute(
        f"SELECT AVG(CASE WHEN {subset} THEN {m} END), AVG(CASE WHEN NOT ({subset}) OR {k} IS NULL THEN {m} END)"
        f" FROM {table(ctx.diagnosis.graph, reader)}",
        params * 2 or None,
    )
    now, others = (float(v) if v is not None else None for v in cur.fetchone())
    if now is None or not others:
        raise NoPlan(f"{reader}: no rows of {key_column} {value} and of the others to set the test's band")
    usual = now / factor / others
    if factor < 0:
        sign = 1.0 if usual > 0 else -1.0
        return sign, sign
    spread = math.sqrt(max(factor, 1 / factor))
    low, high = sorted((usual / spread, usual * spread))
    return low, high
