"""Names a person types (an incident id, a run id, an asset), checked before a command acts on them: a name
that matches nothing is answered "no such ..." with the closest names that exist, never with what a command
would say about a real one ("no remediation was proposed", "no recorded level").
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from dw_dagster.records.incidents import Incident

CLOSEST = 3


def closest(name: str, names: Iterable[str], n: int = CLOSEST) -> list[str]:
    """The names nearest ``name`` (difflib's ratio, case-insensitive), best first."""
    by_lower: dict[str, str] = {}
    for candidate in names:
        by_lower.setdefault(candidate.lower(), candidate)
    return [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)]


def no_such(what: str, name: str, names: Iterable[str], where: str = "") -> click.ClickException:
    """``no such incident 'INC-...' (in DW_OPS.INCIDENTS); closest: ...``."""
    near = closest(name, names)
    hint = f"; closest: {', '.join(near)}" if near else ""
    return click.ClickException(f"no such {what} {name!r}{f' in {where}' if where else ''}{hint}")


def require_incident(ops, incident_id: str) -> Incident:
    """The incident ``incident_id`` names, or a ``no such incident`` error naming the closest."""
    incident = ops.store.get(incident_id)
    if incident is None:
        known = [i.incident_id for i in ops.store.list()]
        raise no_such("incident", incident_id, known, ops.ops.table("INCIDENTS"))
    return incident


def require_ref(ops, ref: str) -> None:
    """``ref`` (what ``approve`` and ``reject`` take: an incident id or a run id) names an incident or a run
    of the Dagster instance, or a ``no such ...`` error naming the closest."""
    if ref.upper().startswith("INC-"):
        require_incident(ops, ref)
    elif ops.instance.get_run_by_id(ref) is None:
        runs = [r.run_id for r in ops.instance.get_runs(limit=200)]
        incidents = [i.incident_id for i in ops.store.list()]
        raise no_such("incident or run", ref, [*incidents, *runs], "the ops schema or the Dagster instance")
