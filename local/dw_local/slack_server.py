"""Slack stand-in: answers what slack_sdk's WebClient sends as Slack does, refuses what Slack refuses, and
keeps every message durably.

Serves ``/api/<method>`` for the Web API methods the product uses: ``chat.postMessage`` and what threads
and reconciling a lost answer need (``chat.update``, ``conversations.history``, ``conversations.replies``,
``chat.getPermalink``, ``auth.test``), answering with Slack's shapes (``{"ok": true, "ts": ...}`` or
``{"ok": false, "error": ...}``). Each rule the product could rely on names its source in a comment; every
message posted or updated is held to Slack's message limits (``slack_limits``). Messages live in SQLite
under ``--data-dir`` so they survive restarts. ``/_sink/...`` is for the local world itself: the message
log and fault injection (a Slack outage), never used by product code.

Interactivity, as Slack does it: ``/_sink/app`` holds the app's settings (its Request URL and signing
secret); ``/_sink/click`` plays a person's click on a message's button: the ``block_actions`` payload
Slack would send, form-encoded and signed (``X-Slack-Signature`` = ``v0=`` + HMAC-SHA256(secret,
``v0:{timestamp}:{body}``)), posted to the Request URL, for link buttons too. The click fails, as the
person sees it in Slack, unless the app answers 200 within 3 seconds. The app answers the clicker through
the payload's ``response_url`` (``/_sink/respond/<id>``); every request sent is kept (``/_sink/interactions``).

Run as ``python -m dw_local.slack_server --port 8766 --data-dir .dw/local/slack``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import re
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dw_local.slack_limits import Refusal, check_message, parse_blocks, parse_metadata

SCHEMA = """
create table if not exists messages (
    seq integer primary key autoincrement,
    ts text not null unique,
    channel text not null,
    thread_ts text,
    text text,
    blocks text,
    metadata text,
    edited_at real,
    received_at real not null
);
create table if not exists channels (id text primary key, name text not null unique);
create table if not exists app_settings (name text primary key, value text not null);
create table if not exists interactions (
    id text primary key,
    message_ts text not null,
    user_id text not null,
    action_id text not null,
    body text not null,
    timestamp text not null,
    signature text not null,
    status integer,
    answer text,
    sent_at real not null
);
create table if not exists responses (
    seq integer primary key autoincrement,
    interaction_id text not null,
    payload text not null,
    received_at real not null
)
"""
# Columns added since the first stores were written (a world seeded before keeps its messages).
INTERACTION_COLUMNS = {"elapsed_ms": "real", "acknowledged": "integer", "user_sees": "text"}
TEAM_ID = "T0LOCAL01"
APP_ID = "A0LOCAL01"
BOT_ID = "B0LOCAL01"
BOT_USER_ID = "U0LOCALBOT"
# "Your app must respond to the request within 3 seconds ... Otherwise, the user will see the timeout
# error" (https://docs.slack.dev/interactivity/handling-user-interaction, "Acknowledgment response"; Slack's
# Bolt docs: "you only have 3 seconds to respond before Slack registers a timeout error"). Anything but an
# HTTP 200 within that time shows the person an error mark on the button.
ACK_SECONDS = 3.0
# A response_url takes "up to five times within 30 minutes" (handling-user-interaction, "Message responses").
RESPONSE_URL_USES, RESPONSE_URL_SECONDS = 5, 30 * 60
# Since 2025-05-29, apps not approved for the Slack Marketplace get at most 15 messages per call of
# conversations.history and conversations.replies, also their default ("The maximum and default for the
# limit parameter has been reduced to 15 objects":
# https://docs.slack.dev/changelog/2025/05/29/rate-limit-changes-for-non-marketplace-apps). A larger
# ``limit`` is served as 15, with ``has_more`` and a ``next_cursor``, as Slack does.
HISTORY_LIMIT = 15
# Conversation ids: C (public channel), G (private), D (direct message), then upper-case letters and digits.
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{8,}$")
# Channel names: lower case letters, digits, hyphens and underscores, at most 80 characters
# (https://slack.com/help/articles/201402297-Create-a-channel).
CHANNEL_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,79}$")


class SlackError(Exception):
    """A Web API call Slack refuses: its error name, answered with HTTP 200 as Slack does."""

    def __init__(self, error: str, **detail: Any):
        super().__init__(error)
        self.error, self.detail = error, detail


def channel_id_for(name: str) -> str:
    """The conversation id the stand-in gives a channel name: fixed per name, shaped as Slack's."""
    digest = base64.b32encode(hashlib.sha256(name.encode()).digest()).decode()
    return "C" + digest[:10]


