"""The local world's Slack app: dw-dagster's interactivity endpoint, and the stand-in pointed at it.

In production the endpoint runs beside the Dagster webserver (``dw-dagster serve-approvals``) and the Slack
app's settings name its URL; here the same command runs on a loopback port with the world's environment,
and the Slack stand-in is given its Request URL and signing secret as Slack's app settings would be.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from dw_dagster.coalesce.http_client import tls_context
from dw_local.forkserver import child_setup
from dw_local.world import LOCAL_SLACK_SIGNING_SECRET, LocalWorld, WorldError, free_port


def start_endpoint(
    lw: LocalWorld, dagster_home: Path, env: dict[str, str] | None = None, port: int | None = None,
    timeout: float = 90.0,
) -> str:  # fmt: skip
    """Starts ``dw-dagster serve-approvals`` for the world (stopped with the world's servers), with the
    world's environment (and ``env`` over it), points the Slack stand-in at it; returns its Request URL."""
    port = port or free_port()
    script = Path(sys.executable).with_name("dw-dagster")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "dw_dagster"]
    env = {**os.environ, **lw.env(), "DAGSTER_HOME": str(dagster_home), **(env or {})}
    log = open(lw.root / "logs" / "approvals.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        [*command, "serve-approvals", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env,
        start_new_session=True, preexec_fn=child_setup(die=not lw.outlive_parent),
    )  # fmt: skip
    lw.add_process("approvals", proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise WorldError(
                f"the approvals endpoint exited with code {proc.returncode}; see {lw.root / 'logs' / 'approvals.log'}"
            )
        try:
            # One TLS context for every poll (a new one is 21 ms of CPU: world.LocalWorld._snowflake_up).
            if httpx.get(f"{url}/healthz", timeout=1.0, verify=tls_context()).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise WorldError(f"the approvals endpoint did not answer within {timeout:.0f} s")
        time.sleep(0.2)
    request_url = f"{url}/slack/actions"
    httpx.post(
        f"{lw.slack_url}/_sink/app", json={"request_url": request_url, "signing_secret": LOCAL_SLACK_SIGNING_SECRET},
        timeout=10.0,
    ).raise_for_status()  # fmt: skip
    return request_url


class ClickRefused(WorldError):
    """The stand-in could not play the click as asked (no such message or button): the asker's mistake."""


def click(lw: LocalWorld, message_ts: str, user: str, button: str, wait_seconds: float = 30.0) -> dict:
    """Plays ``user``'s click on ``button`` of the message ``message_ts``, as Slack would send it; returns
    the interaction (what was sent, how the endpoint answered, whether Slack counts it acknowledged), the
    button, and the replies the clicker got. Raises :class:`ClickRefused` naming what exists when the
    message or the button does not."""
    try:
        answer = httpx.post(
            f"{lw.slack_url}/_sink/click",
            json={"message_ts": message_ts, "user": user, "button": button},
            timeout=30.0,
        )
    except httpx.HTTPError as e:
        raise WorldError(
            f"the local Slack at {lw.slack_url} did not answer ({type(e).__name__}): is the world up?"
        ) from None
    body = answer.json()
    if not body.get("ok"):
        raise (
            ClickRefused(refusal_text(body))
            if answer.status_code == 404
            else WorldError(f"click on {message_ts}: {body.get('error')}")
        )
    interaction = body["interaction"]
    replies: list[dict] = []
    # A link button opens its page; the app's own buttons are answered through response_url, which stays
    # valid after a late acknowledgement too (the person sees Slack's error mark, then the app's answer).
    # An app that refused the request (4xx, 5xx) answers nothing.
    answering = interaction["status"] in (200, None)
    wait = wait_seconds if answering and not body["button"].get("url") else 0.0
    deadline = time.monotonic() + wait
    while not replies and time.monotonic() < deadline:
        time.sleep(0.3)
        replies = httpx.get(f"{lw.slack_url}/_sink/responses/{interaction['id']}", timeout=10.0).json()[
            "responses"
        ]
    return {"interaction": interaction, "button": body["button"], "replies": replies}


def refusal_text(body: dict) -> str:
    """One line: what was wrong with the click asked for, and what exists instead."""
    error = body.get("error")
    if error == "button_not_found":
        msg = body["message"]
        buttons = ", ".join(f'"{b["text"]}" ({b["action_id"]})' for b in msg["buttons"])
        return f'message {_describe(msg)} has no button "{body["button"]}"; its buttons: {buttons}'
    if error == "no_buttons":
        return f"message {_describe(body['message'])} has no buttons; {_candidates(body)}"
    return f"no message has ts {body.get('message_ts')} in the local Slack; {_candidates(body)}"


def _describe(msg: dict) -> str:
    title = f', "{msg["title"]}"' if msg.get("title") else ""
    return f"{msg['ts']} ({msg['channel']}{title})"


def _candidates(body: dict) -> str:
    found = body.get("with_buttons") or []
    if not found:
        return "no message has buttons yet (`dw-dagster slack log` shows every message with its ts)"
    listed = "; ".join(
        f"{_describe(m)}: {', '.join(b['text'] for b in m['buttons'])}" for m in reversed(found)
    )
    return f"the latest messages with buttons: {listed}"
