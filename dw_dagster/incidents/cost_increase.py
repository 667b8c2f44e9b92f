"""A cost jump's diagnosis: not a data fault, so nothing more is read from the warehouse. The nightly cost job
measured what there is to say (``dw_dagster/cost/night.py``): the node's credits against what its own
nights expected, the statements that grew, the costliest query ids (to open in Snowsight) and the Coalesce
runs; the diagnosis says it as a cause and keeps it as typed evidence."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import (
    CauseClass,
    Diagnosis,
    EvidenceValue,
    Finding,
    GrownStatement,
    Incident,
    credits_text,
)

COSTLIEST = 5
"""Query ids kept in the evidence (the finding keeps the node's five costliest)."""


def cost_diagnosis(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    e = finding.evidence
    evidence: dict[str, EvidenceValue] = {}
    for key in ("credits", "expected_credits", "robust_z"):
        if isinstance(e.get(key), int | float):
            evidence[key] = float(e[key])
    if e.get("job"):
        evidence["job"] = str(e["job"])
    runs, queries = _names(e.get("coalesce_runs")), _names(e.get("top_query_ids"))[:COSTLIEST]
    if runs:
        evidence["coalesce_runs"] = runs
    if queries:
        evidence["costliest_query_ids"] = queries
    grown = _statements(e.get("grown_queries"), ctx)
    asset = finding.asset_key
    known = asset in ctx.graph
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.COST_INCREASE,
        cause=_cause(finding, evidence, grown),
        evidence=evidence,
        statements=grown,
        # The node itself: what it reads upstream is the cost's reason, not its place.
        path=[asset],
        cause_asset=asset,
        owners=ctx.graph.owners_on([asset]) if known else [],
    )


def _cause(finding: Finding, evidence: dict[str, EvidenceValue], grown: list[GrownStatement]) -> str:
    credits, expected = evidence.get("credits"), evidence.get("expected_credits")
    night = finding.business_date.isoformat()
    if isinstance(credits, float) and isinstance(expected, float) and expected > 0:
        head = (
            f"{finding.asset_key} cost {credits_text(credits)} credits on {night}, {credits / expected - 1:+.0%} "
            f"on the {credits_text(expected)} its own nights expected"
        )
    else:
        head = finding.summary.split("; grew:")[0]
    if not grown:
        return f"{head}; no one statement grew beyond its own nights: the rise is spread over all of them."
    return f"{head}. Grew: {'; '.join(g.describe() for g in grown)}."


def _names(value: Any) -> list[str]:
    return [str(v) for v in value if v is not None] if isinstance(value, list) else []


def _statements(value: Any, ctx: DiagnosisContext) -> list[GrownStatement]:
    out = []
    for item in value if isinstance(value, list) else []:
        try:
            out.append(GrownStatement.model_validate(item))
        except ValidationError as e:
            ctx.note(
                f"a statement of the cost finding could not be read ({e.error_count()} errors): {item!r}"
            )
    return out
