"""Slack's interactivity endpoint: the Approve and Reject buttons of a proposal, verified.

``dw-dagster serve-approvals`` serves ``POST /slack/actions``, the Request URL of the Slack app's
Interactivity settings. Each request must carry Slack's signature over its body, made less than five
minutes ago with the app's signing secret (``SLACK_SIGNING_SECRET``); a request seen before is a replay.
The clicking Slack user must be a person of the context file (``slack_user_id``), and the button's run the
one dw-dagster submitted for the plan. The approval is recorded with the Slack request itself as its proof,
verified again by every step of the remediation run.

What is checked before the answer touches nothing but memory: the request's rate per source, its signature,
its age, whether it was seen before. A request refused there is logged, never written to the warehouse (100
requests with a bad signature would otherwise be 100 rows). Slack wants every interaction acknowledged with
a 200 within three seconds (https://docs.slack.dev/interactivity/handling-user-interaction): a link button
("Open run in Dagster") posts one too, and gets that 200 and nothing else; an Approve or Reject click gets it
at once, and the approval's work (the incident store, the gate, their Snowflake sessions) is done after the
answer, its outcome sent to the clicker through the payload's ``response_url`` and to the incident's threads.
A verified click that is refused there (not a person, not an owner, a replay seen by an earlier process) is
recorded on its incident.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import click
import httpx

from dw_dagster.remediation.slack_request import (
    APPROVE_ACTION,
    MAX_AGE_SECONDS,
    SlackClick,
    SlackRequestError,
    interaction_payload,
    is_decision,
    parse_click,
    signing_secret,
    verify_request,
)

ROUTE = "/slack/actions"
DEFAULT_REQUESTS_PER_MINUTE = 60
log = logging.getLogger(__name__)


class SourceLimiter:
    """A token bucket per source address: ``per_minute`` requests in a burst, refilled at that rate. A
    flood from one address is answered 429 before its signature is even computed; Slack's own clicks come
    a few a minute."""

    def __init__(self, per_minute: int, clock=time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.buckets: dict[str, tuple[float, float]] = {}
        self.said: dict[str, float] = {}
        """When each limited source was last logged: a flood is said once a minute, not once a request."""

    def allow(self, source: str) -> bool:
        now = self.clock()
        tokens, at = self.buckets.get(source, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - at) * self.rate)
        allowed = tokens >= 1
        self.buckets[source] = (tokens - 1 if allowed else tokens, now)
        if not allowed and (source not in self.said or now - self.said[source] >= 60):
            self.said[source] = now
            log.warning("rate-limiting Slack requests from %s: over %d a minute", source, self.capacity)
        if len(self.buckets) > 10_000:
            # Full buckets are the same as none: forget them, so a scan of many addresses holds no memory.
            self.buckets = {
                k: v for k, v in self.buckets.items() if v[0] + (now - v[1]) * self.rate < self.capacity
            }
            self.said = {k: at for k, at in self.said.items() if now - at < 60}
        return allowed

    def retry_after(self, source: str) -> int:
        tokens, _ = self.buckets.get(source, (0.0, 0.0))
        return max(1, int((1 - tokens) / self.rate) + 1)


class ReplayGuard:
    """The signatures of the decisions this process accepted, for as long as Slack's five minutes make a
    request acceptable: the same signed request again is a replay, refused without a warehouse read. (The
    incident's ``slack_request`` event, written after the answer, catches a replay sent to another process.)"""

    def __init__(self, clock=time.time) -> None:
        self.clock = clock
        self.seen: dict[str, float] = {}
        self.lock = threading.Lock()

    def first(self, signature: str) -> bool:
        now = self.clock()
        with self.lock:
            self.seen = {s: until for s, until in self.seen.items() if until > now}
            if signature in self.seen:
                return False
            self.seen[signature] = now + 2 * MAX_AGE_SECONDS
            return True


class ClickHandler:
    """Checks each request as it arrives, and acts on a decision after the answer; built once per process."""

    def __init__(self, per_minute: int = DEFAULT_REQUESTS_PER_MINUTE) -> None:
        from dw_dagster.app.operations import Operations

        self.secret = signing_secret()
        self.ops = Operations()
        self.limiter = SourceLimiter(per_minute)
        self.replays = ReplayGuard()

    def check(
        self, body: str, timestamp: str | None, signature: str | None, source: str
    ) -> tuple[int, str, SlackClick | SlackRequestError | None]:
        """``(HTTP status, message, what to do after answering)``: the click to act on, the error to tell the
        clicker, or nothing. Reads nothing but memory: whatever is refused here is logged, not written."""
        if not self.limiter.allow(source):
            return 429, "too many requests", None
        try:
            verify_request(body, timestamp, signature, self.secret)
            payload = interaction_payload(body)
        except SlackRequestError as e:
            log.warning("refused a Slack request from %s: %s: %s", source, e.problem, e)
            return (400 if e.problem == "malformed" else 401), str(e), None
        if not is_decision(payload):
            # A link button's click, or anything else Slack sends: acknowledged, and nothing else.
            return 200, "", None
        assert signature is not None  # verified above
        if not self.replays.first(signature):
            log.warning(
                "refused a Slack request from %s: replayed: this signed request was received before", source
            )
            return 401, "replayed request", None
        try:
            return 200, "", parse_click(body)
        except SlackRequestError as e:
            log.warning("a Slack decision from %s could not be read: %s", source, e)
            return 200, "", e

    def _refuse(self, plan_id: str | None, reason: str, **detail: Any) -> None:
        """Records a verified click's refusal on its incident (if there is one) and logs it."""
        from dw_dagster.remediation.approvals import incident_of

        incident_id = incident_of(plan_id) if plan_id else None
        if incident_id and self.ops.store.get(incident_id) is not None:
            self.ops.book().refuse(incident_id, "slack", reason, plan_id=plan_id, **detail)
        log.warning("refused a Slack request: %s", reason)

    def act(self, body: str, timestamp: str, signature: str, click_: SlackClick) -> str:
        """Approves or rejects as the verified clicker, after Slack has its answer; returns what to tell them."""
        from dw_dagster.remediation.approvals import ApprovalError, incident_of
        from dw_dagster.remediation.gate import approve_run, reject_run, remediation_run
        from dw_dagster.remediation.identity import VIA, SlackProof

        incident_id = incident_of(click_.plan_id)
        if self.ops.store.get(incident_id) is None:
            return f":no_entry: Not recorded: incident {incident_id} not found."
        # One Slack request is one click: the same signed request again, to another process, is a replay.
        first = self.ops.store.append_event(
            incident_id,
            "slack_request",
            f"slack_request|{signature}",
            {
                "timestamp": timestamp,
                "user": click_.user_id,
                "action": click_.action_id,
                "run_id": click_.run_id,
            },
        )
        if not first:
            self._refuse(
                click_.plan_id,
                "replayed Slack request: this signed request was received before",
                claimed_user=click_.user_id,
            )
            return ":no_entry: Not recorded: this click was received before."
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
                out = approve_run(
                    self.ops.instance,
                    book,
                    click_.run_id,
                    person,
                    lambda _: proof,
                    VIA["slack"],
                    click_.values,
                    at=at,
                )
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
            decision = reject_run(
                self.ops.instance,
                book,
                click_.run_id,
                person,
                lambda _: proof,
                f"rejected with the Reject button in Slack by {person.name}",
            )
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
        httpx.post(
            response_url,
            json={"response_type": "ephemeral", "replace_original": False, "text": text},
            timeout=10.0,
        ).raise_for_status()
    except httpx.HTTPError as e:
        log.warning("could not answer the click through its response_url: %s", e)


def build_app(handler: ClickHandler):
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
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

    def unreadable(body: str, error: SlackRequestError) -> None:
        try:
            response_url = interaction_payload(body).get("response_url")
        except SlackRequestError:
            return
        respond(response_url if isinstance(response_url, str) else None, f":no_entry: Not recorded: {error}")

    async def actions(request: Request):
        body = (await request.body()).decode("utf-8", errors="replace")
        timestamp = request.headers.get("x-slack-request-timestamp")
        signature = request.headers.get("x-slack-signature")
        source = request.client.host if request.client else "unknown"
        # In the event loop, not a thread: nothing here waits on anything.
        status, message, then = handler.check(body, timestamp, signature, source)
        if status == 429:
            retry = str(handler.limiter.retry_after(source))
            return PlainTextResponse(message, status_code=429, headers={"Retry-After": retry})
        if isinstance(then, SlackClick):
            assert timestamp is not None and signature is not None  # verified by check
            task = BackgroundTask(act_and_respond, body, timestamp, signature, then)
            return PlainTextResponse("", status_code=200, background=task)
        if isinstance(then, SlackRequestError):
            return PlainTextResponse("", status_code=200, background=BackgroundTask(unreadable, body, then))
        return PlainTextResponse(message, status_code=status)

    async def health(_: Request):
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route(ROUTE, actions, methods=["POST"]), Route("/healthz", health)])


@click.command("serve-approvals")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=8780, show_default=True)
@click.option(
    "--max-requests-per-minute",
    type=click.IntRange(min=1),
    default=DEFAULT_REQUESTS_PER_MINUTE,
    show_default=True,
    help="Requests one source address may send a minute (in a burst, or spread); "
    "beyond it the endpoint answers 429 without reading the request.",
)
def serve(host: str, port: int, max_requests_per_minute: int) -> None:
    """Serve Slack's interactivity endpoint (POST /slack/actions): approvals and rejections by button."""
    import uvicorn

    handler = ClickHandler(max_requests_per_minute)
    click.echo(f"Slack interactivity endpoint: http://{host}:{port}{ROUTE} (set it as the app's Request URL)")
    uvicorn.run(build_app(handler), host=host, port=port, log_level="warning")
