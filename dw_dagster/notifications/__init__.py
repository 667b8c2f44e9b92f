"""Notifications: Slack through dagster-slack, with Block Kit messages, delivered through a durable outbox."""

from dw_dagster.notifications.blocks import (
    DagsterLinks,
    SlackMessage,
    dagster_ui_url,
    hold_notice,
    incident_message,
    proposed_hold_notice,
    resolution_message,
    update_message,
)
from dw_dagster.notifications.incident_notifier import (
    FlushResult,
    IncidentNotifier,
    build_slack_outbox_sensor,
)
from dw_dagster.notifications.outbox import OutboxMessage, SlackOutbox
from dw_dagster.notifications.resources import SlackNotifier, slack_from_env
from dw_dagster.notifications.routing import (
    HoldMode,
    Recipients,
    alerts_allowed,
    hold_mode_for,
    route_incident,
)

__all__ = [
    "DagsterLinks",
    "FlushResult",
    "HoldMode",
    "IncidentNotifier",
    "OutboxMessage",
    "Recipients",
    "SlackMessage",
    "SlackNotifier",
    "SlackOutbox",
    "alerts_allowed",
    "build_slack_outbox_sensor",
    "dagster_ui_url",
    "hold_mode_for",
    "hold_notice",
    "incident_message",
    "proposed_hold_notice",
    "resolution_message",
    "route_incident",
    "slack_from_env",
    "update_message",
]
