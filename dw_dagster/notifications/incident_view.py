"""One incident as a person reads it, assembled from its events: the ``dw/incidents`` materialization in the
Dagster UI (each time an incident changes; ``incident_asset.py``) and ``incidents show``. Dagster is imported
only to make the materialization: ``incidents show`` and ``incidents list`` do without it.

After a fix the receipt is what the on-call wants first, so every materialization of an incident that was
open when the latest receipt was written carries that receipt as its first entry: a later change (an
explained row-count step, another incident resolving) does not bury it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dw_dagster.incidents.events import diagnosis_of
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.receipt_text import receipt_markdown
from dw_dagster.notifications.text import humanise_names
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Incident, IncidentEvent
from dw_dagster.records.remediation import Receipt


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
        lines.append(
            f"**Cause:** {dedup.get('classification')} at {dedup.get('root')} ({keys}), dedup key "
            f"`{dedup.get('key')}`  "
        )
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
        lines += ["", f"#### Diagnosis: {diagnosis.classification.words}", diagnosis.cause, ""]
        lines += [
            f"- **{k}**: {v:,.1f}"
            if isinstance(v, float)
            else f"- **{k}**: {', '.join(v) if isinstance(v, list) else v}"
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


@dataclass
class IncidentView:
    incident: Incident
    events: list[IncidentEvent]
    receipt: str | None = None
    diagnosis: Diagnosis | None = None
    radius: BlastRadius | None = None

    def of_kind(self, *kinds: str) -> list[IncidentEvent]:
        return [e for e in self.events if e.kind in kinds]

    def markdown(self) -> str:
        lines = [
            incident_markdown(
                self.incident,
                self.of_kind("finding"),
                self.diagnosis,
                self.radius,
                status_events=self.of_kind("status"),
                explained=self.of_kind("explained"),
            )
        ]
        notes = [_note(e) for e in self.of_kind("continued", "linked", "stale")]
        if notes:
            lines += ["", "#### Lifecycle", *notes]
        messages = self.of_kind("slack_message")
        if messages:
            channels = sorted({e.detail.get("channel", "?") for e in messages})
            lines += [
                "",
                f"Slack: {len(messages)} message{'s' if len(messages) != 1 else ''} in {', '.join(channels)}",
            ]
        if self.receipt:
            lines += ["", self.receipt]
        return "\n".join(lines)

    def line(self) -> str:
        """One line of ``incidents list``: id, state, nights, class, title."""
        s = self.summary()
        nights = s["nights"]
        shown = "-" if not nights else nights[0] if len(nights) == 1 else f"{nights[0]}..{nights[-1]}"
        return f"{s['incident_id']}  {s['state']:<28} {shown:<22} {s['classification'] or '-':<22} {humanise_names(s['title'])[:90]}"

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


def view_of(store: IncidentStore, incident: Incident) -> IncidentView:
    events = store.events(incident.incident_id)
    found = diagnosis_of(events)
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
