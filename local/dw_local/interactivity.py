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

from dw_local.forkserver import die_with_parent
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
        start_new_session=True, preexec_fn=None if lw.outlive_parent else die_with_parent,
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
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
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


def click(lw: LocalWorld, message_ts: str, user: str, button: str, wait_seconds: float = 30.0) -> dict:
    """Plays ``user``'s click on ``button`` of the message ``message_ts``, as Slack would send it; returns
    the interaction (what was sent, how the endpoint answered) and the reply the clicker got."""
    answer = httpx.post(
        f"{lw.slack_url}/_sink/click",
        json={"message_ts": message_ts, "user": user, "button": button},
        timeout=30.0,
    )
    body = answer.json()
    if not body.get("ok"):
        raise WorldError(f"click on {message_ts}: {body.get('error')}")
    interaction = body["interaction"]
    replies: list[dict] = []
    deadline = time.monotonic() + wait_seconds
    while interaction["status"] == 200 and not replies and time.monotonic() < deadline:
        time.sleep(0.3)
        replies = httpx.get(f"{lw.slack_url}/_sink/responses/{interaction['id']}", timeout=10.0).json()[
            "responses"
        ]
    return {"interaction": interaction, "replies": replies}
