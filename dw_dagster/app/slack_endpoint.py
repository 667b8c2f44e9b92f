"""Slack's interactivity endpoint: the Approve and Reject buttons of a proposal, verified.

``dw-dagster serve-approvals`` serves ``POST /slack/actions``, the Request URL of the Slack app's
Interactivity settings. Each request must carry Slack's signature over its body, made less than five
minutes ago with the app's signing secret (``SLACK_SIGNING_SECRET``); a request seen before is a replay.
The clicking Slack user must be a person of the context file (``slack_user_id``), and the button's run the
one dw-dagster submitted for the plan. The approval is recorded with the Slack request itself as its proof,
verified again by every step of the remediation run. Anything refused is recorded on the incident.

Slack wants an answer within three seconds: the request is verified and acknowledged at once, and the
outcome goes back to the clicker through the payload's ``response_url`` and to the incident's threads.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import click
import httpx

from dw_dagster.remediation.slack_request import (
    APPROVE_ACTION,
    SlackClick,
    SlackRequestError,
    parse_click,
    signing_secret,
    verify_request,
)

ROUTE = "/slack/actions"
log = logging.getLogger(__name__)


class ClickHandler:
    """Verifies a click and records what it decides; built once per endpoint process."""

    def __init__(self) -> None:
        from dw_dagster.app.operations import Operations

        self.secret = signing_secret()
        self.ops = Operations()

    def _refuse(self, plan_id: str | None, reason: str, **detail: Any) -> None:
        from dw_dagster.remediation.approvals import incident_of

        incident_id = incident_of(plan_id) if plan_id else None
        if incident_id and self.ops.store.get(incident_id) is not None:
            self.ops.book().refuse(incident_id, "slack", reason, plan_id=plan_id, **detail)
        log.warning("refused a Slack request: %s", reason)

    def receive(
        self, body: str, timestamp: str | None, signature: str | None
    ) -> tuple[int, str, SlackClick | None]:
        """Checks the request as it arrives: ``(HTTP status, message, the click to act on or None)``."""
        try:
            verify_request(body, timestamp, signature, self.secret)
            click_ = parse_click(body)
        except SlackRequestError as e:
            try:
                claimed = parse_click(body)
            except SlackRequestError:
                claimed = None
            self._refuse(claimed.plan_id if claimed else None, f"{e.problem} Slack request: {e}",
                         claimed_user=claimed.user_id if claimed else "")  # fmt: skip
            return (400 if e.problem == "malformed" else 401), str(e), None
        from dw_dagster.remediation.approvals import incident_of

        incident_id = incident_of(click_.plan_id)
        if self.ops.store.get(incident_id) is None:
            return 404, f"incident {incident_id}: not found", None
        # One Slack request is one click: the same signed request again is a replay.
        first = self.ops.store.append_event(
            incident_id, "slack_request", f"slack_request|{signature}",
            {"timestamp": timestamp, "user": click_.user_id, "action": click_.action_id, "run_id": click_.run_id},
        )  # fmt: skip
        if not first:
            self._refuse(click_.plan_id, "replayed Slack request: this signed request was received before",
                         claimed_user=click_.user_id)  # fmt: skip
            return 401, "replayed request", None
        return 200, "", click_

    def act(self, body: str, timestamp: str, signature: str, click_: SlackClick) -> str:
        """Approves or rejects as the verified clicker; returns what to tell them."""
        from dw_dagster.remediation.approvals import ApprovalError
        from dw_dagster.remediation.gate import approve_run, reject_run, remediation_run
        from dw_dagster.remediation.identity import VIA, SlackProof

        person = self.ops.context.person_by_slack_id(click_.user_id)
        if person is None:
            reason = f"Slack user {click_.user_id} is nobody's slack_user_id in the context file"
            self._refuse(click_.plan_id, reason, claimed_user=click_.user_id)
            return f":no_entry: Not recorded: {reason}; ask an owner to add your member id."
        proof = SlackProof(body=body, timestamp=timestamp, signature=signature)
        book = self.ops.book()
        try:
            _, plan, _ = remediation_run(self.ops.instance, book, click_.run_id)
            if plan.plan_id != click_.plan_id:
                raise ApprovalError(f"run {click_.run_id} carries plan {plan.plan_id}, not {click_.plan_id}")
            if click_.action_id == APPROVE_ACTION:
                at = datetime.fromtimestamp(int(timestamp), UTC)
                out = approve_run(self.ops.instance, book, click_.run_id, person, lambda _: proof, VIA["slack"],
                                  click_.values, at=at)  # fmt: skip
                teams = ", ".join(a.team for a in out.given)
                status = (
                    "every owner has approved: the run is released"
                    if out.released
                    else f"waiting for {', '.join(out.missing)}"
                )
                text = f":white_check_mark: {person.name} approved {plan.plan_id} in Slack for {teams}; {status}."
                self.ops.tell_owners(
                    plan.incident_id,
                    text,
                    "approval",
                    f"{plan.plan_id}|{teams}|{out.run_id}",
                    run_id=out.run_id,
                )
                return text
            decision = reject_run(self.ops.instance, book, click_.run_id, person, lambda _: proof,
                                  f"rejected with the Reject button in Slack by {person.name}")  # fmt: skip
            text = f":no_entry: {decision.by} rejected {decision.plan_id} in Slack; the run is canceled and nothing changes."
            self.ops.tell_owners(
                plan.incident_id, text, "rejection", decision.plan_id, run_id=decision.run_id
            )
            return text
        except ApprovalError as e:
            self._refuse(click_.plan_id, str(e), claimed_user=click_.user_id, person=person.name)
            return f":no_entry: Not recorded: {e}"


def respond(response_url: str | None, text: str) -> None:
    """Tells the clicker the outcome (only they see it), through the URL Slack gave with the click."""
    if not response_url:
        return
    try:
        httpx.post(response_url, json={"response_type": "ephemeral", "replace_original": False, "text": text},
                   timeout=10.0).raise_for_status()  # fmt: skip
    except httpx.HTTPError as e:
        log.warning("could not answer the click through its response_url: %s", e)


def build_app(handler: ClickHandler):
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    def act_and_respond(body: str, timestamp: str, signature: str, click_: SlackClick) -> None:
        try:
            text = handler.act(body, timestamp, signature, click_)
        except Exception as e:  # noqa: BLE001 - the clicker hears about any failure, and it is logged
            log.exception("handling a Slack click failed")
            text = f":warning: Not recorded: {type(e).__name__}: {e}"
        respond(click_.response_url, text)

    async def actions(request: Request):
        body = (await request.body()).decode("utf-8", errors="replace")
        timestamp = request.headers.get("x-slack-request-timestamp")
        signature = request.headers.get("x-slack-signature")
        status, message, click_ = await run_in_threadpool(handler.receive, body, timestamp, signature)
        if click_ is None:
            return PlainTextResponse(message, status_code=status)
        task = BackgroundTask(act_and_respond, body, timestamp, signature, click_)
        return PlainTextResponse("", status_code=200, background=task)

    async def health(_: Request):
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route(ROUTE, actions, methods=["POST"]), Route("/healthz", health)])


@click.command("serve-approvals")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=8780, show_default=True)
def serve(host: str, port: int) -> None:
    """Serve Slack's interactivity endpoint (POST /slack/actions): approvals and rejections by button."""
    import uvicorn

    handler = ClickHandler()
    click.echo(f"Slack interactivity endpoint: http://{host}:{port}{ROUTE} (set it as the app's Request URL)")
    uvicorn.run(build_app(handler), host=host, port=port, log_level="warning")
