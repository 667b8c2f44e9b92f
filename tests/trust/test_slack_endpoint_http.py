"""``dw-dagster serve-approvals`` over real HTTP, as Slack reaches it: every interaction is acknowledged with
a 200 within Slack's three seconds (a link button's too), nothing a request that Slack did not sign can make
touches the warehouse, a flood is limited by its source, and an Approve click is answered before the
warehouse is read, its outcome sent to the click's ``response_url``.

The endpoint runs as its own process (uvicorn). Its warehouse is a stand-in on a loopback socket that
records every request reaching it, holds each until the test lets it go, then refuses the login as
Snowflake answers a wrong password: whether and when the endpoint reads the warehouse is what is measured.
Requests are signed as Slack signs them (``dw_local.slack_server.sign``, checked by slack_sdk's verifier).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from capture import Capture
from slack_sdk.signature import SignatureVerifier

from dw_local.slack_server import sign
from dw_local.world import DISTRIBUTOR_DIR, free_port

SECRET = "endpoint-test-signing-secret"
ACK_SECONDS = 3.0  # Slack's limit for the acknowledgement
PLAN = "INC-20250616-dc7a01-p1"


class Warehouse(ThreadingHTTPServer):
    """A Snowflake host that records each request and holds it until ``release``, then refuses the login."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, str]] = []
        self.released = threading.Event()
        warehouse = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                warehouse.requests.append((time.monotonic(), self.path))
                self.rfile.read(int(self.headers.get("content-length") or 0))
                warehouse.released.wait(60)
                body = json.dumps({"success": False, "code": "390100", "data": None,
                                   "message": "Incorrect username or password was specified."}).encode()  # fmt: skip
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Endpoint:
    def __init__(self, url: str, log: Path, warehouse: Warehouse, replies: Capture):
        self.url, self.log, self.warehouse, self.replies = url, log, warehouse, replies

    def post(self, body: str, headers: dict[str, str], source: str = "127.0.0.1") -> httpx.Response:
        """One request from ``source`` (a loopback address of its own), waiting no longer than Slack does."""
        with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=ACK_SECONDS) as client:
            return client.post(
                self.url,
                content=body,
                headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
            )

    def signed(self, body: str, source: str = "127.0.0.1") -> httpx.Response:
        ts = str(int(time.time()))
        headers = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(SECRET, ts, body)}
        assert SignatureVerifier(SECRET).is_valid(body, ts, headers["X-Slack-Signature"])
        return self.post(body, headers, source)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    warehouse, replies = Warehouse(), Capture()
    folder = tmp_path_factory.mktemp("endpoint")
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKE_")},
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": "xoxb-endpoint-test",
        "SLACK_BASE_URL": f"{replies.url}/api/",
        "SNOWFLAKE_ACCOUNT": "endpoint-test",
        "SNOWFLAKE_USER": "DW_DAGSTER",
        "SNOWFLAKE_PASSWORD": "not-the-password",
        "SNOWFLAKE_DATABASE": "DW_PROD",
        "SNOWFLAKE_HOST": "127.0.0.1",
        "SNOWFLAKE_PORT": str(warehouse.server_address[1]),
        "SNOWFLAKE_PROTOCOL": "http",
        "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true",
        # Longer than Slack waits: a read before the answer would make the answer late.
        "SNOWFLAKE_LOGIN_TIMEOUT": "30",
        "DW_CONTEXT_FILE": str(DISTRIBUTOR_DIR / "context.yaml"),
        "DW_METRICS_FILE": str(DISTRIBUTOR_DIR / "metrics.yaml"),
        "DAGSTER_HOME": str(folder),
    }
    script = Path(sys.executable).with_name("dw-dagster")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "dw_dagster"]
    log = folder / "approvals.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*command, "serve-approvals", "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the endpoint did not start"
            time.sleep(0.2)
        yield Endpoint(f"http://127.0.0.1:{port}/slack/actions", log, warehouse, replies)
    finally:
        warehouse.released.set()
        proc.terminate()
        proc.wait(timeout=20)
        warehouse.shutdown()
        replies.shutdown()


def click_body(action_id: str, response_url: str, user: str = "U0INVAN01", url: str | None = None) -> str:
    value = json.dumps({"plan_id": PLAN, "run_id": "r-held"})
    action = {"action_id": action_id, "block_id": "dw_decision|p1", "type": "button", "action_ts": "1.2",
              "text": {"type": "plain_text", "text": action_id}}  # fmt: skip
    action.update({"url": url} if url else {"value": value})
    payload = {
        "type": "block_actions", "user": {"id": user}, "team": {"id": "T0LOCAL"},
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0INV"},
        "channel": {"id": "C0INV", "name": "inventory-analytics"}, "response_url": response_url,
        "actions": [action],
    }  # fmt: skip
    return urlencode({"payload": json.dumps(payload)})


