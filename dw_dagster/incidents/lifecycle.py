"""The incident lifecycle: grouping by cause once the diagnosis lands (``docs/incidents.md``).

A night's findings wait in a provisional incident (``store.py``). When its diagnosis names the cause, the
incident's **dedup key** is taken from it, as PagerDuty's Events API takes a ``dedup_key`` per cause: the
upstream root on the lineage path, the class (value loss and a reference-data change are one family: a join
that drops keys) and the keys that hold the gap. Then :func:`settle`:

- **continues** the oldest open incident with a compatible key (same root, same class family, tonight's keys
  among its keys): the provisional incident is merged into it and the night is a reply in its thread, not
  a new alert (the stall on its second night);
- **reopens** a resolved incident with a compatible key whose last finding is at most
  ``reopen_within_nights`` nights old (the fault came back);
- otherwise **stands**: its own incident, diagnosis and alert, linked to the open incidents on the same
  tables or root (another class, other keys, a new kind of failure). A stale incident never absorbs one.

Nothing is inhibited: Alertmanager silences a symptom while its cause fires, which here would hide
tonight's new fault inside an old incident; a related incident is linked, never muted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Literal

from pydantic import BaseModel

from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.events import findings_of
from dw_dagster.incidents.store import SYSTEM, IncidentStore
from dw_dagster.records.incidents import Diagnosis, Finding, Incident
from dw_dagster.records.policy import IncidentPolicy

# Classes that name the same kind of wrong: a join that drops keys, whether the key is new in the source or
# its reference row went away (tonight's diagnosis may tell them apart differently from last night's).
_FAMILY = {"reference_data_change": "value_loss"}


class Dedup(BaseModel):
    """What makes two incidents one cause."""

    root: str
    classification: str
    keys: list[str]

    @property
    def key(self) -> str:
        raw = json.dumps([self.root, _FAMILY.get(self.classification, self.classification), self.keys])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def continues(self, older: Dedup) -> bool:
        """Tonight's cause is the older incident's: same root and class family, no key it did not have."""
        return (
            self.root == older.root
            and _FAMILY.get(self.classification, self.classification)
            == _FAMILY.get(older.classification, older.classification)
            and set(self.keys) <= set(older.keys)
        )

    def describe(self) -> str:
        return f"{self.classification} at {self.root}" + (f" ({', '.join(self.keys)})" if self.keys else "")


def dedup_of(diagnosis: Diagnosis, findings: Sequence[Finding]) -> Dedup:
    root = diagnosis.path[0] if diagnosis.path else (findings[0].asset_key if findings else "")
    return Dedup(
        root=root,
        classification=diagnosis.classification.value,
        keys=sorted({f"{k.column}={k.value}" for k in diagnosis.keys}),
    )


def dedup_of_incident(incident: Incident) -> Dedup | None:
    raw = incident.detail.get("dedup")
    return Dedup.model_validate(raw) if raw else None


def last_night(findings: Sequence[Finding]) -> date | None:
    return max((f.business_date for f in findings), default=None)


@dataclass
class Settlement:
    kind: Literal["stands", "continues", "reopens"]
    incident: Incident
    """The incident tonight's findings belong to: the provisional one when it stands, else the older one."""
    dedup: Dedup
    related: list[Incident] = field(default_factory=list)


