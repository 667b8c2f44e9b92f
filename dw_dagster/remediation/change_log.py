"""How a remediation run records its changes in the incident's events, keyed by plan, proposal and run: the
change it is about to make (``applying``) and the change made (``change``, which ``undo`` and the receipts
read). One key format for every step that changes something, so a record is never written twice."""

from __future__ import annotations

from collections.abc import Callable

from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import Change, RemediationPlan

APPLYING = "applying"


def intent_recorder(
    store: IncidentStore, plan: RemediationPlan, proposal_id: str, run_id: str
) -> Callable[[Change], None]:
    """What the run records just before it adds a row: the change it is about to make."""

    def record(change: Change) -> None:
        store.append_event(
            plan.incident_id,
            APPLYING,
            f"{APPLYING}|{plan.plan_id}|{proposal_id}|{run_id}",
            change.model_dump(mode="json"),
        )

    return record


def record_change(store: IncidentStore, plan: RemediationPlan, change: Change, run_id: str) -> None:
    """The change made, recorded for the run (``undo`` and the receipts read it); recording it twice is a no-op."""
    store.append_event(
        plan.incident_id,
        "change",
        f"change|{plan.plan_id}|{change.proposal_id}|{run_id}",
        change.model_dump(mode="json"),
    )
