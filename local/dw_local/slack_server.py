"""Slack stand-in: accepts what slack_sdk's WebClient sends and keeps every message durably.

Serves ``/api/<method>`` for the Web API methods the product uses (``chat.postMessage`` and what threads
need: ``chat.update``, ``conversations.replies``, ``chat.getPermalink``, ``auth.test``), answering with
Slack's shapes (``{"ok": true, "ts": ...}`` or ``{"ok": false, "error": ...}``). Messages live in SQLite
under ``--data-dir`` so they survive restarts. ``/_sink/...`` is for the local world itself: the message
log and fault injection (a Slack outage), never used by product code.

Interactivity, as Slack does it: ``/_sink/app`` holds the app's settings (its Request URL and signing
secret); ``/_sink/click`` plays a person's click on a message's button: the ``block_actions`` payload
Slack would send, form-encoded and signed (``X-Slack-Signature`` = ``v0=`` + HMAC-SHA256(secret,
``v0:{timestamp}:{body}``)), posted to the Request URL. The app answers the clicker through the
payload's ``response_url`` (``/_sink/respond/<id>``); every request sent is kept (``/_sink/interactions``).

Run as ``python -m dw_local.slack_server --port 8766 --data-dir .dw/local/slack``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
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
TEAM_ID = "T0LOCAL01"
APP_ID = "A0LOCAL01"


class SlackSink:
    """The message store and the outage switch, shared by the routes."""

    def __init__(self, data_dir: Path):
        data_dir.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(data_dir / "slack.sqlite", check_same_thread=False)
        # A stand-in's commits need not wait for the disk: they outlive a killed server all the same.
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.executescript(SCHEMA)
        self._db.commit()
        self._lock = threading.Lock()
        self._faults: dict[str, Any] = {"count": 0, "status": 503}

    def _next_ts(self) -> str:
        # Slack ts values are unique per channel and increase; microseconds keep them unique here.
        last = self._db.execute("select max(ts) from messages").fetchone()[0]
        now = f"{time.time():.6f}"
        if last is not None and now <= last:
            secs, micros = last.split(".")
            now = f"{secs}.{int(micros) + 1:06d}"
        return now

    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            ts = self._next_ts()
            self._db.execute(
                "insert into messages (ts, channel, thread_ts, text, blocks, metadata, received_at)"
                " values (?, ?, ?, ?, ?, ?, ?)",
                (
                    ts,
                    body["channel"],
                    body.get("thread_ts"),
                    body.get("text"),
                    _as_json(body.get("blocks")),
                    _as_json(body.get("metadata")),
                    time.time(),
                ),
            )
            self._db.commit()
        return self.get(ts)  # type: ignore[return-value]

    def update(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            cur = self._db.execute(
                "update messages set text = coalesce(?, text), blocks = coalesce(?, blocks), edited_at = ?"
                " where ts = ? and channel = ?",
                (body.get("text"), _as_json(body.get("blocks")), time.time(), body["ts"], body["channel"]),
            )
            self._db.commit()
        return self.get(body["ts"]) if cur.rowcount else None

    def get(self, ts: str) -> dict[str, Any] | None:
        rows = self.messages(where="ts = ?", args=(ts,))
        return rows[0] if rows else None

    def messages(self, where: str = "1 = 1", args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        cur = self._db.execute(
            "select ts, channel, thread_ts, text, blocks, metadata, edited_at, received_at"
            f" from messages where {where} order by seq",
            args,
        )
        cols = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            msg = dict(zip(cols, row, strict=True))
            msg["blocks"] = json.loads(msg["blocks"]) if msg["blocks"] else None
            msg["metadata"] = json.loads(msg["metadata"]) if msg["metadata"] else None
            out.append(msg)
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
    if value is None:
        return None
    # Form-encoded clients send blocks as a JSON string already.
    return value if isinstance(value, str) else json.dumps(value)


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if request.headers.get("content-type", "").startswith("application/json"):
        return json.loads(raw or b"{}")
    return dict(parse_qsl(raw.decode()))


def build_app(sink: SlackSink) -> Starlette:
    def error(name: str, status: int = 200) -> JSONResponse:
        return JSONResponse({"ok": False, "error": name}, status_code=status)

    async def api(request: Request) -> JSONResponse:
        status = sink.take_fault()
        if status is not None:
            return JSONResponse({"ok": False, "error": "service_unavailable"}, status_code=status)
        body = await _body(request)
        auth = request.headers.get("authorization", "")
        if not (auth.startswith("Bearer ") and len(auth) > 7) and not body.get("token"):
            return error("not_authed")
        method = request.path_params["method"]
        if method == "auth.test":
            return JSONResponse(
                {"ok": True, "url": "http://localhost/", "team": "local", "user": "dw-dagster"}
            )
        if method == "chat.postMessage":
            if not body.get("channel"):
                return error("channel_not_found")
            if not body.get("text") and not body.get("blocks"):
                return error("no_text")
            msg = sink.post(body)
            return JSONResponse({"ok": True, "channel": msg["channel"], "ts": msg["ts"], "message": msg})
        if method == "chat.update":
            if not body.get("channel") or not body.get("ts"):
                return error("invalid_arguments")
            msg = sink.update(body)
            if msg is None:
                return error("message_not_found")
            return JSONResponse({"ok": True, "channel": msg["channel"], "ts": msg["ts"], "message": msg})
        if method == "conversations.replies":
            params = {**dict(request.query_params), **body}
            thread = params.get("ts")
            msgs = sink.messages(
                "channel = ? and (ts = ? or thread_ts = ?)", (params.get("channel"), thread, thread)
            )
            if not msgs:
                return error("thread_not_found")
            return JSONResponse({"ok": True, "messages": msgs, "has_more": False})
        if method == "chat.getPermalink":
            params = {**dict(request.query_params), **body}
            msg = sink.get(params.get("message_ts", ""))
            if msg is None:
                return error("message_not_found")
            link = f"http://{request.url.netloc}/archives/{msg['channel']}/p{msg['ts'].replace('.', '')}"
            return JSONResponse({"ok": True, "channel": msg["channel"], "permalink": link})
        return error("unknown_method", status=404)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def log(request: Request) -> JSONResponse:
        channel = request.query_params.get("channel")
        msgs = sink.messages("channel = ?", (channel,)) if channel else sink.messages()
        return JSONResponse({"messages": msgs})

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
        msg = sink.get(str(body.get("message_ts", "")))
        if msg is None:
            return error("message_not_found", 404)
        action = _find_button(msg, str(body.get("button", "")))
        if action is None:
            return error(f"no button {body.get('button')!r} on message {msg['ts']}", 404)
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
        row = {"id": interaction_id, "message_ts": msg["ts"], "user_id": str(body["user"]),
               "action_id": action["action_id"], "body": form, "timestamp": timestamp,
               "signature": headers["X-Slack-Signature"], "sent_at": time.time()}  # fmt: skip
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                answer = await client.post(app["request_url"], content=form, headers=headers)
            row.update(status=answer.status_code, answer=answer.text[:2000])
        except httpx.HTTPError as e:
            row.update(status=None, answer=f"{type(e).__name__}: {e}")
        sink.record_interaction(row)
        return JSONResponse({"ok": True, "interaction": row})

    async def respond(request: Request) -> JSONResponse:
        sink.add_response(request.path_params["interaction_id"], await request.json())
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


def sign(secret: str, timestamp: str, body: str) -> str:
    """Slack's request signature (api.slack.com/authentication/verifying-requests-from-slack)."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def _find_button(msg: dict[str, Any], wanted: str) -> dict[str, Any] | None:
    """The button on the message whose text or action id is ``wanted``, with the block it sits in."""
    for block in msg.get("blocks") or []:
        for element in block.get("elements") or []:
            text = (element.get("text") or {}).get("text", "")
            if element.get("type") == "button" and wanted.lower() in (
                text.lower(),
                element.get("action_id", "").lower(),
            ):
                return {**element, "block_id": block.get("block_id", "")}
    return None