def settle(
    store: IncidentStore,
    incident: Incident,
    diagnosis: Diagnosis,
    findings: Sequence[Finding],
    policy: IncidentPolicy,
) -> Settlement:
    """Decides, once, whether a diagnosed provisional incident continues, reopens or stands; records it."""
    dedup = dedup_of(diagnosis, findings)
    night = last_night(findings) or incident.business_date
    older = [
        i
        for i in store.list(status=("open", "resolved"))
        if i.incident_id != incident.incident_id
        and (i.opened_at, i.incident_id) < (incident.opened_at, incident.incident_id)
    ]
    keyed = [(i, d) for i in older if (d := dedup_of_incident(i)) is not None and dedup.continues(d)]
    target = next((i for i, _ in keyed if i.status == "open" and not i.stale_since), None)
    kind: Literal["stands", "continues", "reopens"] = "continues" if target else "stands"
    if target is None and policy.reopen_within_nights and night is not None:
        for i, _ in sorted(keyed, key=lambda pair: pair[0].updated_at, reverse=True):
            previous = last_night(findings_of(store, i.incident_id))
            if (
                i.status == "resolved"
                and previous
                and 0 <= (night - previous).days <= policy.reopen_within_nights
            ):
                target, kind = i, "reopens"
                break
    store.update_detail(incident.incident_id, dedup={**dedup.model_dump(), "key": dedup.key})
    if target is None:
        mine = {f.asset_key for f in findings} | {dedup.root}
        related = []
        for i in older:
            theirs = dedup_of_incident(i)
            if i.status != "open":
                continue
            assets = {f.asset_key for f in findings_of(store, i.incident_id)} | (
                {theirs.root} if theirs else set()
            )
            if mine & assets:
                related.append(i)
        if related:
            store.update_detail(incident.incident_id, related=[i.incident_id for i in related])
            for i in related:
                store.append_event(i.incident_id, "linked", f"linked|{incident.incident_id}",
                                   {"incident_id": incident.incident_id, "dedup": dedup.describe()})  # fmt: skip
        return Settlement("stands", store.get(incident.incident_id) or incident, dedup, related)
    if kind == "reopens":
        store.transition(
            target.incident_id, "open", by=SYSTEM, key=f"reopen|{incident.incident_id}",
            reason=f"the same cause ({dedup.describe()}) is back on {night}",
            detail={"reopened": int(target.detail.get("reopened", 0)) + 1, "resolution": None},
        )  # fmt: skip
    store.add_findings(target.incident_id, findings)
    store.append_event(target.incident_id, "continued", f"continued|{incident.incident_id}",
                       {"incident_id": incident.incident_id, "night": str(night), "reopened": kind == "reopens",
                        "summaries": [f.summary for f in findings]})  # fmt: skip
    store.transition(
        incident.incident_id, "merged", by=SYSTEM, key="settle",
        reason=f"the same cause as {target.incident_id}: {dedup.describe()}",
        detail={"merged_into": target.incident_id},
    )  # fmt: skip
    return Settlement(kind, store.get(target.incident_id) or target, dedup)


def continuation_text(settlement: Settlement, provisional: Incident, findings: Sequence[Finding]) -> str:
    """The reply in the older incident's thread for a night that continues it."""
    night = last_night(findings) or provisional.business_date
    verb = "is back" if settlement.kind == "reopens" else "is still there"
    checks = ", ".join(sorted({f"{f.check_name} on {f.asset_key}" for f in findings}))
    return (
        f":repeat: {night}: the same cause {verb} ({settlement.dedup.describe()}); failing tonight: {checks}."
        + (" Reopened." if settlement.kind == "reopens" else "")
    )


def related_text(settlement: Settlement) -> str:
    links = "; ".join(
        f"{i.incident_id} ({(d.describe() if (d := dedup_of_incident(i)) else i.title)})"
        for i in settlement.related
    )
    already = "the incidents" if len(settlement.related) != 1 else "the incident"
    return f":link: Another cause than {already} already open on these tables: {links}."


def owner_teams(context: ContextFile, findings: Sequence[Finding], diagnosis: Diagnosis | None) -> list[str]:
    """The teams that own the incident's assets: the tables its findings are on and its diagnosis's path."""
    assets = [f.asset_key for f in findings] + (list(diagnosis.path) if diagnosis else [])
    teams: dict[str, None] = {}
    for asset in assets:
        for team in context.owners_for(asset):
            teams.setdefault(team, None)
        for system in context.systems:
            if system.key == asset:
                for team in system.owners:
                    teams.setdefault(team, None)
    for owner in diagnosis.owners if diagnosis else []:
        # Asset owners as Dagster carries them: ``team:<id>``.
        if owner.removeprefix("team:") in context.teams:
            teams.setdefault(owner.removeprefix("team:"), None)
    return list(teams)
