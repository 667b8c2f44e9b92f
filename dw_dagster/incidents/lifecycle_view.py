"""One incident as a person reads it, assembled from its events: for ``dw/incidents`` and ``incidents show``.

After a fix the receipt is what the on-call wants first, so every materialization of an incident that was
open when the latest receipt was written carries that receipt as its first entry: a later change (an
explained row-count step, another incident resolving) does not bury it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg

from dw_dagster.incidents.assets import incident_markdown, incident_materialization, status_label
from dw_dagster.incidents.models import BlastRadius, Diagnosis, Finding, Incident, IncidentEvent
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.remediation.models import Receipt
from dw_dagster.remediation.receipt import receipt_markdown


@dataclass
class IncidentView:
    incident: Incident
    events: list[IncidentEvent]
    receipt: str | None = None
    diagnosis: Diagnosis | None = None
    radius: BlastRadius | None = None

    def of_kind(self, *kinds: str) -> list[IncidentEvent]:
        return [e for e in self.events if e.kind in kinds]

    def materialization(self, proposed_fix: str | None = None) -> dg.AssetMaterialization:
        return incident_materialization(
            self.incident, self.of_kind("finding"), self.diagnosis, self.radius, proposed_fix,
            receipt=self.receipt, status_events=self.of_kind("status"), explained=self.of_kind("explained"),
        )  # fmt: skip

    def markdown(self) -> str:
        lines = [
            incident_markdown(
                self.incident,
                self.of_kind("finding"),
                self.diagnosis,
                self.radius,
                status_events=self.of_kind("status"),
                explained=self.of_kind("explained"),
            )  # fmt: skip
        ]
        notes = [_note(e) for e in self.of_kind("continued", "linked", "stale")]
        if notes:
            lines += ["", "#### Lifecycle", *notes]
        messages = self.of_kind("slack_message")
        if messages:
            channels = sorted({e.detail.get("channel", "?") for e in messages})
            lines += ["", f"Slack: {len(messages)} message(s) in {', '.join(channels)}"]
        if self.receipt:
            lines += ["", self.receipt]
        return "\n".join(lines)

    def line(self) -> str:
        """One line of ``incidents list``: id, state, nights, class, title."""
        s = self.summary()
        nights = s["nights"]
        shown = "-" if not nights else nights[0] if len(nights) == 1 else f"{nights[0]}..{nights[-1]}"
        return f"{s['incident_id']}  {s['state']:<28} {shown:<22} {s['classification'] or '-':<22} {s['title'][:90]}"

    def summary(self) -> dict[str, Any]:
        """One line of ``incidents list --json``."""
        findings = self.of_kind("finding")
        nights = sorted({str(e.detail.get("business_date")) for e in findings})
        dedup = self.incident.detail.get("dedup") or {}
        return {
            "incident_id": self.incident.incident_id,
            "status": self.incident.status,
            "state": status_label(self.incident),
            "severity": self.incident.severity,
            "title": self.incident.title,
            "opened_at": self.incident.opened_at.isoformat(),
            "updated_at": self.incident.updated_at.isoformat(),
            "nights": nights,
            "findings": len(findings),
            "explained": len(self.of_kind("explained")),
            "classification": self.diagnosis.classification.value if self.diagnosis else None,
            "dedup_key": dedup.get("key"),
            "cause_keys": dedup.get("keys", []),
            "merged_into": self.incident.merged_into,
            "related": self.incident.detail.get("related", []),
            "stale_since": self.incident.stale_since,
            "resolution": self.incident.detail.get("resolution"),
        }


def _note(e: IncidentEvent) -> str:
    d = e.detail
    if e.kind == "continued":
        verb = "reopened by" if d.get("reopened") else "continued by"
        return f"- {d.get('night')}: {verb} {d.get('incident_id')} (the same cause)"
    if e.kind == "linked":
        return f"- {d.get('incident_id')} opened on the same tables with another cause: {d.get('dedup')}"
    return f"- marked stale: {d.get('reason')}"


def findings_of(store: IncidentStore, incident_id: str) -> list[Finding]:
    return [Finding.model_validate(e.detail) for e in store.events(incident_id, kind="finding")]


def record_diagnosis(
    store: IncidentStore, incident_id: str, findings: int, diagnosis: Diagnosis, radius: BlastRadius
) -> None:
    """Recorded once per number of findings: the incident sensor diagnoses again when findings join."""
    store.append_event(
        incident_id,
        "diagnosis",
        f"diagnosis|{findings}",
        {"diagnosis": diagnosis.model_dump(mode="json"), "blast_radius": radius.model_dump(mode="json")},
    )


def latest_diagnosis(store: IncidentStore, incident_id: str) -> tuple[Diagnosis, BlastRadius] | None:
    return _latest(store.events(incident_id, kind="diagnosis"))


def _latest(events: list[IncidentEvent]) -> tuple[Diagnosis, BlastRadius] | None:
    diagnoses = [e for e in events if e.kind == "diagnosis"]
    if not diagnoses:
        return None
    detail = diagnoses[-1].detail
    return Diagnosis.model_validate(detail["diagnosis"]), BlastRadius.model_validate(detail["blast_radius"])


def view_of(store: IncidentStore, incident: Incident) -> IncidentView:
    events = store.events(incident.incident_id)
    found = _latest(events)
    view = IncidentView(
        incident, events, diagnosis=found[0] if found else None, radius=found[1] if found else None
    )
    view.receipt = pinned_receipt(store, incident, events)
    return view


def pinned_receipt(store: IncidentStore, incident: Incident, events: list[IncidentEvent]) -> str | None:
    """The incident's own latest receipt, else the latest receipt of all when the incident was already open
    when it was written."""
    own = [e for e in events if e.kind == "receipt"]
    latest = store.latest_events("receipt")
    chosen = own[-1] if own else (latest[0] if latest and incident.opened_at <= latest[0].at else None)
    if chosen is None:
        return None
    try:
        receipt = Receipt.model_validate(chosen.detail)
    except ValueError:
        return None
    text = receipt_markdown(receipt)
    return (
        text
        if chosen.incident_id == incident.incident_id
        else f"Latest fix ({chosen.incident_id}):\n\n{text}"
    )
