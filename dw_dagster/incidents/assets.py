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


def status_label(incident: Incident) -> str:
    """``open``, ``open, stale since 2025-06-19``, ``open, reopened``, ``merged into INC-...``, ``resolved``."""
    if incident.status == "merged":
        return f"merged into {incident.merged_into}"
    notes = [incident.status]
    if incident.status == "open" and incident.detail.get("reopened"):
        notes.append("reopened")
    if incident.status == "open" and incident.stale_since:
        notes.append(f"stale since {incident.stale_since}")
    return ", ".join(notes)


def lifecycle_lines(incident: Incident, status_events: Sequence[IncidentEvent] = ()) -> list[str]:
    """The incident's cause key, links and changes of status, for the UI and ``incidents show``."""
    detail = incident.detail
    lines = []
    dedup = detail.get("dedup")
    if dedup:
        keys = ", ".join(dedup.get("keys") or []) or "no keys"
        lines.append(f"**Cause:** {dedup.get('classification')} at {dedup.get('root')} ({keys}), dedup key "
                     f"`{dedup.get('key')}`  ")  # fmt: skip
    if detail.get("related"):
        lines.append(f"**Related open incidents (other causes):** {', '.join(detail['related'])}  ")
    for e in status_events:
        d = e.detail
        lines.append(
            f"- {e.at:%Y-%m-%d %H:%M} UTC: {d.get('from')} -> {d.get('to')} by {d.get('by')}: {d.get('reason')}"
        )
    return lines


def incident_markdown(
    incident: Incident,
    findings: Sequence[IncidentEvent],
    diagnosis: Diagnosis | None = None,
    radius: BlastRadius | None = None,
    *,
    status_events: Sequence[IncidentEvent] = (),
    explained: Sequence[IncidentEvent] = (),
) -> str:
    lines = [
        f"### {incident.incident_id} ({status_label(incident)})",
        f"**Business date:** {incident.business_date}  ",
        f"**Cause scope:** {incident.cause_key}  ",
        f"**Opened:** {incident.opened_at:%Y-%m-%d %H:%M} UTC  ",
        *lifecycle_lines(incident, status_events),
        "",
        "| night | check | asset | finding |",
        "|---|---|---|---|",
    ]
    for f in findings:
        d = f.detail
        lines.append(
            f"| {d.get('business_date')} | {d.get('check_name')} | {d.get('asset_key')} | "
            f"{d.get('summary', '').replace('|', '/')} |"
        )
    if explained:
        lines += ["", "Explained, not an incident (WARN):"]
        lines += [
            f"- {e.detail.get('business_date')} {e.detail.get('check_name')} on {e.detail.get('asset_key')}: "
            f"{e.detail.get('summary')} (explained by {e.detail.get('explained_by')})"
            for e in explained
        ]
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
    *,
    receipt: str | None = None,
    status_events: Sequence[IncidentEvent] = (),
    explained: Sequence[IncidentEvent] = (),
) -> dg.AssetMaterialization:
    """``proposed_fix``: the remediation plan as markdown, when the diagnosis proposed one; ``receipt``: the
    latest fix's receipt as markdown, shown first (a later change must not bury it)."""
    markdown = incident_markdown(
        incident, findings, diagnosis, radius, status_events=status_events, explained=explained
    )
    return dg.AssetMaterialization(
        asset_key=INCIDENTS_KEY,
        description=f"{incident.title} ({status_label(incident)})",
        metadata={
            **({"receipt": dg.MetadataValue.md(receipt)} if receipt else {}),
            "incident_id": incident.incident_id,
            "status": status_label(incident),
            "business_date": str(incident.business_date),
            "findings": len(findings),
            "incident": dg.MetadataValue.md(markdown),
            "incident_json": dg.MetadataValue.json(
                {
                    **incident.model_dump(mode="json"),
                    "findings": [f.detail for f in findings],
                    "explained": [e.detail for e in explained],
                    "diagnosis": diagnosis.model_dump(mode="json") if diagnosis else None,
                    "blast_radius": radius.model_dump(mode="json") if radius else None,
                }
            ),
            **({"classification": diagnosis.classification.value} if diagnosis else {}),
            **({"proposed_fix": dg.MetadataValue.md(proposed_fix)} if proposed_fix else {}),
        },
        tags={"dw/incident_id": incident.incident_id},
    )