def test_a_link_button_click_is_answered_200_at_once_and_nothing_else(endpoint: Endpoint):
    """Slack posts a link button's click too, and shows an error mark unless it gets a 200 in 3 s."""
    for action in ("dw_open_run", "dw_open_incident", "some_future_link"):
        body = click_body(action, f"{endpoint.replies.url}/respond", url="http://localhost:3000/runs/r-held")
        started = time.monotonic()
        answer = endpoint.signed(body)
        assert answer.status_code == 200 and answer.text == ""
        assert time.monotonic() - started < ACK_SECONDS
    time.sleep(0.5)
    assert endpoint.warehouse.requests == [] and not endpoint.replies.requests, "a link click does nothing"


def test_a_hundred_requests_slack_did_not_sign_write_nothing_and_a_flood_is_limited_by_source(
    endpoint: Endpoint,
):
    body = click_body("dw_approve", f"{endpoint.replies.url}/respond")
    ts = str(int(time.time()))
    forged = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign("guessed", ts, body)}
    started = time.monotonic()
    answers = [endpoint.post(body, forged, source="127.0.0.2") for _ in range(100)]
    elapsed = time.monotonic() - started
    statuses = [a.status_code for a in answers]
    # A minute's worth is refused as forged, then the flood before its signature is checked (60 a minute:
    # one more for each second the flood lasted).
    assert statuses[:60] == [401] * 60 and set(statuses[60:]) <= {401, 429}
    assert statuses.count(401) <= 61 + elapsed and 429 in statuses
    # Each refusal of the flood says when to come back (a request after it may find the second's new token:
    # on a loaded machine the flood's requests can be a second apart).
    assert all(int(a.headers["Retry-After"]) >= 1 for a in answers if a.status_code == 429)
    old = str(int(time.time()) - 600)
    stale = {"X-Slack-Request-Timestamp": old, "X-Slack-Signature": sign(SECRET, old, body)}
    assert endpoint.post(body, stale).status_code == 401 and endpoint.post(body, {}).status_code == 401
    time.sleep(0.5)
    assert endpoint.warehouse.requests == [], "no refusal opened a warehouse session"
    # Refusals are logged, the flood once.
    log = endpoint.log.read_text()
    assert log.count("refused a Slack request from 127.0.0.2: forged") == statuses.count(401)
    assert log.count("rate-limiting Slack requests from 127.0.0.2") == 1
    assert "refused a Slack request from 127.0.0.1: stale" in log and "from 127.0.0.1: unsigned" in log
    # Another source is not limited by that flood.
    link = click_body("dw_open_run", f"{endpoint.replies.url}/respond", url="http://localhost:3000/runs/r")
    assert endpoint.signed(link).status_code == 200


def test_an_approve_click_is_acknowledged_before_the_warehouse_is_read(endpoint: Endpoint):
    """Before, the endpoint read the incident and wrote the request to the warehouse, then answered: a real
    Snowflake login and a warehouse resume can take longer than Slack's three seconds."""
    endpoint.warehouse.released.clear()
    body = click_body("dw_approve", f"{endpoint.replies.url}/respond/approve")
    started = time.monotonic()
    answer = endpoint.signed(body)  # times out (fails) if the endpoint waits for the held warehouse
    acknowledged = time.monotonic()
    assert answer.status_code == 200 and answer.text == ""
    assert acknowledged - started < ACK_SECONDS
    # The approval's work starts after the answer: its first warehouse request is held until now.
    deadline = time.monotonic() + 30
    while not endpoint.warehouse.requests:
        assert time.monotonic() < deadline, "the click's work never reached the warehouse"
        time.sleep(0.05)
    assert endpoint.warehouse.requests[0][0] >= started
    endpoint.warehouse.released.set()
    # The outcome (here: the warehouse refused the login) reaches the clicker through response_url.
    while not [r for r in endpoint.replies.requests if r[1] == "/respond/approve"]:
        assert time.monotonic() < deadline, "the clicker was never told the outcome"
        time.sleep(0.05)
    ((_, _, reply),) = [r for r in endpoint.replies.requests if r[1] == "/respond/approve"]
    outcome = json.loads(reply)
    assert outcome["response_type"] == "ephemeral" and outcome["text"].startswith(":warning: Not recorded:")
    assert "Incorrect username or password" in outcome["text"]
    # The same signed request again is a replay, refused from memory: the warehouse is not asked again.
    seen = len(endpoint.warehouse.requests)
    again = endpoint.post(body, {k: v for k, v in answer.request.headers.items() if k.startswith("x-slack")})
    assert again.status_code == 401 and "replayed" in again.text
    assert len(endpoint.warehouse.requests) == seen
