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
- otherwise **stands**: its own incident, diagnosis and alert, linked to the open incidents it meets (another
  class, other keys, a new kind of failure): their findings' tables or dedup roots are shared, or one's lie on
  the other's lineage path between cause and symptoms (the diagnosis's ``path``, kept in the incident's
  detail beside its dedup key). A stale incident never absorbs one.

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
from dw_dagster.incidents.diagnosis import by_priority
from dw_dagster.incidents.events import findings_of
from dw_dagster.incidents.store import SYSTEM, IncidentStore, recent_nights
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident
from dw_dagster.records.policy import IncidentPolicy

# Classes that name the same kind of wrong: a join that drops keys, whether the key is new in the source or
# its reference row went away (tonight's diagnosis may tell them apart differently from last night's).
_FAMILY = {"reference_data_change": "value_loss"}
UNKNOWN = CauseClass.UNKNOWN.value


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
        """Tonight's cause is the older incident's: same root and class family, and the same keys (none of
        tonight's it did not have; no keys tonight only where it had none). A cause nobody could tell
        (``unknown``) is no cause: it neither continues nor is continued."""
        if UNKNOWN in (self.classification, older.classification):
            return False
        return (
            self.root == older.root
            and _FAMILY.get(self.classification, self.classification)
            == _FAMILY.get(older.classification, older.classification)
            and (set(self.keys) <= set(older.keys) if self.keys else not older.keys)
        )

    def describe(self) -> str:
        return f"{self.classification} at {self.root}" + (f" ({', '.join(self.keys)})" if self.keys else "")


def dedup_of(diagnosis: Diagnosis, findings: Sequence[Finding]) -> Dedup:
    """The cause's dedup key, rooted at the asset where the diagnosis placed the cause (``cause_asset``),
    else at the finding that leads the night. Never at the head of the diagnosis's path: a path that only
    lists what is upstream of a table (a volume loss, an unexplained deviation) starts at whichever upstream
    table sorts first, which unrelated tables share."""
    root = diagnosis.cause_asset or _lead_asset(diagnosis, findings)
    return Dedup(
        root=root,
        classification=diagnosis.classification.value,
        keys=sorted({f"{k.column}={k.value}" for k in diagnosis.keys}),
    )


def _lead_asset(diagnosis: Diagnosis, findings: Sequence[Finding]) -> str:
    explained = str(diagnosis.evidence.get("explained_by") or "")
    named = [f.asset_key for f in findings if explained == f.named]
    if named:
        return named[0]
    ranked = by_priority(findings)
    return ranked[0].asset_key if ranked else ""


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
    # Only a cause still going on absorbs tonight's: an open incident, not stale, with a finding of the last
    # few nights (one whose record went quiet, like a false alarm of weeks ago, tells nothing of tonight).
    target = next(
        (
            i
            for i, _ in keyed
            if i.status == "open" and not i.stale_since and _recent(store, i, night, policy)
        ),
        None,
    )
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
    store.update_detail(
        incident.incident_id, dedup={**dedup.model_dump(), "key": dedup.key}, path=list(diagnosis.path)
    )
    if target is None:
        mine = _Reach({f.asset_key for f in findings} | {dedup.root}, set(diagnosis.path))
        related = [
            i
            for i in older
            if i.status == "open" and mine.meets(_reach(i, findings_of(store, i.incident_id)))
        ]
        if related:
            store.update_detail(incident.incident_id, related=[i.incident_id for i in related])
            for i in related:
                store.append_event(
                    i.incident_id,
                    "linked",
                    f"linked|{incident.incident_id}",
                    {"incident_id": incident.incident_id, "dedup": dedup.describe()},
                )
        return Settlement("stands", store.get(incident.incident_id) or incident, dedup, related)
    if kind == "reopens":
        store.transition(
            target.incident_id,
            "open",
            by=SYSTEM,
            key=f"reopen|{incident.incident_id}",
            reason=f"the same cause ({dedup.describe()}) is back on {night}",
            detail={"reopened": int(target.detail.get("reopened", 0)) + 1, "resolution": None},
        )
    store.add_findings(target.incident_id, findings)
    store.append_event(
        target.incident_id,
        "continued",
        f"continued|{incident.incident_id}",
        {
            "incident_id": incident.incident_id,
            "night": str(night),
            "reopened": kind == "reopens",
            "summaries": [f.summary for f in findings],
        },
    )
    store.transition(
        incident.incident_id,
        "merged",
        by=SYSTEM,
        key="settle",
        reason=f"the same cause as {target.incident_id}: {dedup.describe()}",
        detail={"merged_into": target.incident_id},
    )
    return Settlement(kind, store.get(target.incident_id) or target, dedup)