class SlackSink:
    """The message store, the channels and the outage switch, shared by the routes."""

    def __init__(self, data_dir: Path):
        data_dir.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(data_dir / "slack.sqlite", check_same_thread=False)
        # A stand-in's commits need not wait for the disk: they outlive a killed server all the same.
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.executescript(SCHEMA)
        self._migrate()
        self._db.commit()
        self._lock = threading.Lock()
        self._faults: dict[str, Any] = {"count": 0, "status": 503}

    def _migrate(self) -> None:
        have = {r[1] for r in self._db.execute("pragma table_info(interactions)")}
        for column, kind in INTERACTION_COLUMNS.items():
            if column not in have:
                self._db.execute(f"alter table interactions add column {column} {kind}")
        # Stores written before channels had ids kept the name each message was posted to.
        names = self._db.execute(
            "select distinct channel from messages where channel not in (select id from channels)"
        ).fetchall()
        for (name,) in names:
            channel = self._channel(name.lstrip("#"))
            self._db.execute("update messages set channel = ? where channel = ?", (channel, name))

    # -- channels ----------------------------------------------------------------------------------

    def _channel(self, name: str) -> str:
        row = self._db.execute("select id from channels where name = ?", (name,)).fetchone()
        if row:
            return row[0]
        cid = channel_id_for(name)
        self._db.execute("insert into channels (id, name) values (?, ?)", (cid, name))
        return cid

    def channel_for_post(self, channel: str) -> str:
        """chat.postMessage takes "an encoded ID or channel name" (its ``channel`` argument,
        https://docs.slack.dev/reference/methods/chat.postMessage): a known id, or a channel's name (with or
        without ``#``; the stand-in makes the channel on its first message). Anything else is
        ``channel_not_found``."""
        if self.channel_name(channel) is not None:
            return channel
        name = channel.removeprefix("#")
        if CHANNEL_ID.match(channel) or not CHANNEL_NAME.match(name):
            raise SlackError("channel_not_found")
        with self._lock:
            cid = self._channel(name)
            self._db.commit()
        return cid

    def channel_by_id(self, channel: str | None) -> str:
        """Every other method takes the conversation's id ("Conversation ID", e.g. ``C1234567890``, in
        conversations.history, conversations.replies, chat.update and chat.getPermalink): a name is
        ``channel_not_found``."""
        if not channel or self.channel_name(channel) is None:
            raise SlackError("channel_not_found")
        return channel

    def channel_name(self, channel_id: str) -> str | None:
        row = self._db.execute("select name from channels where id = ?", (channel_id,)).fetchone()
        return row[0] if row else None

    def resolve(self, channel: str) -> str | None:
        """A channel's id from its id, its name or ``#name`` (the log's filter); ``None`` if unknown."""
        if self.channel_name(channel) is not None:
            return channel
        row = self._db.execute("select id from channels where name = ?", (channel.lstrip("#"),)).fetchone()
        return row[0] if row else None

    # -- messages ----------------------------------------------------------------------------------

    def _next_ts(self) -> str:
        # Slack ts values are unique per channel and increase; microseconds keep them unique here.
        last = self._db.execute("select max(ts) from messages").fetchone()[0]
        now = f"{time.time():.6f}"
        if last is not None and now <= last:
            secs, micros = last.split(".")
            now = f"{secs}.{int(micros) + 1:06d}"
        return now

    def post(
        self, channel_id: str, text: str | None, blocks: list | None, metadata: dict | None,
        thread_ts: str | None,
    ) -> str:  # fmt: skip
        with self._lock:
            ts = self._next_ts()
            self._db.execute(
                "insert into messages (ts, channel, thread_ts, text, blocks, metadata, received_at)"
                " values (?, ?, ?, ?, ?, ?, ?)",
                (ts, channel_id, thread_ts, text, _as_json(blocks), _as_json(metadata), time.time()),
            )
            self._db.commit()
        return ts

    def update(self, channel_id: str, ts: str, text: str | None, blocks: list | None) -> bool:
        with self._lock:
            cur = self._db.execute(
                "update messages set text = coalesce(?, text), blocks = coalesce(?, blocks), edited_at = ?"
                " where ts = ? and channel = ?",
                (text, _as_json(blocks), time.time(), ts, channel_id),
            )
            self._db.commit()
        return cur.rowcount > 0

    def get(self, ts: str) -> dict[str, Any] | None:
        rows = self._rows("ts = ?", (ts,))
        return rows[0] if rows else None

    def _rows(
        self, where: str = "1 = 1", args: tuple[Any, ...] = (), order: str = "seq"
    ) -> list[dict[str, Any]]:
        cur = self._db.execute(
            "select m.ts, c.name, m.channel, m.thread_ts, m.text, m.blocks, m.metadata, m.edited_at,"
            " m.received_at from messages m left join channels c on c.id = m.channel"
            f" where {where} order by {order}",
            args,
        )
        out = []
        for ts, name, cid, thread_ts, text, blocks, metadata, edited_at, received_at in cur.fetchall():
            out.append({
                "ts": ts, "channel": f"#{name}" if name else cid, "channel_id": cid, "thread_ts": thread_ts,
                "text": text, "blocks": json.loads(blocks) if blocks else None,
                "metadata": json.loads(metadata) if metadata else None, "edited_at": edited_at,
                "received_at": received_at,
            })  # fmt: skip
        return out

    def messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        """The log, in arrival order; ``channel`` by id, name or ``#name`` (an unknown one has none)."""
        if channel is None:
            return self._rows()
        cid = self.resolve(channel)
        return self._rows("m.channel = ?", (cid,)) if cid else []

    def slack_message(self, row: dict[str, Any], include_metadata: bool) -> dict[str, Any]:
        """A stored message as Slack's Web API returns it (the message object of
        https://docs.slack.dev/reference/objects/message-object): a bot's message, its thread fields, and
        its metadata only when asked for (``include_all_metadata``)."""
        msg: dict[str, Any] = {
            "type": "message", "text": row["text"] or "", "user": BOT_USER_ID, "bot_id": BOT_ID,
            "app_id": APP_ID, "team": TEAM_ID, "ts": row["ts"],
        }  # fmt: skip
        if row["blocks"]:
            msg["blocks"] = row["blocks"]
        if row["thread_ts"]:
            msg["thread_ts"] = row["thread_ts"]
            msg["parent_user_id"] = BOT_USER_ID
        else:
            replies = self._db.execute(
                "select count(*), max(ts) from messages where channel = ? and thread_ts = ?",
                (row["channel_id"], row["ts"]),
            ).fetchone()
            if replies[0]:
                msg.update(thread_ts=row["ts"], reply_count=replies[0], latest_reply=replies[1])
        if row["edited_at"]:
            msg["edited"] = {"user": BOT_USER_ID, "ts": f"{row['edited_at']:.6f}"}
        if include_metadata and row["metadata"]:
            msg["metadata"] = row["metadata"]
        return msg

    def history(self, channel_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """conversations.history (https://docs.slack.dev/reference/methods/conversations.history): the
        channel's own messages (not thread replies), newest first, between ``oldest`` and ``latest``
        (exclusive unless ``inclusive``), at most ``HISTORY_LIMIT`` a page, then by ``cursor``."""
        where, args = "m.channel = ? and m.thread_ts is null", [channel_id]
        where, args = _time_window(where, args, params)
        before = _cursor(params.get("cursor"))
        if before is not None:
            where, args = where + " and m.ts < ?", [*args, before]
        return self._page(where, args, "m.ts desc", params)

    def replies(self, channel_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """conversations.replies (https://docs.slack.dev/reference/methods/conversations.replies): a
        thread, its parent first, oldest first, at most ``HISTORY_LIMIT`` a page; ``ts`` names the parent or
        any message of the thread. ``thread_not_found`` when there is no such message in the channel."""
        ts = str(params.get("ts") or "")
        found = self._rows("m.channel = ? and m.ts = ?", (channel_id, ts))
        if not found:
            raise SlackError("thread_not_found")
        parent = found[0]["thread_ts"] or ts
        where, args = "m.channel = ? and (m.ts = ? or m.thread_ts = ?)", [channel_id, parent, parent]
        where, args = _time_window(where, args, params)
        after = _cursor(params.get("cursor"))
        if after is not None:
            where, args = where + " and m.ts > ?", [*args, after]
        return self._page(where, args, "m.ts asc", params)

    def _page(self, where: str, args: list[Any], order: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            asked = int(params.get("limit") or HISTORY_LIMIT)
        except (TypeError, ValueError):
            raise SlackError("invalid_limit") from None
        limit = min(max(asked, 1), HISTORY_LIMIT)
        rows = self._rows(where, tuple(args), order=f"{order} limit {limit + 1}")
        more = len(rows) > limit
        rows = rows[:limit]
        metadata = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        out: dict[str, Any] = {
            "ok": True, "messages": [self.slack_message(r, metadata) for r in rows], "has_more": more,
        }  # fmt: skip
        out["response_metadata"] = {"next_cursor": _encode_cursor(rows[-1]["ts"]) if more else ""}
        return out

    # -- interactivity -----------------------------------------------------------------------------

    def set_app(self, request_url: str, signing_secret: str) -> None:
        with self._lock:
            for name, value in (("request_url", request_url), ("signing_secret", signing_secret)):
                self._db.execute(
                    "insert or replace into app_settings (name, value) values (?, ?)", (name, value)
                )
            self._db.commit()

    def app(self) -> dict[str, str]:
        return dict(self._db.execute("select name, value from app_settings").fetchall())

    def record_interaction(self, row: dict[str, Any]) -> None:
        with self._lock:
            cols = ", ".join(row)
            self._db.execute(f"insert or replace into interactions ({cols}) values ({', '.join('?' * len(row))})",
                             tuple(row.values()))  # fmt: skip
            self._db.commit()

    def interactions(self) -> list[dict[str, Any]]:
        cur = self._db.execute("select * from interactions order by sent_at")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def interaction(self, interaction_id: str) -> dict[str, Any] | None:
        return next((i for i in self.interactions() if i["id"] == interaction_id), None)

    def add_response(self, interaction_id: str, payload: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute("insert into responses (interaction_id, payload, received_at) values (?, ?, ?)",
                             (interaction_id, json.dumps(payload), time.time()))  # fmt: skip
            self._db.commit()

    def responses(self, interaction_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "select payload from responses where interaction_id = ? order by seq", (interaction_id,)
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def set_fault(self, status: int, count: int) -> None:
        with self._lock:
            self._faults = {"status": status, "count": count}

    def take_fault(self) -> int | None:
        with self._lock:
            if self._faults["count"] <= 0:
                return None
            self._faults["count"] -= 1
            return self._faults["status"]


def _as_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _time_window(where: str, args: list[Any], params: dict[str, Any]) -> tuple[str, list[Any]]:
    inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")
    for name, op in (("oldest", ">"), ("latest", "<")):
        value = params.get(name)
        if value not in (None, ""):
            try:
                bound = f"{float(value):.6f}"
            except (TypeError, ValueError):
                raise SlackError("invalid_ts_" + name) from None
            where += f" and m.ts {op}{'=' if inclusive else ''} ?"
            args = [*args, bound]
    return where, args


# Slack's cursors are opaque base64 strings (e.g. "bmV4dF90czoxNTEyMDg1ODYxMDAwNTQz", "next_ts:..."):
# a client passes back what it was given, never one it made.
def _encode_cursor(ts: str) -> str:
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def _cursor(raw: Any) -> str | None:
    if not raw:
        return None
    try:
        kind, _, ts = base64.b64decode(str(raw), validate=True).decode().partition(":")
        float(ts)
    except (ValueError, UnicodeDecodeError):
        raise SlackError("invalid_cursor") from None
    if kind != "next_ts":
        raise SlackError("invalid_cursor")
    return ts


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if request.headers.get("content-type", "").startswith("application/json"):
        return json.loads(raw or b"{}")
    return dict(parse_qsl(raw.decode()))


def build_app(sink: SlackSink) -> Starlette:
    def error(name: str, status: int = 200, **detail: Any) -> JSONResponse:
        return JSONResponse({"ok": False, "error": name, **detail}, status_code=status)

    def call(method: str, params: dict[str, Any], host: str) -> dict[str, Any]:
        if method == "auth.test":
            return {"ok": True, "url": "http://localhost/", "team": "local", "user": "dw-dagster",
                    "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID}  # fmt: skip
        if method == "chat.postMessage":
            channel = sink.channel_for_post(str(params.get("channel") or ""))
            blocks = parse_blocks(params.get("blocks"))
            text = params.get("text")
            if not text and not blocks:
                raise SlackError("no_text")
            check_message(text, blocks)
            metadata = parse_metadata(params.get("metadata"))
            thread_ts = str(params["thread_ts"]) if params.get("thread_ts") else None
            ts = sink.post(channel, text, blocks, metadata, thread_ts)
            message = sink.slack_message(sink.get(ts), include_metadata=True)  # type: ignore[arg-type]
            return {"ok": True, "channel": channel, "ts": ts, "message": message}
        if method == "chat.update":
            channel = sink.channel_by_id(params.get("channel"))
            if not params.get("ts"):
                raise SlackError("invalid_arguments")
            blocks = parse_blocks(params.get("blocks"))
            check_message(params.get("text"), blocks)
            if not sink.update(channel, str(params["ts"]), params.get("text"), blocks):
                raise SlackError("message_not_found")
            row = sink.get(str(params["ts"]))
            message = sink.slack_message(row, include_metadata=True)  # type: ignore[arg-type]
            return {
                "ok": True,
                "channel": channel,
                "ts": row["ts"],
                "text": message["text"],
                "message": message,
            }  # type: ignore[index]
        if method == "conversations.history":
            return sink.history(sink.channel_by_id(params.get("channel")), params)
        if method == "conversations.replies":
            return sink.replies(sink.channel_by_id(params.get("channel")), params)
        if method == "chat.getPermalink":
            channel = sink.channel_by_id(params.get("channel"))
            msg = sink.get(str(params.get("message_ts") or ""))
            if msg is None or msg["channel_id"] != channel:
                raise SlackError("message_not_found")
            link = f"http://{host}/archives/{channel}/p{msg['ts'].replace('.', '')}"
            return {"ok": True, "channel": channel, "permalink": link}
        raise SlackError("unknown_method")

    async def api(request: Request) -> JSONResponse:
        status = sink.take_fault()
        if status is not None:
            return JSONResponse({"ok": False, "error": "service_unavailable"}, status_code=status)
        body = await _body(request)
        auth = request.headers.get("authorization", "")
        if not (auth.startswith("Bearer ") and len(auth) > 7) and not body.get("token"):
            return error("not_authed")
        method = request.path_params["method"]
        try:
            return JSONResponse(call(method, {**dict(request.query_params), **body}, request.url.netloc))
        except Refusal as e:
            return JSONResponse(e.answer())
        except SlackError as e:
            return error(e.error, status=404 if e.error == "unknown_method" else 200, **e.detail)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def log(request: Request) -> JSONResponse:
        return JSONResponse({"messages": sink.messages(request.query_params.get("channel"))})

    async def faults(request: Request) -> JSONResponse:
        body = await request.json()
        sink.set_fault(int(body.get("status", 503)), int(body["count"]))
        return JSONResponse({"ok": True})

    async def app_settings(request: Request) -> JSONResponse:
        body = await request.json()
        sink.set_app(body["request_url"], body["signing_secret"])
        return JSONResponse({"ok": True, "request_url": body["request_url"]})

    async def click(request: Request) -> JSONResponse:
        body = await request.json()
        wanted_ts, wanted = str(body.get("message_ts", "")), str(body.get("button", ""))
        msg = sink.get(wanted_ts)
        if msg is None:
            return error("message_not_found", 404, message_ts=wanted_ts, with_buttons=_with_buttons(sink))
        buttons = message_buttons(msg)
        if not buttons:
            return error("no_buttons", 404, message=_summary(msg), with_buttons=_with_buttons(sink))
        action = _find_button(buttons, wanted)
        if action is None:
            return error("button_not_found", 404, button=wanted, message=_summary(msg))
        app = sink.app()
        if "request_url" not in app:
            return error("no Request URL: the app's interactivity is not configured (POST /_sink/app)", 409)
        interaction_id = secrets.token_hex(8)
        response_url = f"http://{request.url.netloc}/_sink/respond/{interaction_id}"
        payload = block_actions_payload(msg, str(body["user"]), action, response_url)
        form = urlencode({"payload": json.dumps(payload)})
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": sign(app["signing_secret"], timestamp, form),
        }
        row: dict[str, Any] = {"id": interaction_id, "message_ts": msg["ts"], "user_id": str(body["user"]),
               "action_id": action["action_id"], "body": form, "timestamp": timestamp,
               "signature": headers["X-Slack-Signature"], "sent_at": time.time()}  # fmt: skip
        started = time.monotonic()
        try:
            # Slack waits ACK_SECONDS for the answer, no longer.
            async with httpx.AsyncClient(timeout=ACK_SECONDS) as client:
                answer = await client.post(app["request_url"], content=form, headers=headers)
            row.update(status=answer.status_code, answer=answer.text[:2000])
        except httpx.HTTPError as e:
            row.update(status=None, answer=f"{type(e).__name__}: {e}")
        elapsed = time.monotonic() - started
        row.update(elapsed_ms=round(elapsed * 1000, 1), **acknowledgement(row["status"], elapsed))
        sink.record_interaction(row)
        return JSONResponse({"ok": True, "interaction": row, "button": _button_summary(action)})

    async def respond(request: Request) -> JSONResponse:
        interaction_id = request.path_params["interaction_id"]
        sent = sink.interaction(interaction_id)
        if sent is None or time.time() - sent["sent_at"] > RESPONSE_URL_SECONDS:
            return error("expired_url", 404)
        if len(sink.responses(interaction_id)) >= RESPONSE_URL_USES:
            return error("used_url", 404)
        sink.add_response(interaction_id, await request.json())
        return JSONResponse({"ok": True})

    async def responses(request: Request) -> JSONResponse:
        return JSONResponse({"responses": sink.responses(request.path_params["interaction_id"])})

    async def interactions(_: Request) -> JSONResponse:
        return JSONResponse({"interactions": sink.interactions()})

    return Starlette(
        routes=[
            Route("/api/{method}", api, methods=["GET", "POST"]),
            Route("/_sink/health", health),
            Route("/_sink/messages", log),
            Route("/_sink/faults", faults, methods=["POST"]),
            Route("/_sink/app", app_settings, methods=["POST"]),
            Route("/_sink/click", click, methods=["POST"]),
            Route("/_sink/respond/{interaction_id}", respond, methods=["POST"]),
            Route("/_sink/responses/{interaction_id}", responses),
            Route("/_sink/interactions", interactions),
        ]
    )


def acknowledgement(status: int | None, elapsed: float) -> dict[str, Any]:
    """Whether Slack counts the app's answer as the acknowledgement, and what the person sees if not."""
    if status == 200 and elapsed <= ACK_SECONDS:
        return {"acknowledged": 1, "user_sees": None}
    if status is None:
        why = f"no answer within {ACK_SECONDS:.0f} s"
    elif status != 200:
        why = f"the app answered HTTP {status}"
    else:
        why = f"the app answered after {elapsed:.1f} s, past Slack's {ACK_SECONDS:.0f} s"
    return {"acknowledged": 0, "user_sees": f"an error mark on the button: {why}"}


def sign(secret: str, timestamp: str, body: str) -> str:
    """Slack's request signature (api.slack.com/authentication/verifying-requests-from-slack)."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def message_buttons(msg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every button of a message, in an actions block or as a section's accessory, with its block's id."""
    out = []
    for block in msg.get("blocks") or []:
        if not isinstance(block, dict):
            continue
        elements = block.get("elements") if block.get("type") == "actions" else [block.get("accessory")]
        for element in elements or []:
            if isinstance(element, dict) and element.get("type") == "button":
                # Slack makes up the action_id of a button that has none and sends that one.
                made_up = hashlib.sha1(json.dumps(element, sort_keys=True).encode()).hexdigest()[:5]
                action_id = element.get("action_id") or made_up
                out.append({**element, "action_id": action_id, "block_id": block.get("block_id", "")})
    return out


def _find_button(buttons: list[dict[str, Any]], wanted: str) -> dict[str, Any] | None:
    """The button whose text or action id is ``wanted`` (either case)."""
    for button in buttons:
        names = {_button_text(button).lower(), str(button.get("action_id", "")).lower()}
        if wanted.lower() in names:
            return button
    return None


def _button_text(button: dict[str, Any]) -> str:
    text = button.get("text")
    return str(text.get("text", "")) if isinstance(text, dict) else ""


def _button_summary(button: dict[str, Any]) -> dict[str, Any]:
    url = {"url": button["url"]} if button.get("url") else {}
    return {"text": _button_text(button), "action_id": button["action_id"], **url}


def _summary(msg: dict[str, Any]) -> dict[str, Any]:
    """A message as a person would point at it: its ts, channel, first line and buttons."""
    title = ""
    for block in msg.get("blocks") or []:
        text = block.get("text") if isinstance(block, dict) else None
        if isinstance(text, dict) and text.get("text"):
            title = str(text["text"])
            break
    lines = (title or msg.get("text") or "").strip().splitlines()
    title = lines[0] if lines else ""
    buttons = [_button_summary(b) for b in message_buttons(msg)]
    return {"ts": msg["ts"], "channel": msg["channel"], "title": title[:100], "buttons": buttons}


def _with_buttons(sink: SlackSink, last: int = 5) -> list[dict[str, Any]]:
    """The latest messages that carry buttons, newest last: what a person could have meant."""
    return [_summary(m) for m in sink.messages() if message_buttons(m)][-last:]


def block_actions_payload(
    msg: dict[str, Any], user_id: str, button: dict[str, Any], response_url: str
) -> dict[str, Any]:
    """What Slack sends when ``user_id`` clicks ``button`` on ``msg`` (the ``block_actions`` payload,
    https://docs.slack.dev/reference/interaction-payloads/block_actions-payload). Slack sends it for a link
    button too ("If you're using url, you'll still receive an interaction payload and will need to send an
    acknowledgement response": https://docs.slack.dev/reference/block-kit/block-elements/button-element;
    slackapi/node-slack-sdk#869: "these buttons actually dispatch a request to your app ... Slack expects
    you to respond")."""
    now = f"{time.time():.6f}"
    name = user_id.lower()
    channel_name = msg["channel"].lstrip("#")
    thread = {"thread_ts": msg["thread_ts"]} if msg["thread_ts"] else {}
    return {
        "type": "block_actions",
        "user": {"id": user_id, "username": name, "name": name, "team_id": TEAM_ID},
        "api_app_id": APP_ID,
        "token": "local-verification-token",
        "container": {"type": "message", "message_ts": msg["ts"], "channel_id": msg["channel_id"],
                      "is_ephemeral": False, **thread},
        "trigger_id": f"{int(time.time())}.{secrets.randbelow(10**12)}",
        "team": {"id": TEAM_ID, "domain": "local"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": msg["channel_id"], "name": channel_name},
        "message": {"type": "message", "ts": msg["ts"], "text": msg["text"] or "", "blocks": msg["blocks"] or [],
                    "user": BOT_USER_ID, "bot_id": BOT_ID, "app_id": APP_ID, **thread},
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [{
            "action_id": button["action_id"], "block_id": button["block_id"], "text": button.get("text"),
            "type": "button", "action_ts": now,
            **{k: button[k] for k in ("value", "style") if button.get(k)},
        }],
    }  # fmt: skip


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(SlackSink(args.data_dir)), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
