"""Notifications: Slack through dagster-slack, with Block Kit messages in the pipeline's own words,
delivered through a durable outbox.

One module a concern: ``text`` (numbers, names, times), ``kit`` (Block Kit within Slack's limits, long
messages split), ``links`` (the Dagster UI), ``owners``, ``wording`` (the context and metrics files'
words), one module per message kind (``incident_message``, ``hold_message``, ``proposal_message``,
``receipt_message``, ``thread_messages``), ``routing``, ``incident_notifier`` (the notifier),
``delivery`` (posting the outbox), ``outbox`` (its tables), and the incident view and receipt text the UI
and the commands show (``incident_view``, ``receipt_text``).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Imported when first used (PEP 562): a command that only reads the incident view does not pay for the
# outbox, its delivery and the notifier. ``incident_message`` is imported here: the function shares its
# module's name, and importing the module later would rebind the package's attribute to the module.
from dw_dagster.notifications.incident_message import incident_message

_EXPORTS = {
    "FlushResult": "delivery",
    "hold_notice": "hold_message",
    "proposed_hold_notice": "hold_message",
    "IncidentNotifier": "incident_notifier",
    "SlackMessage": "kit",
    "DagsterLinks": "links",
    "dagster_ui_url": "links",
    "OutboxMessage": "outbox",
    "SlackOutbox": "outbox",
    "proposal_messages": "proposal_message",
    "receipt_messages": "receipt_message",
    "SlackNotifier": "resources",
    "slack_from_env": "resources",
    "HoldMode": "routing",
    "Recipients": "routing",
    "alerts_allowed": "routing",
    "hold_mode_for": "routing",
    "route_incident": "routing",
    "resolution_message": "thread_messages",
    "update_message": "thread_messages",
    "Wording": "wording",
    "wording_for": "wording",
}

if TYPE_CHECKING:
    from dw_dagster.notifications.delivery import FlushResult
    from dw_dagster.notifications.hold_message import hold_notice, proposed_hold_notice
    from dw_dagster.notifications.incident_notifier import IncidentNotifier
    from dw_dagster.notifications.kit import SlackMessage
    from dw_dagster.notifications.links import DagsterLinks, dagster_ui_url
    from dw_dagster.notifications.outbox import OutboxMessage, SlackOutbox
    from dw_dagster.notifications.proposal_message import proposal_messages
    from dw_dagster.notifications.receipt_message import receipt_messages
    from dw_dagster.notifications.resources import SlackNotifier, slack_from_env
    from dw_dagster.notifications.routing import (
        HoldMode,
        Recipients,
        alerts_allowed,
        hold_mode_for,
        route_incident,
    )
    from dw_dagster.notifications.thread_messages import resolution_message, update_message
    from dw_dagster.notifications.wording import Wording, wording_for


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)


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
    "Wording",
    "alerts_allowed",
    "dagster_ui_url",
    "hold_mode_for",
    "hold_notice",
    "incident_message",
    "proposal_messages",
    "proposed_hold_notice",
    "receipt_messages",
    "resolution_message",
    "route_incident",
    "slack_from_env",
    "update_message",
    "wording_for",
]
