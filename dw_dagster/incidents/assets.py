"""Incidents in the Dagster UI: the ``dw/incidents`` asset, materialized each time an incident changes."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from dw_dagster.incidents.models import BlastRadius, Diagnosis, Incident, IncidentEvent

INCIDENTS_KEY = dg.AssetKey(["dw", "incidents"])

incidents_spec = dg.AssetSpec(
    key=INCIDENTS_KEY,
    description="Open and resolved incidents, one per cause. Each materialization is one incident's latest state.",
    group_name="dw_operations",
    kinds={"snowflake"},
)


def incident_markdown(
    incident: Incident,
    findings: Sequence[IncidentEvent],
    diagnosis: Diagnosis | None = None,
    radius: BlastRadius | None = None,
) -> str:
    lines = [
        f"### {incident.incident_id} ({incident.status})",
        f"**Business date:** {incident.business_date}  ",
        f"**Cause scope:** {incident.cause_key}  ",
        f"**Opened:** {incident.opened_at:%Y-%m-%d %H:%M} UTC",
        "",
        "| check | asset | finding |",
        "|---|---|---|",
    ]
    for f in findings:
        d = f.detail
        lines.append(
            f"| {d.get('check_name')} | {d.get('asset_key')} | {d.get('summary', '').replace('|', '/')} |"
        )
    if diagnosis is not None:
        lines += ["", f"#### Diagnosis: {diagnosis.classification.value}", diagnosis.cause, ""]
        lines += [
            f"- **{k}**: {v:,.1f}" if isinstance(v, float) else f"- **{k}**: {v}"
            for k, v in diagnosis.evidence.items()
        ]
        if diagnosis.keys:
            lines += ["", "| key | units | rows | items | new since |", "|---|---:|---:|---:|---|"]
            lines += [
                f"| {g.label} | {g.units:,.0f} | {g.rows:,} | {g.distinct_items or ''} | "
                f"{g.new_in_source_since or ''} |"
                for g in diagnosis.keys[:10]
            ]
        if diagnosis.test_query:
            lines += ["", "Test query:", "```sql", diagnosis.test_query, "```"]
    if radius is not None:
        lines += ["", "#### Blast radius", "| asset | owners | change | next read |", "|---|---|---|---|"]
        for a in radius.assets:
            change = "; ".join(
                f"{k}: {v.get('before'):,.0f} -> {v.get('after'):,.0f}"
                if isinstance(v, dict)
                else f"{k}: {v}"
                for k, v in a.change.items()
            )
            lines.append(f"| {a.asset_key} | {', '.join(a.owners)} | {change} | {a.next_read or ''} |")
        if radius.newly_flagged:
            lines.append(
                f"\nNewly flagged: {len(radius.newly_flagged)} ({', '.join(radius.newly_flagged[:10])}, ...)"
            )
    return "\n".join(lines)


def incident_materialization(
    incident: Incident,
    findings: Sequence[IncidentEvent],
    diagnosis: Diagnosis | None = None,
    radius: BlastRadius | None = None,
    proposed_fix: str | None = None,
) -> dg.AssetMaterialization:
    """``proposed_fix``: the remediation plan as markdown, when the diagnosis proposed one."""
    return dg.AssetMaterialization(
        asset_key=INCIDENTS_KEY,
        description=incident.title,
        metadata={
            "incident_id": incident.incident_id,
            "status": incident.status,
            "business_date": str(incident.business_date),
            "findings": len(findings),
            "incident": dg.MetadataValue.md(incident_markdown(incident, findings, diagnosis, radius)),
            "incident_json": dg.MetadataValue.json(
                {
                    **incident.model_dump(mode="json"),
                    "findings": [f.detail for f in findings],
                    "diagnosis": diagnosis.model_dump(mode="json") if diagnosis else None,
                    "blast_radius": radius.model_dump(mode="json") if radius else None,
                }
            ),
            **({"classification": diagnosis.classification.value} if diagnosis else {}),
            **({"proposed_fix": dg.MetadataValue.md(proposed_fix)} if proposed_fix else {}),
        },
        tags={"dw/incident_id": incident.incident_id},
    )
