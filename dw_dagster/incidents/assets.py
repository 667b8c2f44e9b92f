"""Incidents in the Dagster UI: the ``dw/incidents`` asset, materialized each time an incident changes."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from dw_dagster.incidents.models import Incident, IncidentEvent

INCIDENTS_KEY = dg.AssetKey(["dw", "incidents"])

incidents_spec = dg.AssetSpec(
    key=INCIDENTS_KEY,
    description="Open and resolved incidents, one per cause. Each materialization is one incident's latest state.",
    group_name="dw_operations",
    kinds={"snowflake"},
)


def incident_markdown(incident: Incident, findings: Sequence[IncidentEvent]) -> str:
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
        lines.append(f"| {d.get('check_name')} | {d.get('asset_key')} | {d.get('summary', '').replace('|', '/')} |")
    return "\n".join(lines)


def incident_materialization(incident: Incident, findings: Sequence[IncidentEvent]) -> dg.AssetMaterialization:
    return dg.AssetMaterialization(
        asset_key=INCIDENTS_KEY,
        description=incident.title,
        metadata={
            "incident_id": incident.incident_id,
            "status": incident.status,
            "business_date": str(incident.business_date),
            "findings": len(findings),
            "incident": dg.MetadataValue.md(incident_markdown(incident, findings)),
            "incident_json": dg.MetadataValue.json(
                {**incident.model_dump(mode="json"), "findings": [f.detail for f in findings]}
            ),
        },
        tags={"dw/incident_id": incident.incident_id},
    )
