"""Slack stand-in: accepts what slack_sdk's WebClient sends and keeps every message durably.

Serves ``/api/<method>`` for the Web API methods the product uses (``chat.postMessage`` and what threads
need: ``chat.update``, ``conversations.replies``, ``chat.getPermalink``, ``auth.test``), answering with
Slack's shapes (``{"ok": true, "ts": ...}`` or ``{"ok": false, "error": ...}``). Messages live in SQLite
under ``--data-dir`` so they survive restarts. ``/_sink/...`` is for the local world itself: the message
log and fault injection (a Slack outage), never used by product code.

Run as ``python -m dw_local.slack_server --port 8766 --data-dir .dw/local/slack``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

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
)
"""


class SlackSink:
    """The message store and the outage switch, shared by the routes."""

    def __init__(self, data_dir: Path):
        data_dir.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(data_dir / "slack.sqlite", check_same_thread=False)
        self._db.execute(SCHEMA)
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

    return Starlette(
        routes=[
            Route("/api/{method}", api, methods=["GET", "POST"]),
            Route("/_sink/health", health),
            Route("/_sink/messages", log),
            Route("/_sink/faults", faults, methods=["POST"]),
        ]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(SlackSink(args.data_dir)), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
