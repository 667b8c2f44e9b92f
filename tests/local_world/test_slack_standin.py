"""The Slack stand-in, driven by slack_sdk through dagster-slack's resource, over a real socket."""

from __future__ import annotations

import sqlite3

import httpx
import pytest
from slack_sdk.errors import SlackApiError

from dw_dagster.notifications.resources import SlackNotifier
from dw_local.slack_server import SlackSink, channel_id_for
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
    # Slack answers with the channel's id, which the methods other than chat.postMessage require.
    channel = root["channel"]
    assert (
        channel.startswith("C")
        and channel == client.chat_postMessage(channel="inventory-analytics", text="again")["channel"]
    )
    reply = client.chat_postMessage(channel=channel, text="update", thread_ts=root["ts"])
    assert reply["ts"] > root["ts"] and reply["channel"] == channel
    client.chat_update(channel=channel, ts=root["ts"], text="Incident (resolved)")
    thread = client.conversations_replies(channel=channel, ts=root["ts"])["messages"]
    assert [m["text"] for m in thread] == ["Incident (resolved)", "update"]
    assert thread[0]["blocks"][0]["text"]["text"] == "*Incident*"
    assert thread[0]["reply_count"] == 1 and thread[1]["thread_ts"] == root["ts"] and "edited" in thread[0]
    link = client.chat_getPermalink(channel=channel, message_ts=root["ts"])["permalink"]
    assert root["ts"].replace(".", "") in link and f"/archives/{channel}/" in link
    for by_name in (
        lambda: client.conversations_replies(channel="#inventory-analytics", ts=root["ts"]),
        lambda: client.conversations_history(channel="#inventory-analytics"),
        lambda: client.chat_update(channel="#inventory-analytics", ts=root["ts"], text="x"),
    ):
        with pytest.raises(SlackApiError) as e:
            by_name()
        assert e.value.response["error"] == "channel_not_found"
    # The log a person reads names the channel.
    log = httpx.get(
        f"{slack_world.slack_url}/_sink/messages", params={"channel": "#inventory-analytics"}
    ).json()
    assert {(m["channel"], m["channel_id"]) for m in log["messages"]} == {("#inventory-analytics", channel)}


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
    stored = SlackSink(slack_world.root / "slack").messages("#buyers")
    assert [m["text"] for m in stored] == ["hold expedite orders"]


def test_outage_longer_than_retries_raises(slack_world: LocalWorld):
    httpx.post(f"{slack_world.slack_url}/_sink/faults", json={"status": 503, "count": 5})
    with pytest.raises(SlackApiError):
        _client(slack_world, retries=1).chat_postMessage(channel="#buyers", text="lost?")
    httpx.post(f"{slack_world.slack_url}/_sink/faults", json={"status": 503, "count": 0})
    assert "lost?" not in [m["text"] for m in SlackSink(slack_world.root / "slack").messages()]


def test_messages_survive_a_crash(slack_world: LocalWorld):
    _client(slack_world).chat_postMessage(channel="#planning-ops", text="durable")
    slack_world.restart("slack")
    log = httpx.get(f"{slack_world.slack_url}/_sink/messages", params={"channel": "#planning-ops"}).json()
    assert [m["text"] for m in log["messages"]] == ["durable"]


def _refused(client, **kwargs) -> dict:
    with pytest.raises(SlackApiError) as e:
        client.chat_postMessage(channel="#limits", **kwargs)
    return e.value.response.data


def _section(text: str, **more) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}, **more}


def _button(text: str = "Go", **more) -> dict:
    return {"type": "button", "text": {"type": "plain_text", "text": text}, "action_id": "go", **more}


def _actions(*elements: dict) -> dict:
    return {"type": "actions", "elements": list(elements)}