def block_actions_payload(
    msg: dict[str, Any], user_id: str, button: dict[str, Any], response_url: str
) -> dict[str, Any]:
    """What Slack sends when ``user_id`` clicks ``button`` on ``msg`` (the ``block_actions`` shape)."""
    now = f"{time.time():.6f}"
    name = user_id.lower()
    return {
        "type": "block_actions",
        "user": {"id": user_id, "username": name, "name": name, "team_id": TEAM_ID},
        "api_app_id": APP_ID,
        "token": "local-verification-token",
        "container": {"type": "message", "message_ts": msg["ts"], "channel_id": msg["channel"],
                      "is_ephemeral": False, **({"thread_ts": msg["thread_ts"]} if msg["thread_ts"] else {})},
        "trigger_id": f"{int(time.time())}.{secrets.randbelow(10**12)}",
        "team": {"id": TEAM_ID, "domain": "local"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": msg["channel"], "name": msg["channel"].lstrip("#")},
        "message": {"type": "message", "ts": msg["ts"], "text": msg["text"], "blocks": msg["blocks"] or [],
                    **({"thread_ts": msg["thread_ts"]} if msg["thread_ts"] else {})},
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [{
            "action_id": button["action_id"], "block_id": button["block_id"], "text": button.get("text"),
            "value": button.get("value", ""), "type": "button", "action_ts": now,
            **({"style": button["style"]} if button.get("style") else {}),
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
