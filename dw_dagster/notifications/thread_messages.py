"""Replies in an incident's threads: an update, and the resolution that closes the incident."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slack_sdk.models.blocks import Block

from dw_dagster.notifications.kit import SlackMessage, fallback, fields_sections, section
from dw_dagster.notifications.links import DagsterLinks, dagster_buttons, dagster_ui_url
from dw_dagster.notifications.text import escape, fmt_value
from dw_dagster.records.incidents import Incident


def update_message(
    incident: Incident,
    text: str,
    *,
    title: str = "Update",
    emoji: str = ":memo:",
    links: DagsterLinks | None = None,
    run_id: str | None = None,
) -> SlackMessage:
    """A thread reply: what changed since the last message, linked to the run it speaks of."""
    links = links or DagsterLinks(dagster_ui_url())
    blocks: list[Block] = [
        section(f"{emoji} *{escape(title)}* · {incident.incident_id}\n{escape(text)}"),
        dagster_buttons(links, incident.incident_id, run_id),
    ]
    return SlackMessage(text=fallback(f"{title} ({incident.incident_id}): {text}"), blocks=blocks)


def resolution_message(
    incident: Incident,
    text: str,
    *,
    verification: Mapping[str, Any] | None = None,
    links: DagsterLinks | None = None,
    run_id: str | None = None,
) -> SlackMessage:
    """The thread reply that closes the incident, with the verification numbers when given (named as
    given: the data's own names, e.g. a total's); ``run_id`` is the run that verified it (the remediation
    run, or the checks run of the clean night)."""
    links = links or DagsterLinks(dagster_ui_url())
    blocks: list[Block] = [section(f":white_check_mark: *Resolved* · {incident.incident_id}\n{escape(text)}")]
    if verification:
        blocks += fields_sections("*Verification*", [(k, fmt_value(k, v)) for k, v in verification.items()])
    blocks.append(dagster_buttons(links, incident.incident_id, run_id))
    return SlackMessage(text=fallback(f"Resolved ({incident.incident_id}): {text}"), blocks=blocks)