# Each of Slack's message limits (Block Kit reference, slack_sdk's validators, chat.postMessage's errors), with
# the [ERROR] line Slack answers.
REFUSED = [
    ({"blocks": [_section("x")] * 51}, "no more than 50 items allowed [json-pointer:/blocks]"),
    ({"blocks": [_section("x" * 3001)]}, "must be less than 3001 characters [json-pointer:/blocks/0/text/text]"),
    ({"blocks": [_section("")]}, "must be more than 0 characters [json-pointer:/blocks/0/text/text]"),
    ({"blocks": [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]}, "must be less than 151 characters [json-pointer:/blocks/0/text/text]"),
    ({"blocks": [{"type": "header", "text": {"type": "mrkdwn", "text": "*h*"}}]}, "must be a plain_text text object [json-pointer:/blocks/0/text/type]"),
    ({"blocks": [{"type": "section", "fields": [{"type": "mrkdwn", "text": "f"}] * 11}]}, "no more than 10 items allowed [json-pointer:/blocks/0/fields]"),
    ({"blocks": [{"type": "section", "fields": [{"type": "mrkdwn", "text": "f" * 2001}]}]}, "must be less than 2001 characters [json-pointer:/blocks/0/fields/0/text]"),
    ({"blocks": [{"type": "context", "elements": [{"type": "mrkdwn", "text": "c"}] * 11}]}, "no more than 10 items allowed [json-pointer:/blocks/0/elements]"),
    ({"blocks": [_actions(_button("b" * 76))]}, "must be less than 76 characters [json-pointer:/blocks/0/elements/0/text/text]"),
    ({"blocks": [_actions(_button(value="v" * 2001))]}, "must be less than 2001 characters [json-pointer:/blocks/0/elements/0/value]"),
    ({"blocks": [_actions(_button(url="http://x/" + "u" * 2992))]}, "must be less than 3001 characters [json-pointer:/blocks/0/elements/0/url]"),
    ({"blocks": [_actions(_button(), _button("Other"))]}, "duplicate action_id: go [json-pointer:/blocks/0/elements/1/action_id]"),
    ({"blocks": [_section("a", block_id="b1"), _section("b", block_id="b1")]}, "duplicate block_id: b1 [json-pointer:/blocks/1/block_id]"),
    ({"blocks": [_section("a", accessory=_button(confirm={"title": {"type": "plain_text", "text": "t" * 101}, "text": {"type": "mrkdwn", "text": "x"}, "confirm": {"type": "plain_text", "text": "y"}, "deny": {"type": "plain_text", "text": "n"}}))]}, "must be less than 101 characters [json-pointer:/blocks/0/accessory/confirm/title/text]"),
    ({"blocks": [{"type": "input", "label": {"type": "plain_text", "text": "l"}}]}, "unsupported type: input [json-pointer:/blocks/0/type]"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("message", "problem"), REFUSED, ids=lambda v: v[:40] if isinstance(v, str) else None
)
def test_a_message_over_slacks_limits_is_refused_as_slack_refuses_it(
    slack_world: LocalWorld, message, problem
):
    client = _client(slack_world)
    answer = _refused(client, text="fallback", **message)
    assert answer["error"] == "invalid_blocks"
    assert answer["response_metadata"]["messages"] == [f"[ERROR] {problem}"]
    assert not SlackSink(slack_world.root / "slack").messages("#limits"), "nothing refused is posted"


def test_text_too_long_and_malformed_blocks_are_refused(slack_world: LocalWorld):
    client = _client(slack_world)
    assert _refused(client, text="t" * 40_001)["error"] == "msg_too_long"
    assert _refused(client, text="x", blocks="[not json")["error"] == "invalid_blocks_format"
    assert _refused(client, text="x", metadata={"event_type": "has space", "event_payload": {}})["error"] == (
        "invalid_metadata_format"
    )
    # At the limits, posted.
    at_limits = (
        [_section("x" * 3000)]
        + [{"type": "divider"}] * 48
        + [_actions(*[_button(str(i), action_id=str(i)) for i in range(25)])]
    )
    assert client.chat_postMessage(channel="#limits", text="t" * 40_000, blocks=at_limits)["ok"]


def _posts(client, channel: str, n: int, thread_ts: str | None = None) -> list[str]:
    return [
        client.chat_postMessage(
            channel=channel, text=f"m{i}", thread_ts=thread_ts,
            metadata={"event_type": "dw_incident_message", "event_payload": {"message_key": f"k{i}"}},
        )["ts"]
        for i in range(n)
    ]  # fmt: skip


def test_history_and_replies_page_15_at_a_time_with_metadata_on_request(slack_world: LocalWorld):
    client = _client(slack_world)
    first = client.chat_postMessage(channel="#history", text="first")
    channel = first["channel"]
    roots = _posts(client, channel, 19)
    replies = _posts(client, channel, 17, thread_ts=roots[0])
    # Asked for 200, served 15 (the 2025 limit for apps outside the Marketplace), newest first, no replies.
    page = client.conversations_history(channel=channel, limit=200, include_all_metadata=True)
    assert [m["ts"] for m in page["messages"]] == roots[::-1][:15] and page["has_more"]
    assert page["messages"][0]["metadata"]["event_payload"] == {"message_key": "k18"}
    rest = client.conversations_history(
        channel=channel, limit=200, cursor=page["response_metadata"]["next_cursor"]
    )
    assert [m["ts"] for m in rest["messages"]] == [*roots[::-1][15:], first["ts"]]
    assert (
        len(rest["messages"]) == 5 and not rest["has_more"] and rest["response_metadata"]["next_cursor"] == ""
    )
    assert "metadata" not in rest["messages"][0], "metadata only with include_all_metadata"
    since = client.conversations_history(channel=channel, oldest=roots[16])["messages"]
    assert [m["ts"] for m in since] == [roots[18], roots[17]], "oldest is exclusive"
    # A thread: the parent first, then its replies oldest first, paged by cursor; any reply's ts finds it.
    seen, cursor = [], None
    while True:
        got = client.conversations_replies(
            channel=channel, ts=replies[5], limit=200, cursor=cursor, include_all_metadata=True
        )
        assert len(got["messages"]) <= 15
        seen += [m["ts"] for m in got["messages"]]
        cursor = got["response_metadata"]["next_cursor"]
        if not got["has_more"]:
            break
    assert seen == [roots[0], *replies]
    with pytest.raises(SlackApiError) as e:
        client.conversations_replies(channel=channel, ts="1.000001")
    assert e.value.response["error"] == "thread_not_found"
    with pytest.raises(SlackApiError) as e:
        client.conversations_history(channel=channel, cursor="made-up")
    assert e.value.response["error"] == "invalid_cursor"


def test_a_store_written_before_channel_ids_keeps_its_messages(tmp_path):
    """A world seeded before the stand-in gave channels ids stored each message under the channel's name."""
    folder = tmp_path / "slack"
    folder.mkdir()
    with sqlite3.connect(folder / "slack.sqlite") as db:
        db.executescript(
            "create table messages (seq integer primary key autoincrement, ts text not null unique,"
            " channel text not null, thread_ts text, text text, blocks text, metadata text, edited_at real,"
            " received_at real not null);"
            "insert into messages (ts, channel, text, received_at) values ('1.000001', '#buyers', 'hold', 0);"
            "create table interactions (id text primary key, message_ts text not null, user_id text not null,"
            " action_id text not null, body text not null, timestamp text not null, signature text not null,"
            " status integer, answer text, sent_at real not null);"
        )
    sink = SlackSink(folder)
    (msg,) = sink.messages("#buyers")
    assert (msg["channel"], msg["channel_id"], msg["text"]) == ("#buyers", channel_id_for("buyers"), "hold")
    assert sink.messages(channel_id_for("buyers")) == [msg]
