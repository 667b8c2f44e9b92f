"""Who hears about an incident: channels from the context file's teams and domains.

- The incident message goes to the channels of the owners on the path (``Diagnosis.owners``: the node
  owner, the reference-table owner).
- The hold notice goes to the consumers of the newly flagged items: the domain's ``hold_channel_team``
  (the consumers' team), else the owners of the affected asset whose change carries ``newly_flagged``.
- Whether the hold notice is sent at once, proposed to the owners, or skipped follows the domain's
  autonomy (:func:`hold_mode_for`): sent only at L3 and up with a ``hold_notice`` standing approval and no
  org-wide stop. The domain is the one of the asset holding the flagged items, else of the failing asset.
- At L4 the notice also goes to every downstream reader (owners of affected assets read on a schedule).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dw_dagster.context.models import Autonomy, ContextFile, Domain
from dw_dagster.notifications.owners import owner_team
from dw_dagster.records.incidents import AffectedAsset, BlastRadius, Diagnosis

log = logging.getLogger(__name__)

HoldMode = Literal["act", "propose", "none"]


@dataclass(frozen=True)
class Recipients:
    owner_channels: tuple[str, ...]
    """The incident message (and, when proposed, the hold proposal) goes here."""
    consumer_channels: tuple[str, ...] = ()
    """The hold notice goes here when ``hold == "act"``."""
    hold: HoldMode = "none"
    owner_teams: tuple[str, ...] = ()
    consumer_teams: tuple[str, ...] = ()
    autonomy: str | None = None
    """Shown in a proposed hold notice ("L2 propose")."""
    unrouted: tuple[str, ...] = field(default=())
    """Owners that match no team of the context file (reported, never silently dropped)."""


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for i in items:
        seen.setdefault(i, None)
    return list(seen)


def _channels(context: ContextFile, owners: Sequence[str]) -> tuple[list[str], list[str]]:
    channels, unknown = [], []
    for owner in owners:
        team_id = owner_team(owner, context)
        if team_id is None:
            unknown.append(owner)
        else:
            channels.append(context.teams[team_id].slack_channel)
    return _unique(channels), unknown


def flagged_count(change: Mapping[str, Any]) -> int | None:
    """The ``newly_flagged`` count in an asset's change, at the top level or under a total's name."""
    if isinstance(change.get("newly_flagged"), int | float):
        return int(change["newly_flagged"])
    for value in change.values():
        if isinstance(value, Mapping) and isinstance(value.get("newly_flagged"), int | float):
            return int(value["newly_flagged"])
    return None


def flagged_assets(blast: BlastRadius) -> list[AffectedAsset]:
    """The affected assets that hold the newly flagged items (e.g. the overdue accounts, 31 -> 195)."""
    return [a for a in blast.assets if flagged_count(a.change)]


def asset_label(a: AffectedAsset, limit: int = 60) -> str:
    """An affected asset as a sentence names it: its name when short, else its asset key (a name taken from
    a long description would swamp the sentence)."""
    return a.name if len(a.name) <= limit and "\n" not in a.name else a.asset_key


def consumer_teams(blast: BlastRadius) -> list[str]:
    """Owners of the affected assets that hold the newly flagged items (``newly_flagged`` in the change)."""
    return _unique(t for a in flagged_assets(blast) for t in a.owners)


def readers(blast: BlastRadius) -> list[str]:
    """Owners of the affected assets a person reads on a schedule (dashboards, lists, meetings)."""
    return _unique(t for a in blast.assets if a.next_read for t in a.owners)


def incident_domain(
    context: ContextFile, diagnosis: Diagnosis, blast: BlastRadius
) -> tuple[str, Domain] | None:
    """The domain whose autonomy governs the hold notice: that of the asset holding the flagged items,
    else of the failing asset and then the rest of the path, downstream first."""
    keys = [a.asset_key for a in flagged_assets(blast)] + list(reversed(diagnosis.path))
    for key in keys:
        found = context.domain_of(key)
        if found:
            return found
    return None


def alerts_allowed(context: ContextFile, diagnosis: Diagnosis, blast: BlastRadius) -> bool:
    """L0 (manual) domains get nothing automated, not even the alert: the incident is recorded and shown in
    the Dagster UI, and people there work it by hand. Assets in no domain are observed (L1) and alerted."""
    found = incident_domain(context, diagnosis, blast)
    return found is None or found[1].autonomy.at_least(Autonomy.L1)


def route_incident(
    context: ContextFile,
    diagnosis: Diagnosis,
    blast: BlastRadius,
    *,
    hold: HoldMode | None = None,
    stopped: bool = False,
    consumers: Sequence[str] | None = None,
    fallback_channel: str | None = None,
    autonomy: str | None = None,
) -> Recipients:
    """The incident's recipients.

    ``hold`` defaults to what the domain's autonomy allows (``stopped``: the org-wide stop is in force);
    ``consumers`` overrides the team ids told to hold. When no owner on the path has a channel the
    incident goes to ``fallback_channel``; with no fallback either this raises, because an incident
    nobody receives is a lost incident.
    """
    found = incident_domain(context, diagnosis, blast)
    domain = found[1] if found else None
    if hold is None:
        hold = hold_mode_for(
            domain.autonomy.value if domain else "L1",
            standing_approval=bool(domain and "hold_notice" in domain.standing_approvals),
            stopped=stopped,
        )
    if autonomy is None:
        autonomy = f"{domain.autonomy.value} (domain {found[0]})" if found and domain else "L1 (no domain)"
    owners = _unique(diagnosis.owners)
    owner_channels, unknown = _channels(context, owners)
    if not owner_channels:
        if not fallback_channel:
            raise ValueError(
                f"incident {diagnosis.incident_id}: no owner on the path has a Slack channel in the context"
                f" file (owners {owners}); add the teams or pass fallback_channel"
            )
        owner_channels = [fallback_channel]
    if consumers is not None:
        cons = _unique(consumers)
    elif domain and domain.hold_channel_team:
        cons = [domain.hold_channel_team]
    else:
        cons = consumer_teams(blast)
    if consumers is None and domain and domain.autonomy.at_least(Autonomy.L4):
        # L4: every downstream reader is warned on the first bad build, not only the flagged list's owners.
        cons = _unique([*cons, *readers(blast)])
    consumer_channels, unknown_consumers = _channels(context, cons)
    unrouted = tuple(_unique([*unknown, *unknown_consumers]))
    if unrouted:
        log.warning(
            "incident %s: teams not in the context file: %s", diagnosis.incident_id, ", ".join(unrouted)
        )
    if not blast.newly_flagged:
        hold = "none"
    elif hold == "act" and not consumer_channels:
        # Nobody to tell: a person decides who should hold.
        hold = "propose"
    return Recipients(
        owner_channels=tuple(owner_channels),
        consumer_channels=tuple(consumer_channels),
        hold=hold,
        owner_teams=tuple(_unique(owner_team(o, context) or o for o in owners)),
        consumer_teams=tuple(_unique(owner_team(o, context) or o for o in cons)),
        autonomy=autonomy,
        unrouted=unrouted,
    )


def hold_mode_for(autonomy: str | int, *, standing_approval: bool, stopped: bool = False) -> HoldMode:
    """What to do with a hold notice at an autonomy level ("L0".."L4" or 0..4).

    L0 manual: nothing. L1 observe and L2 propose: propose it to the owners. L3 act reversibly and L4:
    send it at once, but only under a standing approval for this class of action and while no org-wide
    stop is in force; otherwise a person decides.
    """
    level = int(str(autonomy).upper().removeprefix("L"))
    if level <= 0:
        return "none"
    if level >= 3 and standing_approval and not stopped:
        return "act"
    return "propose"
