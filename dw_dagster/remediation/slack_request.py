"""Slack's interactive requests: their signature, their age, and the click they carry.

Slack signs each request to the app's Request URL with the app's signing secret: header
``X-Slack-Signature`` = ``v0=`` + HMAC-SHA256(secret, ``v0:{X-Slack-Request-Timestamp}:{raw body}``).
slack_sdk's ``SignatureVerifier`` checks it and refuses a request more than five minutes old. A click is
recorded with the request it came from, so the record can be verified again before it is used (then
without the age limit: the request was fresh when it arrived, and its payload names the plan and the run).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs

from slack_sdk.signature import Clock, SignatureVerifier

from dw_dagster.config import DwConfigError
from dw_dagster.notifications.proposal_message import APPROVE_ACTION, REJECT_ACTION

SIGNING_SECRET_ENV = "SLACK_SIGNING_SECRET"
MAX_AGE_SECONDS = 5 * 60
SET_ACTION_PREFIX = "dw_set:"
"""An input in the proposal message whose action id is ``dw_set:<COLUMN>`` gives that column's value."""

Problem = Literal["unsigned", "stale", "forged", "malformed"]


class SlackRequestError(Exception):
    def __init__(self, problem: Problem, message: str):
        super().__init__(message)
        self.problem = problem


def signing_secret(env: Mapping[str, str] | None = None) -> str:
    secret = (os.environ if env is None else env).get(SIGNING_SECRET_ENV)
    if not secret:
        raise DwConfigError(
            f"{SIGNING_SECRET_ENV}: not set; it is the Slack app's signing secret (api.slack.com/apps → Basic "
            "Information → App Credentials) and proves that a click came from Slack"
        )
    return secret


class _At(Clock):
    def __init__(self, at: float):
        self.at = at

    def now(self) -> float:
        return self.at


def verify_request(
    body: str, timestamp: str | None, signature: str | None, secret: str, now: float | None = None
) -> None:
    """Raises :class:`SlackRequestError` unless Slack signed ``body`` at ``timestamp``, less than five
    minutes ago."""
    if not timestamp or not signature:
        raise SlackRequestError("unsigned", "no X-Slack-Signature or X-Slack-Request-Timestamp header")
    try:
        at = int(timestamp)
    except ValueError:
        raise SlackRequestError(
            "malformed", f"X-Slack-Request-Timestamp: not a Unix time: {timestamp[:40]!r}"
        ) from None
    now = time.time() if now is None else now
    if abs(now - at) > MAX_AGE_SECONDS:
        raise SlackRequestError(
            "stale",
            f"signed {abs(now - at):.0f} s from now, outside Slack's five minutes: refused as a replay",
        )
    if not SignatureVerifier(secret, clock=_At(now)).is_valid(body, timestamp, signature):
        raise SlackRequestError("forged", "X-Slack-Signature does not match the body: not signed by Slack")


def is_recorded_request_valid(body: str, timestamp: str, signature: str, secret: str) -> bool:
    """Whether a recorded request is Slack's, whatever its age (its age was checked when it arrived)."""
    try:
        verify_request(body, timestamp, signature, secret, now=float(int(timestamp)))
    except (SlackRequestError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class SlackClick:
    """One button click (``block_actions``) on a proposal message."""

    user_id: str
    action_id: str
    plan_id: str
    run_id: str
    channel_id: str | None
    message_ts: str | None
    response_url: str | None
    values: dict[str, str] = field(default_factory=dict)
    """What the clicker typed into the message's ``dw_set:<COLUMN>`` inputs."""


def interaction_payload(body: str) -> dict[str, Any]:
    """The JSON payload of a form-encoded interactive request (``payload=<json>``, as Slack posts every
    interaction); :class:`SlackRequestError` ("malformed") if the body is not one."""
    try:
        (raw,) = parse_qs(body, strict_parsing=True)["payload"]
        payload = json.loads(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise SlackRequestError("malformed", f"not a Slack interaction payload: {e}") from None
    if not isinstance(payload, dict):
        raise SlackRequestError("malformed", "not a Slack interaction payload: not a JSON object")
    return payload


def is_decision(payload: Mapping[str, Any]) -> bool:
    """Whether an interaction clicks a proposal's Approve or Reject button. Slack posts the other clicks too
    (a link button's, e.g. "Open run in Dagster"): those are acknowledged and nothing else."""
    actions = payload.get("actions") if payload.get("type") == "block_actions" else None
    return any(
        isinstance(a, dict) and a.get("action_id") in (APPROVE_ACTION, REJECT_ACTION) for a in actions or []
    )


def parse_click(body: str) -> SlackClick:
    """The click in a form-encoded interactive request; :class:`SlackRequestError` ("malformed") if it is
    not a click on an Approve or Reject button of a proposal."""
    payload = interaction_payload(body)
    try:
        if payload.get("type") != "block_actions":
            raise ValueError(f"type {payload.get('type')!r}, expected 'block_actions'")
        actions = [a for a in payload["actions"] if a.get("action_id") in (APPROVE_ACTION, REJECT_ACTION)]
        if len(actions) != 1:
            raise ValueError(f"expected one {APPROVE_ACTION} or {REJECT_ACTION} action")
        value = json.loads(actions[0]["value"])
        values = {
            action_id.removeprefix(SET_ACTION_PREFIX): str(state.get("value") or "")
            for block in ((payload.get("state") or {}).get("values") or {}).values()
            for action_id, state in block.items()
            if action_id.startswith(SET_ACTION_PREFIX) and state.get("value")
        }
        return SlackClick(
            user_id=str(payload["user"]["id"]),
            action_id=actions[0]["action_id"],
            plan_id=str(value["plan_id"]),
            run_id=str(value["run_id"]),
            channel_id=(payload.get("channel") or {}).get("id"),
            message_ts=(payload.get("container") or {}).get("message_ts"),
            response_url=payload.get("response_url"),
            values=values,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SlackRequestError(
            "malformed", f"not a click on a proposal's Approve or Reject button: {e}"
        ) from None
