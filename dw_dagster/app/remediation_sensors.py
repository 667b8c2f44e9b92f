"""The sensors around the remediation job: ``remediation_proposals`` submits and binds each plan's held run
(``remediation/proposer.py``), ``approval_expiry`` cancels the runs whose plans expired unanswered and
escalates. Neither ever grants an approval."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from dw_dagster.app.idle_gate import Clock, open_gate, utc_now
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.text import counted
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.remediation.control import OrgControl, gated_notifier
from dw_dagster.remediation.proposer import Proposer, expire_pending, next_expiry
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


def build_remediation_sensors(
    job: dg.JobDefinition,
    ops: OpsSchema,
    context_file: ContextFile,
    run_config: Mapping[str, Any],
    clock: Clock = utc_now,
) -> list[dg.SensorDefinition]:
    """``run_config``: every remediation run's (the deployment's); ``clock``: the time the sensors act at (an
    approval expires when it says so)."""

    @dg.sensor(
        name="remediation_proposals",
        job=job,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Submits the run of each proposed plan, held for approval; binds the plan to that very run"
        " and posts the plan with its Approve / Reject buttons.",
    )
    def remediation_proposals(
        context: dg.SensorEvaluationContext,
        snowflake: WarehouseResource,
        coalesce: CoalesceWorkspace,
        slack: SlackNotifier,
    ):
        # A plan is recorded by a diagnosis run, its held run created, canceled or failed: each ends in a
        # run status change; a submission the daemon has not turned into a run yet is looked at on time.
        gate = open_gate(context, clock())
        if gate.work is None:
            return gate.skip("remediation proposals")
        store = IncidentStore(snowflake, ops)
        state = OrgControl(snowflake, ops, context_file).state()
        if state.ignored:
            context.log.warning(f"org-wide stop: {state.describe()}")
        if state.stopped:
            # The cursor is kept: the work is still due once the stop is lifted.
            return dg.SkipReason(f"{state.describe()}: no run is submitted")
        resources = {"coalesce": coalesce, "snowflake": snowflake, "slack": slack}
        proposer = Proposer(
            context.instance,
            ApprovalBook(store, context_file),
            resources,
            gated_notifier(slack, store, context_file),
            context_file,
            job,
            run_config,
        )
        for incident in store.list(status="open"):
            if not gate.out_of_time(incident.incident_id):
                proposer.propose(incident)
        gate.done(context, due=proposer.due)
        return proposer.requests or dg.SkipReason(
            f"remediation proposals ({gate.work}): nothing to submit{gate.leftover()}"
        )

    @dg.sensor(
        name="approval_expiry",
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Cancels remediation runs whose approval request expired unanswered, and escalates. Never grants.",
    )
    def approval_expiry(
        context: dg.SensorEvaluationContext, snowflake: WarehouseResource, slack: SlackNotifier
    ) -> dg.SkipReason:
        # A held run appears (or goes) with a run status change; otherwise the next expiry is the only due.
        now = clock()
        gate = open_gate(context, now)
        if gate.work is None:
            return gate.skip("approval expiry")
        book = ApprovalBook(IncidentStore(snowflake, ops), context_file)
        expired = expire_pending(context.instance, book, slack, context_file, now=now)
        gate.done(context, due=next_expiry(context.instance, book))
        return dg.SkipReason(
            f"expired {counted(len(expired), 'unanswered approval request')}"
            if expired
            else "nothing expired"
        )

    return [remediation_proposals, approval_expiry]
