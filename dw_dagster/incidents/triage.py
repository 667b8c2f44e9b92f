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
    there too: the older incident's record holds tonight's numbers, with no second diagnosis.

    No ERROR incident stands with a cause nobody could tell: an ``unknown`` diagnosis makes its incident a
    WARN "unexplained deviation" as soon as it is made, before anything else that could fail (an unknown
    cause never continues an older incident, so it stands whatever the settlement). A blast radius that
    cannot be sized is said in the diagnosis's notes and recorded empty; the diagnosis is recorded anyway."""
    carried = carried_target(store, findings) if "dedup" not in incident.detail else None
    if carried is not None and carried.incident_id != incident.incident_id:
        # A cumulative total still holding a bad night of its period: that night's fault, continued; its
        # diagnosis stands (tonight's numbers are right in themselves, there is nothing new to diagnose).
        settlement = continue_carried(store, incident, findings, carried)
        known = latest_diagnosis(store, carried.incident_id)
        if known is not None:
            return Triage(*known, settlement)
        # The bad night was never diagnosed (its diagnosis job failed): diagnosed now, from its own findings,
        # and recorded there; a cause nobody can tell is no ERROR there either.
        theirs = findings_of(store, carried.incident_id)
        diagnosis = diagnose(carried, theirs, ctx)
        _unexplained(store, carried.incident_id, diagnosis, theirs)
        radius, diagnosis = _radius(start, carried.business_date or theirs[0].business_date, diagnosis, ctx)
        record_diagnosis(store, carried.incident_id, len(theirs), diagnosis, radius)
        return Triage(diagnosis, radius, settlement)
    diagnosis = diagnose(incident, findings, ctx)
    _unexplained(store, incident.incident_id, diagnosis, findings)
    radius, diagnosis = _radius(start, incident.business_date or findings[0].business_date, diagnosis, ctx)
    record_diagnosis(store, incident.incident_id, len(findings), diagnosis, radius)
    settlement = (
        settle(store, incident, diagnosis, findings, policy) if "dedup" not in incident.detail else None
    )
    found = Triage(diagnosis, radius, settlement)
    if found.continues is not None:
        target = found.continues.incident_id
        record_diagnosis(store, target, len(findings_of(store, target)), diagnosis, radius)
    return found


def _unexplained(
    store: IncidentStore, incident_id: str, diagnosis: Diagnosis, findings: list[Finding]
) -> None:
    """Thin evidence is no ERROR: a WARN that says what was deviant and what was checked."""
    if diagnosis.classification is CauseClass.UNKNOWN and findings:
        store.downgrade(
            incident_id,
            title=f"unexplained deviation: {by_priority(findings)[0].summary}",
            reason=diagnosis.cause,
        )


def _radius(start: str, day, diagnosis: Diagnosis, ctx: DiagnosisContext) -> tuple[BlastRadius, Diagnosis]:
    """The blast radius, or an empty one and a note in the diagnosis saying why it could not be sized: the
    diagnosis and the alert do not wait on it."""
    try:
        return blast_radius(start, day, diagnosis, ctx), diagnosis
    except Exception as e:  # noqa: BLE001 - a radius that cannot be sized must not cost the diagnosis
        note = f"the blast radius could not be sized: {type(e).__name__}: {e}"
        return BlastRadius(), diagnosis.model_copy(update={"notes": [*diagnosis.notes, note]})
