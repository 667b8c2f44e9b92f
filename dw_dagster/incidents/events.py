"""An incident's findings and diagnoses, read from and written to its events (``store.py``)."""

from __future__ import annotations

from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Finding, IncidentEvent


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
    return diagnosis_of(store.events(incident_id, kind="diagnosis"))


def diagnosis_of(events: list[IncidentEvent]) -> tuple[Diagnosis, BlastRadius] | None:
    """The latest diagnosis and blast radius among ``events``, if any."""
    diagnoses = [e for e in events if e.kind == "diagnosis"]
    if not diagnoses:
        return None
    detail = diagnoses[-1].detail
    return Diagnosis.model_validate(detail["diagnosis"]), BlastRadius.model_validate(detail["blast_radius"])
