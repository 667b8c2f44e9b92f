"""A legitimate change is not an incident: the row-count step that a fix in the record explains.

A verified fix changes the tables it rebuilt: rows the join dropped are back (``FCT_ORDERS``
gains the new account's 1,260 rows), a reference table gains the row that was added. The volume checks
see a step against their baseline on the rebuilt night and on the next nightly run, until the baseline
takes the new level. The lifecycle accepts the explanation the incident's record already holds, its
receipt (``INCIDENT_EVENTS``, kind ``receipt``: the proposals, the reference rows added, the verification),
and records such a finding as ``explained`` (WARN) on the fixed incident instead of opening one.

A finding is explained when all of these hold:

- it is a row-count finding (its evidence has the ``row_count`` and the baseline's ``expected``);
- its table is one the fix rebuilt: on the fixed incident's diagnosis path, a node the fix changed or a
  reference table it added rows to, or downstream of one of those;
- it moves the way the fix moves rows: up where the fix restored dropped rows or added reference rows, down
  where it removed duplicates, either way otherwise;
- its night is the fixed incident's own (the rerun rebuilds that business date) up to ``explained_nights``
  nights after its last finding (``IncidentPolicy``).

A receipt whose verification failed explains only the reference rows it added (they are in the warehouse).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, Literal

from dw_dagster.records.incidents import Finding, Incident
from dw_dagster.records.policy import IncidentPolicy

_ROWS_BACK = {"value_loss", "reference_data_change", "volume_loss"}


@dataclass(frozen=True)
class Explanation:
    incident_id: str
    why: str
    assets: frozenset[str]
    direction: Literal["up", "down", "either"]
    first_night: date
    last_night: date


def _night(finding_key: str) -> date | None:
    try:
        return date.fromisoformat(finding_key.rsplit("|", 1)[1])
    except (IndexError, ValueError):
        return None


def explanations(
    receipts: Sequence[tuple[Incident, dict[str, Any], dict[str, Any] | None, list[str]]],
    policy: IncidentPolicy,
) -> list[Explanation]:
    """What each receipt (with its incident, latest diagnosis and finding keys) explains."""
    out = []
    for incident, receipt, diagnosis, finding_keys in receipts:
        if incident.business_date is None:
            continue
        proposals = receipt.get("proposals") or []
        added_to = {
            (p.get("reference_row") or {}).get("asset_key")
            for p in proposals
            if any(
                c.get("proposal_id") == p.get("proposal_id") and c.get("added")
                for c in receipt.get("changes") or []
            )
        } - {None}
        nights = [n for n in (_night(k) for k in finding_keys) if n is not None]
        last = max([incident.business_date, *nights]) + timedelta(days=policy.explained_nights)
        plan = receipt.get("plan_id", "?")
        if receipt.get("verified"):
            path = set(((diagnosis or {}).get("diagnosis") or {}).get("path") or [])
            changed = {
                (p.get(kind) or {}).get("asset_key")
                for p in proposals
                for kind in ("node_change", "reference_row")
            } - {None}
            klass = ((diagnosis or {}).get("diagnosis") or {}).get("classification")
            expectations = {
                (v.get("expectation") or {}).get("kind") for v in receipt.get("verification") or []
            }
            direction: Literal["up", "down", "either"] = (
                "up"
                if klass in _ROWS_BACK or "rows_restored" in expectations
                else "down"
                if klass == "duplication"
                else "either"
            )
            why = f"the verified fix {plan} of {incident.incident_id}"
            out.append(
                Explanation(
                    incident.incident_id,
                    why,
                    frozenset(path | changed | added_to),
                    direction,
                    incident.business_date,
                    last,
                )
            )
        elif added_to:
            why = f"the reference rows {plan} of {incident.incident_id} added"
            out.append(
                Explanation(
                    incident.incident_id, why, frozenset(added_to), "up", incident.business_date, last
                )
            )
    return out


def _direction(finding: Finding) -> Literal["up", "down"] | None:
    rows = finding.evidence.get("row_count")
    expected = (finding.evidence.get("baseline") or {}).get("expected")
    if not isinstance(rows, int | float) or not isinstance(expected, int | float) or rows == expected:
        return None
    return "up" if rows > expected else "down"


def explanation_for(
    finding: Finding, ancestors: Collection[str], candidates: Sequence[Explanation]
) -> Explanation | None:
    """The first explanation that covers this finding, or None (it is news)."""
    moved = _direction(finding)
    if moved is None:
        return None
    for e in candidates:
        if not e.first_night <= finding.business_date <= e.last_night:
            continue
        if finding.asset_key not in e.assets and not e.assets.intersection(ancestors):
            continue
        if e.direction in ("either", moved):
            return e
    return None
