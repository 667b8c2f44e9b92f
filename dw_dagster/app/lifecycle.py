"""The lifecycle step: resolve an incident whose checks all passed again, or mark it stale; and resolve one
by hand (``dw-dagster incidents resolve``). Each change is a ``status`` event, a note in the incident's
threads (through the outbox) and a materialization of ``dw/incidents``."""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.events import findings_of
from dw_dagster.incidents.nights import lifecycle_due
from dw_dagster.incidents.store import SYSTEM, IncidentStore
from dw_dagster.notifications.incident_asset import view_materialization
from dw_dagster.notifications.incident_view import view_of
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.records.incidents import Incident
from dw_dagster.records.policy import IncidentPolicy
from dw_dagster.remediation.control import gated_notifier
from dw_dagster.tags import INCIDENT_ID, LIFECYCLE_ACTION
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

LIFECYCLE_JOB = "incident_lifecycle"


def resolve(
    store: IncidentStore,
    incident: Incident,
    *,
    by: str,
    reason: str,
    key: str,
    how: str,
    slack: SlackNotifier | None,
    context_file: ContextFile | None,
    verification: dict[str, str] | None = None,
    note: str | None = None,
) -> Incident | None:
    """Resolves an open incident and posts ``note`` (default: the reason) to its threads; None when it was
    not open."""
    resolution = {"by": by, "reason": reason, "how": how}
    done = store.transition(
        incident.incident_id, "resolved", by=by, reason=reason, key=key, detail={"resolution": resolution}
    )
    if done is None:
        return None
    if slack is not None and context_file is not None:
        gated_notifier(slack, store, context_file).post_resolution(
            done, note or reason, verification=verification
        )
    return done


def open_incident(
    context: dg.OpExecutionContext, store: IncidentStore, ops: OpsSchema, incident_id: str, idle: str
) -> Incident | None:
    """The open incident a run was launched for; None (and ``idle`` logged) if it is no longer open, a
    failure if it does not exist."""
    incident = store.get(incident_id)
    if incident is None:
        raise dg.Failure(f"incident {incident_id}: not found in {ops.table('INCIDENTS')}")
    if incident.status != "open":
        context.log.info(f"{incident_id} is {incident.status}: {idle}")
        return None
    return incident


def build_lifecycle_job(
    ops: OpsSchema,
    policy: IncidentPolicy,
    context_file: ContextFile | None,
    resources: Mapping[str, Any] | None = None,
) -> dg.JobDefinition:
    @dg.op(
        name="apply_lifecycle",
        description="Resolves an open incident whose checks all passed again on a later night, or marks one "
        "stale; checks again that it is due (a re-executed run changes nothing twice).",
    )
    def apply_lifecycle(
        context: dg.OpExecutionContext, snowflake: WarehouseResource, slack: SlackNotifier
    ) -> None:
        incident_id, action = context.run.tags.get(INCIDENT_ID), context.run.tags.get(LIFECYCLE_ACTION)
        if not incident_id or action not in ("resolve", "stale"):
            raise dg.Failure(
                f"run tags {INCIDENT_ID} and {LIFECYCLE_ACTION} (resolve or stale): expected both"
            )
        store = IncidentStore(snowflake, ops, run_id=context.run_id, policy=policy)
        incident = open_incident(context, store, ops, incident_id, "nothing to do")
        if incident is None:
            return
        due = lifecycle_due(context.instance, store, incident, findings_of(store, incident_id), policy)
        if due is None or due.action != action:
            context.log.info(f"{incident_id}: {action} is no longer due")
            return
        if action == "resolve":
            passed = {s: "passed" for s in sorted({f.signature for f in findings_of(store, incident_id)})}
            resolve(
                store,
                incident,
                by=SYSTEM,
                reason=due.reason.capitalize() + ".",
                key=f"auto|{due.night}",
                how="auto",
                slack=slack,
                context_file=context_file,
                verification=passed,
            )
        else:
            store.update_detail(incident_id, stale_since=str(due.night))
            store.append_event(
                incident_id, "stale", f"stale|{due.night}", {"night": str(due.night), "reason": due.reason}
            )
            if context_file is not None:
                gated_notifier(slack, store, context_file).post_update(
                    incident,
                    f":hourglass: Stale: {due.reason}. New findings open incidents of their own.",
                    kind="stale",
                    version=str(due.night),
                )
        context.log.info(f"{incident_id}: {action} ({due.reason})")
        context.log_event(view_materialization(view_of(store, store.get(incident_id) or incident)))

    @dg.job(
        name=LIFECYCLE_JOB,
        description="Resolve an incident whose checks passed again, or mark it stale (launched by incident_sensor).",
        resource_defs=dict(resources or {}),
    )
    def incident_lifecycle():
        apply_lifecycle()

    return incident_lifecycle
