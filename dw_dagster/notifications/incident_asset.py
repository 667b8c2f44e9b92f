"""dw-dagster's own asset in the Dagster UI, ``dw/incidents``: one materialization each time an incident
changes, showing the incident as a person reads it (``incident_view.py``), and one per receipt.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from dw_dagster.notifications.incident_view import IncidentView, incident_markdown, status_label
from dw_dagster.notifications.receipt_text import receipt_markdown
from dw_dagster.notifications.text import humanise_names, rounded
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Incident, IncidentEvent
from dw_dagster.records.remediation import Receipt

INCIDENTS_KEY = dg.AssetKey(["dw", "incidents"])
"""dw-dagster's own asset: one materialization per incident change."""


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
        # The event list of dw/incidents shows the description: it says which incident the event is about.
        description=f"{incident.incident_id}: {humanise_names(incident.title)} ({status_label(incident)})",
        metadata={
            **({"receipt": dg.MetadataValue.md(receipt)} if receipt else {}),
            "incident_id": incident.incident_id,
            "status": status_label(incident),
            "business_date": str(incident.business_date),
            "findings": len(findings),
            "incident": dg.MetadataValue.md(markdown),
            "incident_json": dg.MetadataValue.json(
                rounded(
                    {
                        **incident.model_dump(mode="json"),
                        "findings": [f.detail for f in findings],
                        "explained": [e.detail for e in explained],
                        "diagnosis": diagnosis.model_dump(mode="json") if diagnosis else None,
                        "blast_radius": radius.model_dump(mode="json") if radius else None,
                    }
                )
            ),
            **({"classification": diagnosis.classification.value} if diagnosis else {}),
            **({"proposed_fix": dg.MetadataValue.md(proposed_fix)} if proposed_fix else {}),
        },
        tags={"dw/incident_id": incident.incident_id},
    )


def receipt_materialization(r: Receipt, status: str) -> dg.AssetMaterialization:
    return dg.AssetMaterialization(
        asset_key=INCIDENTS_KEY,
        description=f"Receipt for {r.incident_id}: verification {'passed' if r.verified else 'failed'}",
        metadata={
            # First: after a fix the receipt is what the on-call reads (docs/incidents.md).
            "receipt": dg.MetadataValue.md(receipt_markdown(r)),
            "incident_id": r.incident_id,
            "status": status,
            "receipt_json": dg.MetadataValue.json(r.model_dump(mode="json")),
            "verified": r.verified,
            "coalesce_run_id": str(r.coalesce_run_id),
        },
        tags={"dw/incident_id": r.incident_id},
    )


def view_materialization(view: IncidentView, proposed_fix: str | None = None) -> dg.AssetMaterialization:
    """The ``dw/incidents`` event of an incident as its record now reads (``incident_view.view_of``)."""
    return incident_materialization(
        view.incident,
        view.of_kind("finding"),
        view.diagnosis,
        view.radius,
        proposed_fix,
        receipt=view.receipt,
        status_events=view.of_kind("status"),
        explained=view.of_kind("explained"),
    )
