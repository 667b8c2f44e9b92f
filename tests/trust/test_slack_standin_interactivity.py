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
    assert out["ok"] and out["interaction"]["status"] == 200 and out["interaction"]["acknowledged"] == 1
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
    assert payload["container"]["message_ts"] == posted["ts"]
    assert payload["channel"] == {"id": posted["channel"], "name": "ops"} and posted["channel"].startswith(
        "C"
    )
    assert payload["message"]["ts"] == posted["ts"] and payload["response_url"].startswith(slack)
    httpx.post(
        payload["response_url"], json={"response_type": "ephemeral", "text": "noted"}
    ).raise_for_status()
    (reply,) = httpx.get(f"{slack}/_sink/responses/{sent['id']}").json()["responses"]
    assert reply["text"] == "noted"
    assert [i["id"] for i in httpx.get(f"{slack}/_sink/interactions").json()["interactions"]] == [sent["id"]]
    app.shutdown()


def _post_buttons(slack: str, *elements: dict) -> dict:
    blocks = [{"type": "actions", "block_id": "b1", "elements": list(elements)}]
    return httpx.post(f"{slack}/api/chat.postMessage", headers={"Authorization": "Bearer xoxb-t"},
                      json={"channel": "#ops", "text": "buttons", "blocks": blocks}).json()  # fmt: skip


LINK = {"type": "button", "action_id": "dw_open_run", "text": {"type": "plain_text", "text": "Open run"},
        "url": "http://localhost:3000/runs/r1"}  # fmt: skip
APPROVE = {"type": "button", "action_id": "dw_approve", "text": {"type": "plain_text", "text": "Approve"},
           "value": "{}"}  # fmt: skip


def _click(slack: str, message_ts: str, button: str, **kwargs) -> dict:
    body = {"message_ts": message_ts, "user": "U1", "button": button}
    return httpx.post(f"{slack}/_sink/click", json=body, **kwargs).json()


def _app(slack: str, status: int = 200, delay: float = 0.0) -> Capture:
    app = Capture(status=status, delay=delay)
    httpx.post(
        f"{slack}/_sink/app", json={"request_url": f"{app.url}/slack/actions", "signing_secret": SECRET}
    )
    return app


def test_a_link_button_click_is_sent_to_the_app_too(slack):
    """Slack posts a block_actions payload for a URL button as well, and wants it acknowledged."""
    app = _app(slack)
    posted = _post_buttons(slack, LINK)
    out = _click(slack, posted["ts"], "Open run")
    assert out["button"] == {"text": "Open run", "action_id": "dw_open_run", "url": LINK["url"]}
    ((_, _, body),) = app.requests
    (action,) = json.loads(parse_qs(body.decode())["payload"][0])["actions"]
    assert action["action_id"] == "dw_open_run" and "value" not in action
    assert out["interaction"]["acknowledged"] == 1
    app.shutdown()


def test_a_non_200_or_a_late_answer_is_a_failed_click(slack):
    """Slack shows the person an error unless the app answers 200 within 3 seconds."""
    refusing = _app(slack, status=400)
    posted = _post_buttons(slack, LINK, APPROVE)
    refused = _click(slack, posted["ts"], "dw_open_run")["interaction"]
    assert (refused["status"], refused["acknowledged"]) == (400, 0)
    assert refused["user_sees"] == "an error mark on the button: the app answered HTTP 400"
    refusing.shutdown()
    slow = _app(slack, delay=3.5)
    late = _click(slack, posted["ts"], "Approve", timeout=30)["interaction"]
    assert (late["status"], late["acknowledged"]) == (None, 0) and 3000 <= late["elapsed_ms"] < 3500
    assert late["user_sees"] == "an error mark on the button: no answer within 3 s"
    slow.shutdown()


def test_a_response_url_takes_five_answers(slack):
    app = _app(slack)
    posted = _post_buttons(slack, APPROVE)
    sent = _click(slack, posted["ts"], "Approve")
    url = json.loads(parse_qs(app.requests[0][2].decode())["payload"][0])["response_url"]
    answers = [httpx.post(url, json={"text": f"answer {i}"}) for i in range(6)]
    assert [a.status_code for a in answers] == [200] * 5 + [404] and answers[-1].json()["error"] == "used_url"
    assert len(httpx.get(f"{slack}/_sink/responses/{sent['interaction']['id']}").json()["responses"]) == 5
    assert httpx.post(f"{slack}/_sink/respond/0000", json={"text": "?"}).json()["error"] == "expired_url"
    app.shutdown()


def test_a_click_on_what_does_not_exist_names_what_does(slack):
    posted = httpx.post(f"{slack}/api/chat.postMessage", headers={"Authorization": "Bearer xoxb-t"},
                        json={"channel": "#ops", "text": "no buttons"}).json()  # fmt: skip
    out = httpx.post(
        f"{slack}/_sink/click", json={"message_ts": posted["ts"], "user": "U1", "button": "Approve"}
    )
    assert out.status_code == 404 and out.json()["error"] == "no_buttons"
    assert out.json()["message"] == {
        "ts": posted["ts"],
        "channel": "#ops",
        "title": "no buttons",
        "buttons": [],
    }
    with_buttons = _post_buttons(slack, APPROVE, LINK)
    missing = httpx.post(
        f"{slack}/_sink/click", json={"message_ts": "1.000001", "user": "U1", "button": "Approve"}
    ).json()
    assert missing["error"] == "message_not_found" and missing["with_buttons"][-1]["ts"] == with_buttons["ts"]
    assert [b["text"] for b in missing["with_buttons"][-1]["buttons"]] == ["Approve", "Open run"]
    wrong = httpx.post(
        f"{slack}/_sink/click", json={"message_ts": with_buttons["ts"], "user": "U1", "button": "Aprove"}
    ).json()
    assert wrong["error"] == "button_not_found" and wrong["button"] == "Aprove"
    assert [b["action_id"] for b in wrong["message"]["buttons"]] == ["dw_approve", "dw_open_run"]