@dataclass
class _Reach:
    """Where an incident is: the tables its findings are on with its dedup root (``on``), and the lineage
    path between its cause and its symptoms as its diagnosis gave it (``path``)."""

    on: set[str]
    path: set[str]

    def meets(self, other: _Reach) -> bool:
        """Two incidents are related when one's tables are on the other's tables or path: a symptom of one
        lies between the other's cause and its symptoms. Two paths that merely pass through a common table
        (a raw ancestor both read, a calendar) relate nothing."""
        return bool(self.on & (other.on | other.path) or other.on & self.path)


def _reach(incident: Incident, findings: Sequence[Finding]) -> _Reach:
    dedup = dedup_of_incident(incident)
    return _Reach(
        {f.asset_key for f in findings} | ({dedup.root} if dedup else set()),
        {str(a) for a in incident.detail.get("path") or []},
    )


def _recent(store: IncidentStore, incident: Incident, night: date | None, policy: IncidentPolicy) -> bool:
    last = last_night(findings_of(store, incident.incident_id))
    if night is None or last is None:
        return True
    return 0 <= (night - last).days <= recent_nights(policy)


def carried_target(store: IncidentStore, findings: Sequence[Finding]) -> Incident | None:
    """The incident a night's findings only carry: every finding names earlier nights whose effect a
    cumulative total still holds (``evidence.carried_from``), and an incident has the same check's finding
    on one of them. Followed to where it was merged; None when any finding is news of its own."""
    if not findings or not all(f.evidence.get("carried_from") for f in findings):
        return None
    wanted = {(f.check_name, f.asset_key, d) for f in findings for d in f.evidence["carried_from"]}
    for incident in reversed(store.list(status=("open", "resolved", "merged"))):
        had = {
            (f.check_name, f.asset_key, f.business_date.isoformat())
            for f in findings_of(store, incident.incident_id)
        }
        if wanted & had:
            seen = {incident.incident_id}
            while incident.status == "merged" and incident.merged_into and incident.merged_into not in seen:
                seen.add(incident.merged_into)
                incident = store.get(incident.merged_into) or incident
            return incident
    return None


def continue_carried(
    store: IncidentStore, incident: Incident, findings: Sequence[Finding], target: Incident
) -> Settlement:
    """Tonight's provisional incident only carries ``target``'s bad night: the same fault, continued (or
    reopened), never a cause of its own."""
    night = last_night(findings) or incident.business_date
    dedup = dedup_of_incident(target) or Dedup(root=findings[0].asset_key, classification=UNKNOWN, keys=[])
    kind: Literal["continues", "reopens"] = "continues"
    if target.status == "resolved":
        kind = "reopens"
        store.transition(
            target.incident_id,
            "open",
            by=SYSTEM,
            key=f"reopen|{incident.incident_id}",
            reason=f"a cumulative total still carries its night on {night}",
            detail={"reopened": int(target.detail.get("reopened", 0)) + 1, "resolution": None},
        )
    store.update_detail(incident.incident_id, dedup={**dedup.model_dump(), "key": dedup.key})
    store.add_findings(target.incident_id, findings)
    store.append_event(
        target.incident_id,
        "continued",
        f"continued|{incident.incident_id}",
        {
            "incident_id": incident.incident_id,
            "night": str(night),
            "reopened": kind == "reopens",
            "carried": True,
            "summaries": [f.summary for f in findings],
        },
    )
    store.transition(
        incident.incident_id,
        "merged",
        by=SYSTEM,
        key="settle",
        reason=f"the same fault as {target.incident_id}: a cumulative total still carries its night",
        detail={"merged_into": target.incident_id},
    )
    return Settlement(kind, store.get(target.incident_id) or target, dedup)


def continuation_text(settlement: Settlement, provisional: Incident, findings: Sequence[Finding]) -> str:
    """The reply in the older incident's thread for a night that continues it."""
    night = last_night(findings) or provisional.business_date
    verb = "is back" if settlement.kind == "reopens" else "is still there"
    checks = ", ".join(sorted({f.named for f in findings}))
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
