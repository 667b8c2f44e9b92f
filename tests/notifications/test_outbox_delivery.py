"""Delivery through the outbox over real sockets (local Snowflake + the Slack stand-in; nothing mocked):
once each across re-ticks and process restarts, replies in the thread, an outage delays and never loses,
a stop holds back the hold notice, the token never shows."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import httpx
import pytest
from reference_night import reference_blast, reference_diagnosis, reference_incident
from warehouse_statements import statements

from dw_dagster.app.outbox_sensor import build_slack_outbox_sensor
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import ContextFile, load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications import (
    IncidentNotifier,
    Recipients,
    SlackNotifier,
    route_incident,
)
from dw_dagster.notifications.delivery import Redactor
from dw_dagster.records.incidents import Incident
from dw_dagster.warehouse.migrations import migrate
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource
from dw_local.slack_server import HISTORY_LIMIT
from dw_local.world import DISTRIBUTOR_DIR, LOCAL_SLACK_TOKEN, LocalWorld

REPO = Path(__file__).resolve().parents[2]
DATABASE = "DW_NOTIFY_TEST"


@pytest.fixture(scope="module")
def context() -> ContextFile:
    return load_context_file(DISTRIBUTOR_DIR / "context.yaml")


# -- delivery over real sockets ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("notify"), services=("snowflake", "slack")) as lw:
        yield lw


def _warehouse(lw: LocalWorld) -> WarehouseResource:
    sf = lw.snowflake
    return WarehouseResource(
        account=sf.account, user=sf.user, **sf.sign_in(), database=DATABASE, network_timeout=20,
        additional_snowflake_connection_args={"host": sf.host, "port": sf.port, "protocol": sf.protocol},
    )  # fmt: skip


def _slack(lw: LocalWorld, retries: int = 1, token: str = LOCAL_SLACK_TOKEN) -> SlackNotifier:
    return SlackNotifier(token=token, base_url=f"{lw.slack_url}/api/", max_retries=retries)


def _notifier(lw: LocalWorld, schema: str, **kwargs) -> IncidentNotifier:
    slack = kwargs.pop("slack", None) or _slack(lw)
    store = IncidentStore(_warehouse(lw), OpsSchema(DATABASE, schema))
    migrate(store.warehouse, store.ops)
    return IncidentNotifier(slack, store, ui_url="http://localhost:3000", **kwargs)


def _posted(lw: LocalWorld, incident_id: str) -> list[dict]:
    """What the stand-in stored for this incident (every message carries its outbox key as metadata)."""
    msgs = httpx.get(f"{lw.slack_url}/_sink/messages").json()["messages"]
    return [m for m in msgs if _payload(m).get("incident_id") == incident_id]


def _payload(m: dict) -> dict:
    return (m.get("metadata") or {}).get("event_payload") or {}


def _kinds(msgs: list[dict]) -> list[tuple[str, str]]:
    return sorted((m["channel"], _payload(m)["message_key"].split("|")[2]) for m in msgs)


def _fault(lw: LocalWorld, count: int) -> None:
    httpx.post(f"{lw.slack_url}/_sink/faults", json={"status": 503, "count": count}).raise_for_status()


def _recipients(context: ContextFile, inc: Incident, hold: str | None = None) -> Recipients:
    """From the context file; the distributor's domain sends the hold notice at once unless ``hold``."""
    return route_incident(context, reference_diagnosis(inc.incident_id), reference_blast(), hold=hold)


NOTIFY_SCRIPT = """
import json, sys
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Incident
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications import IncidentNotifier, Recipients, SlackNotifier
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

a = json.load(open(sys.argv[1]))
wh = WarehouseResource(**a["warehouse"])
store = IncidentStore(wh, OpsSchema(a["database"], a["schema"]))
notifier = IncidentNotifier(SlackNotifier(**a["slack"]), store)
r = Recipients(**{k: tuple(v) if isinstance(v, list) else v for k, v in a["recipients"].items()})
rows = notifier.notify(Incident(**a["incident"]), Diagnosis(**a["diagnosis"]), BlastRadius(**a["blast"]), r)
print(json.dumps([m.status for m in rows]))
"""


