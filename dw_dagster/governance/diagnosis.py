"""The diagnosis of a sensitive new column's incident: the finding already says what and where, so it is read,
not measured (no query reads the column's values again), and it goes to the governance owners."""

from __future__ import annotations

from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident


def sensitive_column_diagnosis(incident: Incident, finding: Finding) -> Diagnosis:
    e = finding.evidence
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.SCHEMA_CHANGE,
        cause=finding.summary,
        evidence={
            k: str(e[k])
            for k in ("column", "data_type", "category", "matched_by", "matched", "table")
            if e.get(k)
        },
        path=[finding.asset_key, *e.get("downstream_assets", [])],
        cause_asset=finding.asset_key,
        owners=list(e.get("owners", [])),
        notes=["A governance finding: nothing was changed, and nothing is proposed."],
    )
