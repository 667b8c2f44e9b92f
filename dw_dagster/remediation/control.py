"""The org-wide stop: one durable switch that halts every autonomous dispatch at once.

``dw-dagster stop`` appends a row to ``CONTROL_EVENTS`` in the ops schema; ``dw-dagster resume`` appends
another; the latest row is in force. Every dispatch point asks at the moment it would act (the hold notice
as it is routed and as it is posted, the proposals sensor, each remediation step that changes something),
so a stop takes effect on the next action, not the next deploy. The rows are never updated: they are the record of
who stopped what, when and why.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_notifier import IncidentNotifier
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.records.incidents import Incident
from dw_dagster.records.remediation import RemediationPlan
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


class ControlState(BaseModel):
    stopped: bool
    actor: str | None = None
    reason: str | None = None
    at: datetime | None = None

    def describe(self) -> str:
        if not self.stopped:
            return "autonomous dispatch is running" + (
                f" (resumed by {self.actor} at {self.at:%Y-%m-%d %H:%M} UTC)" if self.at else ""
            )
        return f"autonomous dispatch is STOPPED by {self.actor} at {self.at:%Y-%m-%d %H:%M} UTC: {self.reason or 'no reason given'}"


class OrgControl:
    def __init__(self, warehouse: WarehouseResource, ops: OpsSchema):
        self.warehouse = warehouse
        self.ops = ops

    def state(self) -> ControlState:
        with self.ops.connect(self.warehouse, "control.read", job="control") as conn:
            cur = conn.cursor()
            cur.execute(
                f"SELECT ACTION, ACTOR, REASON, EVENT_AT FROM {self.ops.table('CONTROL_EVENTS')}"
                " ORDER BY EVENT_AT DESC LIMIT 1"
            )
            row = cur.fetchone()
        if row is None:
            return ControlState(stopped=False)
        return ControlState(stopped=row[0] == "stop", actor=row[1], reason=row[2], at=row[3])

    def dispatch_allowed(self) -> bool:
        return not self.state().stopped

    def set(self, action: Literal["stop", "resume"], actor: str, reason: str | None = None) -> ControlState:
        if not actor.strip():
            raise ValueError("a stop or resume must name who gives it (--as)")
        with self.ops.connect(self.warehouse, f"control.{action}", job="control") as conn:
            conn.cursor().execute(
                f"INSERT INTO {self.ops.table('CONTROL_EVENTS')} (EVENT_AT, ACTION, ACTOR, REASON) VALUES (%s, %s, %s, %s)",
                (datetime.now(UTC), action, actor, reason),
            )
        return self.state()


def gated_notifier(
    slack: SlackNotifier, store: IncidentStore, context: ContextFile | None
) -> IncidentNotifier:
    """The incident notifier whose autonomous messages (the hold notice) wait while the org-wide stop is in
    force: every notifier the code location builds is this one."""
    control = OrgControl(store.warehouse, store.ops)
    return IncidentNotifier(
        slack, store, context=context, autonomous_dispatch_allowed=control.dispatch_allowed
    )


def owner_channels(notifier: IncidentNotifier, incident_id: str) -> list[str]:
    """The channels of the incident's owner threads (those its incident message started)."""
    return list(dict.fromkeys(m.channel for m in notifier.messages(incident_id) if m.kind == "incident"))


def escalate(
    notifier: IncidentNotifier,
    incident: Incident,
    context_file: ContextFile,
    plan: RemediationPlan,
    text: str,
    run_id: str | None = None,
) -> None:
    """Tell a person: the owners' threads, and the domain's escalation team's channel; ``run_id`` is the
    run it is about."""
    domain = context_file.domains.get(plan.domain or "")
    channels = None
    if domain and domain.escalation_team:
        owners = owner_channels(notifier, incident.incident_id)
        channels = list(dict.fromkeys([*owners, context_file.teams[domain.escalation_team].slack_channel]))
    notifier.post_update(
        incident, f":rotating_light: Needs a person: {text}", kind="escalation", channels=channels,
        run_id=run_id,
    )  # fmt: skip
