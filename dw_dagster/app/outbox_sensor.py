"""The sensor that delivers what the Slack outbox still holds: a Slack outage delays a message, never loses it."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from dw_dagster.app.idle_gate import Clock, open_gate, utc_now
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_notifier import IncidentNotifier
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


def build_slack_outbox_sensor(
    ops: OpsSchema,
    *,
    name: str = "slack_outbox",
    minimum_interval_seconds: int = 60,
    time_budget_seconds: float = 40.0,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    dispatch_gate: Callable[[WarehouseResource], Callable[[], bool]] | None = None,
    clock: Clock = utc_now,
) -> dg.SensorDefinition:
    """A sensor that delivers pending Slack messages (resources ``slack`` and ``snowflake``).

    ``dispatch_gate`` builds, from the warehouse, the ``autonomous_dispatch_allowed`` callable (the org-wide
    stop): autonomous messages stay pending while it answers False; it is asked only when there is work.
    ``clock``: the time the sensor acts at (the outbox's retry times are compared with it).
    """

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Delivers incident messages left pending in the Slack outbox"
        " (a Slack outage delays, never loses). Reads the outbox only after a run may have left a message"
        " in it, or while one is still pending.",
    )
    def _sensor(
        context: dg.SensorEvaluationContext, slack: SlackNotifier, snowflake: WarehouseResource
    ) -> dg.SkipReason:
        now = clock()
        # Messages are enqueued by runs (diagnosis, lifecycle, remediation) and by commands that record
        # themselves in Dagster's storage; a message still pending after a flush keeps the sensor due.
        gate = open_gate(context, now)
        if gate.work is None:
            return gate.skip("Slack outbox")
        notifier = IncidentNotifier(
            slack,
            IncidentStore(snowflake, ops),
            logger=context.log,
            clock=clock,
            autonomous_dispatch_allowed=dispatch_gate(snowflake) if dispatch_gate else None,
        )
        result = notifier.flush_pending(time_budget_seconds=time_budget_seconds)
        pending = result.failed or result.waiting or result.stopped
        # A Slack outage, a reply behind its root or a stop: look again next tick; the outbox's own backoff
        # decides whether a message is attempted then.
        gate.done(context, due=now if pending else None)
        return dg.SkipReason(f"Slack outbox ({gate.work}): {result.summary()}")

    return _sensor
