"""The Slack stand-in, driven by slack_sdk through dagster-slack's resource, over a real socket."""

from __future__ import annotations

import httpx
import pytest
from slack_sdk.errors import SlackApiError

from dw_dagster.notifications.resources import SlackNotifier
from dw_local.slack_server import SlackSink
from dw_local.world import LOCAL_SLACK_TOKEN, LocalWorld


@pytest.fixture(scope="module")
def slack_world(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("slack"), services=("slack",)) as lw:
        yield lw


def _client(lw: LocalWorld, retries: int = 3):
    return SlackNotifier(
        token=LOCAL_SLACK_TOKEN, base_url=f"{lw.slack_url}/api/", max_retries=retries
    ).get_client()


def test_post_thread_update_and_replies(slack_world: LocalWorld):
    client = _client(slack_world)
    root = client.chat_postMessage(
        channel="#inventory-analytics",
        text="Incident: network on-hand units down 1.8%",
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*Incident*"}}],
    )
    assert root["ok"] and root["ts"]
    reply = client.chat_postMessage(channel="#inventory-analytics", text="update", thread_ts=root["ts"])
    assert reply["ts"] > root["ts"]
    client.chat_update(channel="#inventory-analytics", ts=root["ts"], text="Incident (resolved)")
    thread = client.conversations_replies(channel="#inventory-analytics", ts=root["ts"])["messages"]
    assert [m["text"] for m in thread] == ["Incident (resolved)", "update"]
    assert thread[0]["blocks"][0]["text"]["text"] == "*Incident*"
    link = client.chat_getPermalink(channel="#inventory-analytics", message_ts=root["ts"])["permalink"]
    assert root["ts"].replace(".", "") in link


def test_errors_are_slack_shaped(slack_world: LocalWorld):
    client = _client(slack_world)
    with pytest.raises(SlackApiError) as e:
        client.chat_postMessage(channel="", text="x")
    assert e.value.response["error"] == "channel_not_found"
    resp = httpx.post(f"{slack_world.slack_url}/api/chat.postMessage", json={"channel": "#x", "text": "x"})
    assert resp.json() == {"ok": False, "error": "not_authed"}


def test_outage_is_retried_and_nothing_is_lost(slack_world: LocalWorld):
    httpx.post(f"{slack_world.slack_url}/_sink/faults", json={"status": 503, "count": 2})
    sent = _client(slack_world).chat_postMessage(channel="#buyers", text="hold expedite orders")
    assert sent["ok"]
    stored = SlackSink(slack_world.root / "slack").messages("channel = ?", ("#buyers",))
    assert [m["text"] for m in stored] == ["hold expedite orders"]


def test_outage_longer_than_retries_raises(slack_world: LocalWorld):
    httpx.post(f"{slack_world.slack_url}/_sink/faults", json={"status": 503, "count": 5})
    with pytest.raises(SlackApiError):
        _client(slack_world, retries=1).chat_postMessage(channel="#buyers", text="lost?")
    httpx.post(f"{slack_world.slack_url}/_sink/faults", json={"status": 503, "count": 0})
    assert not SlackSink(slack_world.root / "slack").messages("text = ?", ("lost?",))


def test_messages_survive_a_crash(slack_world: LocalWorld):
    _client(slack_world).chat_postMessage(channel="#planning-ops", text="durable")
    slack_world.restart("slack")
    log = httpx.get(f"{slack_world.slack_url}/_sink/messages", params={"channel": "#planning-ops"}).json()
    assert [m["text"] for m in log["messages"]] == ["durable"]