def _notify_in_a_new_process(
    lw: LocalWorld, tmp_path: Path, schema: str, inc, diagnosis, blast, recipients
) -> list:
    sf = lw.snowflake
    args = {
        "warehouse": {
            "account": sf.account, "user": sf.user, **sf.sign_in(), "database": DATABASE,
            "network_timeout": 20,
            "additional_snowflake_connection_args": {
                "host": sf.host, "port": sf.port, "protocol": sf.protocol,
            },
        },
        "slack": {"token": LOCAL_SLACK_TOKEN, "base_url": f"{lw.slack_url}/api/", "max_retries": 1},
        "database": DATABASE, "schema": schema,
        "incident": inc.model_dump(mode="json"), "diagnosis": diagnosis.model_dump(mode="json"),
        "blast": blast.model_dump(mode="json"), "recipients": dataclasses.asdict(recipients),
    }  # fmt: skip
    path = tmp_path / "notify.json"
    path.write_text(json.dumps(args))
    out = subprocess.run(
        [sys.executable, "-c", NOTIFY_SCRIPT, str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_notify_posts_each_message_once_across_re_ticks_and_restarts(world, context, tmp_path):
    inc = reference_incident("INC-20250616-once01")
    diagnosis, blast = reference_diagnosis(inc.incident_id), reference_blast()
    recipients = _recipients(context, inc)
    notifier = _notifier(world, "NTF_ONCE")
    rows = notifier.notify(inc, diagnosis, blast, recipients)
    assert {m.status for m in rows} == {"sent"} and len(rows) == 3
    notifier.notify(inc, diagnosis, blast, recipients)  # a re-tick
    expected = [("#buyers", "hold"), ("#inventory-analytics", "incident"), ("#planning-ops", "incident")]
    assert _kinds(_posted(world, inc.incident_id)) == expected

    # Every process restarts: Slack, Snowflake, and the notifier itself (a new OS process).
    world.restart("slack")
    world.restart("snowflake")
    statuses = _notify_in_a_new_process(world, tmp_path, "NTF_ONCE", inc, diagnosis, blast, recipients)
    assert statuses == ["sent"] * 3
    posted = _posted(world, inc.incident_id)
    assert _kinds(posted) == expected
    # The first message's ts is the thread, recorded durably, and the posts are roots (no thread_ts).
    by_channel = {m.channel: m for m in _notifier(world, "NTF_ONCE").messages(inc.incident_id)}
    assert {m["channel"]: m["ts"] for m in posted} == {c: m.slack_ts for c, m in by_channel.items()}
    assert all(m["thread_ts"] is None for m in posted)
    incident_root = next(m for m in posted if m["channel"] == "#inventory-analytics")
    assert incident_root["text"].startswith(f"ERROR {inc.incident_id}") and incident_root["blocks"]
    events = notifier.store.events(inc.incident_id, kind="slack_message")
    assert sorted(e.detail["channel"] for e in events) == ["#buyers", "#inventory-analytics", "#planning-ops"]


def test_updates_refinements_and_resolution_are_replies_in_each_thread(world, context):
    inc = reference_incident("INC-20250616-thrd01")
    diagnosis, blast = reference_diagnosis(inc.incident_id), reference_blast()
    notifier = _notifier(world, "NTF_THREAD")
    # L2: the hold notice is proposed to the owners, as a reply under the incident message.
    notifier.notify(inc, diagnosis, blast, _recipients(context, inc, hold="propose"))
    refined = diagnosis.model_copy(update={"cause": diagnosis.cause + " Confirmed on the staging node."})
    notifier.notify(inc, refined, blast, _recipients(context, inc, hold="propose"))
    notifier.notify(inc, refined, blast, _recipients(context, inc, hold="propose"))  # re-tick: nothing new
    assert "#buyers" not in {m["channel"] for m in _posted(world, inc.incident_id)}  # proposed, not sent
    # The domain now allows acting: the buyers get the notice; the owners' threads get nothing new.
    notifier.notify(inc, refined, blast, _recipients(context, inc))
    reviewing = "Owners are reviewing the proposal (map row 7120 -> DC7, South)."
    custom = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Reviewing* the proposal"}}]
    notifier.post_update(inc, reviewing, blocks=custom)
    notifier.post_update(inc, reviewing, blocks=custom)  # duplicate
    notifier.post_resolution(inc, "Network on-hand is back in line with EBS; reorder list back to 31 rows.",
                             verification={"reorder_rows": 31, "onhand_gap_units": 0})  # fmt: skip

    posted = _posted(world, inc.incident_id)
    buyers = [m for m in posted if m["channel"] == "#buyers"]
    assert [(_payload(m)["message_key"].split("|")[2], m["thread_ts"]) for m in buyers] == [
        ("hold", None), ("resolved", buyers[0]["ts"]),
    ]  # fmt: skip
    for channel in ("#inventory-analytics", "#planning-ops"):
        thread = [m for m in posted if m["channel"] == channel]
        root, replies = thread[0], thread[1:]
        assert root["thread_ts"] is None and _payload(root)["message_key"].split("|")[2] == "incident"
        assert [m["thread_ts"] for m in replies] == [root["ts"]] * 4
        kinds = [_payload(m)["message_key"].split("|")[2] for m in replies]
        assert kinds == ["hold_proposed", "incident", "update", "resolved"]
        assert replies[1]["blocks"][0]["text"]["text"].startswith(
            ":arrows_counterclockwise: Diagnosis refined"
        )
        assert replies[2]["text"] == reviewing
        assert replies[2]["blocks"][0]["text"]["text"] == "*Reviewing* the proposal"
        assert "Resolved" in replies[3]["text"]
        # The stand-in's thread view agrees.
        client = _slack(world).get_client()
        assert len(client.conversations_replies(channel=root["channel_id"], ts=root["ts"])["messages"]) == 5


def test_an_outage_delays_and_never_loses(world, context, caplog):
    inc = reference_incident("INC-20250616-outg01")
    diagnosis, blast = reference_diagnosis(inc.incident_id), reference_blast()
    notifier = _notifier(world, "NTF_OUTAGE")  # client retries once: 2 requests per post
    _fault(world, 2)
    with caplog.at_level(logging.WARNING):
        rows = notifier.notify(inc, diagnosis, blast, _recipients(context, inc))
    _fault(world, 0)
    assert [m.status for m in rows] == ["pending"] * 3
    first = rows[0]
    assert first.channel == "#inventory-analytics"  # the owners' message goes first
    assert first.attempts == 1 and first.last_outcome == "failed"
    assert "HTTP 503: service_unavailable" in (first.last_error or "")
    assert first.next_attempt_at is not None and first.next_attempt_at > datetime.now(UTC)
    # The flush stopped at the outage: the other messages were not even tried.
    assert [m.attempts for m in rows[1:]] == [0, 0]
    assert not _posted(world, inc.incident_id)
    attempts = notifier.store.events(inc.incident_id, kind="slack_attempt")
    assert [(e.detail["attempt"], e.detail["outcome"]) for e in attempts] == [(1, "failed")]
    assert "pending" in caplog.text

    # The outage is over: the next post delivers what was never tried, each root before its reply; the
    # failed root backs off, and the update in its thread waits for it (order within a thread holds).
    notifier.post_update(inc, "Still investigating.")
    posted = _posted(world, inc.incident_id)
    assert sorted((m["channel"], m["thread_ts"] is None) for m in posted) == [
        ("#buyers", True),
        ("#planning-ops", False),
        ("#planning-ops", True),
    ]  # fmt: skip  (updates go to the owners' threads; the buyers' thread gets the resolution)

    # A restarted notifier (sensor tick) before the backoff ends does nothing; after it, it delivers.
    later = _notifier(world, "NTF_OUTAGE")
    assert later.flush_pending().sent == []
    after_backoff = _notifier(world, "NTF_OUTAGE", clock=lambda: datetime.now(UTC) + timedelta(hours=1))
    result = after_backoff.flush_pending()
    assert len(result.sent) == 2 and not result.failed
    assert after_backoff.flush_pending().sent == []
    posted = _posted(world, inc.incident_id)
    assert len(posted) == 5 and len({_payload(m)["message_key"] for m in posted}) == 5
    root = next(m for m in posted if m["channel"] == "#inventory-analytics" and m["thread_ts"] is None)
    update = [m for m in posted if m["channel"] == "#inventory-analytics" and m["thread_ts"] == root["ts"]]
    assert len(update) == 1 and "Still investigating." in update[0]["text"]
    assert posted.index(root) < posted.index(update[0])
    done = {m.message_key: m for m in later.messages(inc.incident_id)}
    assert all(m.status == "sent" and m.slack_ts for m in done.values())
    assert done[rows[0].message_key].attempts == 2
    outcomes = [
        (e.detail["attempt"], e.detail["outcome"])
        for e in later.store.events(inc.incident_id, "slack_attempt")
        if e.detail["message_key"] == rows[0].message_key
    ]
    assert outcomes == [(1, "failed"), (2, "sent")]


def test_the_outbox_sensor_delivers_pending_messages(world, context):
    inc = reference_incident("INC-20250616-snsr01")
    notifier = _notifier(world, "NTF_SENSOR", backoff_seconds=(0, 0))
    _fault(world, 2)
    notifier.notify(inc, reference_diagnosis(inc.incident_id), reference_blast(), _recipients(context, inc))
    _fault(world, 0)
    assert not _posted(world, inc.incident_id)
    sensor = build_slack_outbox_sensor(OpsSchema(DATABASE, "NTF_SENSOR"))
    resources = {"slack": _slack(world), "snowflake": _warehouse(world)}
    with (
        dg.instance_for_test() as instance,
        dg.build_sensor_context(instance=instance, resources=resources) as ctx,
    ):
        skip = sensor(ctx)
    assert "sent 3" in skip.skip_message
    assert len(_posted(world, inc.incident_id)) == 3


def test_a_stop_holds_back_the_hold_notice_and_nothing_else(world, context):
    inc = reference_incident("INC-20250616-stop01")
    stopped = {"on": True}
    notifier = _notifier(world, "NTF_STOP", autonomous_dispatch_allowed=lambda: not stopped["on"])
    diagnosis, blast = reference_diagnosis(inc.incident_id), reference_blast()
    rows = notifier.notify(inc, diagnosis, blast, _recipients(context, inc))
    assert {m.kind: m.status for m in rows} == {"incident": "sent", "hold": "pending"}
    assert next(m for m in rows if m.kind == "hold").attempts == 0
    owners_only = [("#inventory-analytics", "incident"), ("#planning-ops", "incident")]
    assert _kinds(_posted(world, inc.incident_id)) == owners_only
    stopped["on"] = False
    assert len(notifier.flush_pending().sent) == 1
    assert ("#buyers", "hold") in _kinds(_posted(world, inc.incident_id))


def test_concurrent_flushes_post_once(world, context):
    inc = reference_incident("INC-20250616-race01")
    seed = _notifier(world, "NTF_RACE")
    _fault(world, 2)
    seed.notify(inc, reference_diagnosis(inc.incident_id), reference_blast(), _recipients(context, inc))
    _fault(world, 0)
    seed.post_update(inc, "An update racing its root.")
    flushers = [_notifier(world, "NTF_RACE") for _ in range(8)]
    results = []
    start = threading.Barrier(len(flushers))

    def flush(notifier: IncidentNotifier) -> None:
        start.wait()
        results.append(notifier.flush_pending(force=True))

    threads = [threading.Thread(target=flush, args=(n,)) for n in flushers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Claims collide in the warehouse (the local one refuses concurrent updates of a row as conflicts):
    # each collision is tried again or left waiting, and no flusher dies of one.
    assert len(results) == len(flushers)
    # Whatever a losing flusher left waiting, one more pass finishes; nothing is posted twice.
    seed.flush_pending(force=True)
    posted = _posted(world, inc.incident_id)
    keys = [_payload(m)["message_key"] for m in posted]
    assert len(keys) == len(set(keys)) == 5  # 3 roots + the update in the 2 owner threads
    assert all(m.status == "sent" for m in seed.messages(inc.incident_id))


def test_a_post_whose_answer_was_lost_is_not_posted_again(world, context):
    """A crash after Slack accepted a reply but before its ts was recorded: the next flush finds it."""
    inc = reference_incident("INC-20250616-lost01")
    notifier = _notifier(world, "NTF_LOST")
    notifier.notify(
        inc, reference_diagnosis(inc.incident_id), reference_blast(), _recipients(context, inc, "none")
    )
    outbox = notifier.outbox
    # Enqueue an update without flushing, claim it and post it as a crashing process would.
    with outbox.connect("test") as cur:
        key, _ = outbox.enqueue(cur, inc.incident_id, "#planning-ops", "update", "v1",
                                {"text": "posted, then the process died"}, datetime.now(UTC))  # fmt: skip
        msg = outbox.get(cur, key)
        assert outbox.claim(cur, msg, "crashed-process", datetime.now(UTC) - timedelta(hours=1))
        root = outbox.get(cur, msg.root_key)
    notifier.client.chat_postMessage(
        channel=root.slack_channel_id, thread_ts=root.slack_ts, text="posted, then the process died",
        metadata={"event_type": "dw_incident_message",
                  "event_payload": {"message_key": key, "incident_id": inc.incident_id}},
    )  # fmt: skip
    result = _notifier(world, "NTF_LOST", lease_seconds=60).flush_pending()
    assert result.reconciled == [key] and result.sent == []
    assert [m["text"] for m in _posted(world, inc.incident_id)].count("posted, then the process died") == 1
    assert notifier.messages(inc.incident_id)[-1].status == "sent"


def test_a_lost_root_post_behind_more_than_a_page_of_newer_messages_is_found_not_posted_again(world, context):
    """A crash after Slack accepted a thread's root but before its ts was recorded, and the channel moved on:
    Slack (and the stand-in) serve conversations.history 15 messages a call, so the post is found by cursor
    on a later page, and recorded, not posted twice."""
    notifier = _notifier(world, "NTF_LOSTROOT")
    # An earlier incident's posts make the channel's id known: the root is looked for in its history.
    earlier = reference_incident("INC-20250616-lostr1")
    notifier.notify(
        earlier, reference_diagnosis(earlier.incident_id), reference_blast(),
        _recipients(context, earlier, "none"),
    )  # fmt: skip
    inc = reference_incident("INC-20250616-lostr2")
    outbox = notifier.outbox
    text = "a root posted, then the process died"
    with outbox.connect("test") as cur:
        key, _ = outbox.enqueue(
            cur, inc.incident_id, "#planning-ops", "alert", "v1", {"text": text}, datetime.now(UTC)
        )
        msg = outbox.get(cur, key)
        assert msg.is_root
        assert outbox.claim(cur, msg, "crashed-process", datetime.now(UTC) - timedelta(minutes=2))
        channel_id = outbox.known_channel_id(cur, "#planning-ops")
    notifier.client.chat_postMessage(
        channel=channel_id, text=text,
        metadata={"event_type": "dw_incident_message",
                  "event_payload": {"message_key": key, "incident_id": inc.incident_id}},
    )  # fmt: skip
    # More than a page of newer messages in the channel: the lost root is past the first 15.
    for i in range(HISTORY_LIMIT + 5):
        notifier.client.chat_postMessage(channel=channel_id, text=f"a later message {i}")
    first_page = notifier.client.conversations_history(
        channel=channel_id, include_all_metadata=True, limit=200
    )
    assert first_page["has_more"] and key not in json.dumps(first_page["messages"])
    result = _notifier(world, "NTF_LOSTROOT", lease_seconds=60).flush_pending()
    assert result.reconciled == [key] and result.sent == []
    assert [m["text"] for m in _posted(world, inc.incident_id)].count(text) == 1
    (recorded,) = notifier.messages(inc.incident_id)
    assert recorded.status == "sent" and recorded.slack_channel_id == channel_id


def test_the_token_never_appears_in_logs_errors_or_records(world, context, caplog, monkeypatch):
    secret = "xoxb-1234567890-secret-token-abcdef"
    monkeypatch.setenv("SLACK_BOT_TOKEN", secret)
    inc = reference_incident("INC-20250616-tokn01")
    # As production configures it: the token is an EnvVar, resolved only when used.
    base_url = f"{world.slack_url}/api/"
    slack = SlackNotifier(token=dg.EnvVar("SLACK_BOT_TOKEN"), base_url=base_url, max_retries=1)
    ephemeral, opened = dg.DagsterInstance.ephemeral, []
    monkeypatch.setattr(
        dg.DagsterInstance, "ephemeral", lambda *a, **k: opened.append(1) or ephemeral(*a, **k)
    )
    notifier = _notifier(world, "NTF_TOKEN", slack=slack, backoff_seconds=(0, 0))
    assert notifier.slack.token == secret  # resolved from the environment, not the variable's name
    # Resolved without Dagster's resource initialization, whose ephemeral instance nothing disposes.
    assert opened == []
    recipients = _recipients(context, inc)
    with caplog.at_level(logging.DEBUG):  # slack_sdk logs every request at DEBUG
        _fault(world, 2)
        notifier.notify(inc, reference_diagnosis(inc.incident_id), reference_blast(), recipients)
        _fault(world, 0)
        notifier.flush_pending()
        # A channel Slack refuses: its error is recorded, the token is not.
        notifier.post_update(inc, "to nowhere", channels=[""])
    assert len(_posted(world, inc.incident_id)) == 3
    records = notifier.messages(inc.incident_id)
    assert any(m.last_error and "channel_not_found" in m.last_error for m in records)
    stored = json.dumps([m.model_dump(mode="json") for m in records]) + json.dumps(
        [e.detail for e in notifier.store.events(inc.incident_id)]
    )
    assert "slack_sdk" in caplog.text or "api/chat.postMessage" in caplog.text
    assert secret not in caplog.text and secret not in stored
    redact = Redactor(secret)
    assert secret not in redact(f"error talking to Slack with Bearer {secret} and xoxp-99-other")


def test_a_token_variable_not_set_is_named(world, monkeypatch):
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    slack = SlackNotifier(token=dg.EnvVar("SLACK_BOT_TOKEN"), base_url=f"{world.slack_url}/api/")
    with pytest.raises(DwConfigError, match="SLACK_BOT_TOKEN: not set"):
        _notifier(world, "NTF_UNSET", slack=slack)


# -- the outbox sensor when nothing happens ------------------------------------------------------------


def _tick(sensor, instance, resources, cursor):
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as ctx:
        skip = sensor(ctx)
        return skip.skip_message, ctx.cursor


def _enqueue_in_a_run(instance, notifier, inc, context):
    """As the diagnosis does: a run leaves the incident's messages in the outbox."""

    @dg.op
    def alert():
        notifier.notify(
            inc, reference_diagnosis(inc.incident_id), reference_blast(), _recipients(context, inc)
        )

    @dg.job
    def diagnose():
        alert()

    assert diagnose.execute_in_process(instance=instance).success


def test_an_idle_outbox_tick_sends_nothing_to_snowflake(world, context):
    _notifier(world, "NTF_IDLE")  # the schema, migrated
    sensor = build_slack_outbox_sensor(OpsSchema(DATABASE, "NTF_IDLE"))
    resources = {"slack": _slack(world), "snowflake": _warehouse(world)}
    with dg.instance_for_test() as instance:
        with statements() as first:
            message, cursor = _tick(sensor, instance, resources, None)
        assert first and "first look" in message, "a sensor without a cursor looks once"
        with statements() as idle:
            for _ in range(5):
                message, cursor = _tick(sensor, instance, resources, cursor)
        assert idle == [], "an idle tick reads Dagster's storage only"
        assert "the warehouse was not read" in message


def test_a_message_left_pending_by_a_slack_outage_is_delivered_later(world, context):
    inc = reference_incident("INC-20250616-idle02")
    notifier = _notifier(world, "NTF_LATER", backoff_seconds=(0, 0))
    now = {"at": datetime.now(UTC) + timedelta(seconds=5)}
    sensor = build_slack_outbox_sensor(OpsSchema(DATABASE, "NTF_LATER"), clock=lambda: now["at"])
    resources = {"slack": _slack(world), "snowflake": _warehouse(world)}
    with dg.instance_for_test() as instance:
        _, cursor = _tick(sensor, instance, resources, None)
        _fault(world, 1000)  # Slack is down from the run to the sensor's first tick after it
        try:
            _enqueue_in_a_run(instance, notifier, inc, context)
            assert notifier.pending(inc.incident_id), "the outage left the alert pending"
            message, cursor = _tick(sensor, instance, resources, cursor)
            assert "storage changed" in message and "sent 0" in message
        finally:
            _fault(world, 0)
        assert not _posted(world, inc.incident_id)
        ticks = []
        while len(_posted(world, inc.incident_id)) < 3 and len(ticks) < 5:
            now["at"] += timedelta(seconds=31)  # past the outbox's first backoff (30 s)
            with statements() as sent:
                message, cursor = _tick(sensor, instance, resources, cursor)
            ticks.append(message)
            assert sent and "due at" in message, "a message still pending keeps the sensor due"
        assert len(_posted(world, inc.incident_id)) == 3, ticks
        with statements() as idle:
            message, _ = _tick(sensor, instance, resources, cursor)
        assert idle == [] and "not read" in message, "delivered: the sensor is idle again"
