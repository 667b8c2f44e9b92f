"""One incident's diagnosis as the incident sensor's run makes it: the cause and its evidence, the blast
radius, both recorded, and whether the night stands as its own incident or continues an open one
(``lifecycle.settle``, once per provisional incident). What is told to whom, and the fix proposed, are
the composition root's (``app/incidents.py``), which calls this."""

from __future__ import annotations

from dataclasses import dataclass

from dw_dagster.incidents.blast_radius import blast_radius
from dw_dagster.incidents.diagnosis import DiagnosisContext, by_priority, diagnose
from dw_dagster.incidents.events import findings_of, latest_diagnosis, record_diagnosis
from dw_dagster.incidents.lifecycle import Settlement, carried_target, continue_carried, settle
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import BlastRadius, CauseClass, Diagnosis, Finding, Incident
from dw_dagster.records.policy import IncidentPolicy


@dataclass
class Triage:
    diagnosis: Diagnosis
    radius: BlastRadius
    settlement: Settlement | None
    """None when the incident was settled by an earlier diagnosis (findings joined it since)."""

    @property
    def continues(self) -> Incident | None:
        """The older open incident tonight's findings continue or reopen, if any."""
        s = self.settlement
        return s.incident if s is not None and s.kind != "stands" else None


def triage(
    store: IncidentStore,
    incident: Incident,
    findings: list[Finding],
    start: str,
    ctx: DiagnosisContext,
    policy: IncidentPolicy,
) -> Triage:
    """Diagnoses ``incident`` from ``findings`` (walking the lineage from ``start``), sizes the blast radius,
    records both, and settles a provisional incident. A night that continues an older incident is recorded
    there too: the older incident's record holds tonight's numbers, with no second diagnosis."""
    carried = carried_target(store, findings) if "dedup" not in incident.detail else None
    if carried is not None and carried.incident_id != incident.incident_id:
        # A cumulative total still holding a bad night of its period: that night's fault, continued; its
        # diagnosis stands (tonight's numbers are right in themselves, there is nothing new to diagnose).
        settlement = continue_carried(store, incident, findings, carried)
        known = latest_diagnosis(store, carried.incident_id)
        diagnosis, radius = known or (diagnose(incident, findings, ctx), BlastRadius())
        return Triage(diagnosis, radius, settlement)
    diagnosis = diagnose(incident, findings, ctx)
    radius = blast_radius(start, incident.business_date or findings[0].business_date, diagnosis, ctx)
    record_diagnosis(store, incident.incident_id, len(findings), diagnosis, radius)
    settlement = (
        settle(store, incident, diagnosis, findings, policy) if "dedup" not in incident.detail else None
    )
    if diagnosis.classification is CauseClass.UNKNOWN and (settlement is None or settlement.kind == "stands"):
        # Thin evidence is no ERROR: a WARN that says what was deviant and what was checked.
        store.downgrade(
            incident.incident_id,
            title=f"unexplained deviation: {by_priority(findings)[0].summary}",
            reason=diagnosis.cause,
        )
    found = Triage(diagnosis, radius, settlement)
    if found.continues is not None:
        target = found.continues.incident_id
        record_diagnosis(store, target, len(findings_of(store, target)), diagnosis, radius)
    return found
