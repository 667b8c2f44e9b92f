"""The Slack stand-in's interactivity, as Slack's: a click is a signed ``block_actions`` request to the app's
Request URL, which slack_sdk's own ``SignatureVerifier`` accepts, and the app answers through ``response_url``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from urllib.parse import parse_qs

import httpx
import pytest
from capture import Capture
from slack_sdk.signature import SignatureVerifier

from dw_local.world import free_port

SECRET = "stand-in-test-secret"


@pytest.fixture(scope="module")
def slack(tmp_path_factory):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dw_local.slack_server",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path_factory.mktemp("slack")),
        ]
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/_sink/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_a_click_is_signed_and_shaped_as_slack_sends_it(slack):
    app = Capture()
    httpx.post(
        f"{slack}/_sink/app", json={"request_url": f"{app.url}/slack/actions", "signing_secret": SECRET}
    ).raise_for_status()
    value = json.dumps({"plan_id": "INC-1-p1", "run_id": "r1"})
    blocks = [{"type": "actions", "block_id": "dw_decision|INC-1-p1", "elements": [
        {"type": "button", "action_id": "dw_approve", "text": {"type": "plain_text", "text": "Approve"}, "value": value, "style": "primary"},
        {"type": "button", "action_id": "dw_reject", "text": {"type": "plain_text", "text": "Reject"}, "value": value}]}]  # fmt: skip
    posted = httpx.post(f"{slack}/api/chat.postMessage", headers={"Authorization": "Bearer xoxb-t"},
                        json={"channel": "#ops", "text": "Held", "blocks": blocks}).json()  # fmt: skip
    out = httpx.post(
        f"{slack}/_sink/click", json={"message_ts": posted["ts"], "user": "U0PRIYA01", "button": "Reject"}
    ).json()
    assert out["ok"] and out["interaction"]["status"] == 200
    ((method, path, body),) = app.requests
    sent = out["interaction"]
    headers = {"X-Slack-Request-Timestamp": sent["timestamp"], "X-Slack-Signature": sent["signature"]}
    assert (method, path) == ("POST", "/slack/actions") and body.decode() == sent["body"]
    assert SignatureVerifier(SECRET).is_valid_request(body, headers), (
        "slack_sdk accepts the stand-in's signature"
    )
    assert not SignatureVerifier("another").is_valid_request(body, headers)
    payload = json.loads(parse_qs(body.decode())["payload"][0])
    assert payload["type"] == "block_actions" and payload["user"]["id"] == "U0PRIYA01"
    (action,) = payload["actions"]
    assert (action["action_id"], action["value"], action["block_id"]) == (
        "dw_reject",
        value,
        "dw_decision|INC-1-p1",
    )
    assert payload["container"]["message_ts"] == posted["ts"] and payload["channel"]["id"] == "#ops"
    assert payload["message"]["ts"] == posted["ts"] and payload["response_url"].startswith(slack)
    httpx.post(
        payload["response_url"], json={"response_type": "ephemeral", "text": "noted"}
    ).raise_for_status()
    (reply,) = httpx.get(f"{slack}/_sink/responses/{sent['id']}").json()["responses"]
    assert reply["text"] == "noted"
    assert [i["id"] for i in httpx.get(f"{slack}/_sink/interactions").json()["interactions"]] == [sent["id"]]
    app.shutdown()


def test_a_click_without_the_apps_settings_or_on_a_missing_button_is_an_error(slack, tmp_path):
    posted = httpx.post(f"{slack}/api/chat.postMessage", headers={"Authorization": "Bearer xoxb-t"},
                        json={"channel": "#ops", "text": "no buttons"}).json()  # fmt: skip
    out = httpx.post(
        f"{slack}/_sink/click", json={"message_ts": posted["ts"], "user": "U1", "button": "Approve"}
    )
    assert out.status_code == 404 and "no button" in out.json()["error"]
    missing = httpx.post(
        f"{slack}/_sink/click", json={"message_ts": "1.000001", "user": "U1", "button": "Approve"}
    )
    assert missing.status_code == 404 and missing.json()["error"] == "message_not_found"
