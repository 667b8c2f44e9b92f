"""Posting the outbox's pending messages to Slack: in thread order, each once, an outage delaying and never
losing a message.

Each post is claimed first (compare-and-set), so of several processes flushing at once one posts. Slack's
answer (its ``ts``) is recorded on the row; a failure after the client's own retries leaves the row
``pending`` with the error, the attempt count and a backoff. Replies wait for their thread's root. The one
window Slack's API cannot close (no idempotency key on ``chat.postMessage``) is a crash between Slack
accepting a post and its ``ts`` being written: the claim's lease expires, and before posting again the
message is looked for by its metadata (``message_key``) in the thread (replies) or the channel history
(roots, where the channel id is known); only if it is not found is it posted again.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slack_sdk.errors import SlackApiError

from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.outbox import OutboxBusy, OutboxMessage, SlackOutbox

METADATA_EVENT_TYPE = "dw_incident_message"
# Pages of conversations.history or .replies read to find a post whose answer was lost: Slack serves apps
# outside its Marketplace at most 15 messages a call (since 2025-05-29,
# https://docs.slack.dev/changelog/2025/05/29/rate-limit-changes-for-non-marketplace-apps), so 300 messages.
RECONCILE_PAGES = 20
AUTONOMOUS_KINDS = frozenset({"hold"})
"""Messages that act under a standing approval (not just inform): gated by ``dispatch_allowed``."""
_TOKEN_PATTERN = re.compile(r"xox[a-zA-Z]-[A-Za-z0-9-]+")


class Redactor:
    """Removes the bot token (and anything shaped like a Slack token) from text that is logged or stored."""

    def __init__(self, *secrets: str | None):
        self._secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "[redacted]")
        return _TOKEN_PATTERN.sub("xox?-[redacted]", text)


@dataclass
class FlushResult:
    sent: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Attempted this time and still pending."""
    waiting: list[str] = field(default_factory=list)
    """Not attempted: not due yet, behind an undelivered root or earlier reply, or claimed elsewhere."""
    reconciled: list[str] = field(default_factory=list)
    """Found already posted (an earlier attempt's answer was lost) and recorded without posting again."""
    stopped: list[str] = field(default_factory=list)
    """Autonomous messages held back because dispatch is stopped (they stay pending)."""

    def summary(self) -> str:
        return (
            f"sent {len(self.sent)}, reconciled {len(self.reconciled)}, failed {len(self.failed)}, "
            f"waiting {len(self.waiting)}, stopped {len(self.stopped)}"
        )


class _Outage(Exception):
    """Slack did not answer or answered 5xx/429: the rest of this flush would fail the same way."""


@dataclass
class Delivery:
    """Posts pending outbox rows through a slack_sdk ``WebClient`` (``client()`` builds it on first use)."""

    client: Callable[[], Any]
    store: IncidentStore
    outbox: SlackOutbox
    redact: Redactor
    log: logging.Logger | logging.LoggerAdapter
    now: Callable[[], datetime]
    backoff_seconds: tuple[float, float] = (30.0, 1800.0)
    lease_seconds: float = 300.0
    dispatch_allowed: Callable[[], bool] | None = None

    def flush(
        self, incident_id: str | None = None, *, force: bool = False, time_budget_seconds: float | None = None
    ) -> FlushResult:
        result = FlushResult()
        deadline = time.monotonic() + time_budget_seconds if time_budget_seconds else None
        with self.outbox.connect("slack.flush") as cur:
            unsent = self.outbox.messages(cur, incident_id=incident_id, unsent_only=True)
            by_thread: dict[str, list[OutboxMessage]] = {}
            for m in unsent:
                by_thread.setdefault(m.thread_key, []).append(m)
            try:
                for tkey, msgs in by_thread.items():
                    if deadline and time.monotonic() > deadline:
                        result.waiting += [m.message_key for m in msgs]
                        continue
                    self._flush_thread(cur, tkey, msgs, force, result)
            except _Outage:
                done = {*result.sent, *result.failed, *result.reconciled, *result.waiting, *result.stopped}
                result.waiting += [m.message_key for m in unsent if m.message_key not in done]
        if result.sent or result.failed or result.reconciled:
            self.log.info("Slack outbox: %s", result.summary())
        return result

    def _flush_thread(
        self, cur: Any, tkey: str, msgs: list[OutboxMessage], force: bool, result: FlushResult
    ) -> None:
        root_key = msgs[0].root_key
        if root_key is None:
            # A crash between the two enqueue statements: the earliest message claims the thread.
            first = msgs[0]
            self.outbox.claim_thread(
                cur, tkey, first.incident_id, first.channel, first.message_key, self.now()
            )
            root_key = self.outbox.thread_root(cur, tkey)
            msgs = [m.model_copy(update={"root_key": root_key}) for m in msgs]
        root = self.outbox.get(cur, root_key) if root_key else None
        ordered = sorted(msgs, key=lambda m: (not m.is_root, m.created_at, m.message_key))
        for i, msg in enumerate(ordered):
            if not msg.is_root and (root is None or root.status != "sent"):
                # Replies wait for their root's ts.
                result.waiting += [m.message_key for m in ordered[i:]]
                return
            if msg.kind in AUTONOMOUS_KINDS and self.dispatch_allowed and not self.dispatch_allowed():
                self.log.info("Slack post %s held back: autonomous dispatch is stopped", msg.message_key)
                result.stopped.append(msg.message_key)
                result.waiting += [m.message_key for m in ordered[i + 1 :]]
                return
            outcome = self._attempt(cur, msg, root if not msg.is_root else None, force)
            if outcome in ("sent", "reconciled"):
                (result.sent if outcome == "sent" else result.reconciled).append(msg.message_key)
                if msg.is_root:
                    root = self.outbox.get(cur, msg.message_key)
                continue
            if outcome == "failed" or outcome == "outage":
                result.failed.append(msg.message_key)
                result.waiting += [m.message_key for m in ordered[i + 1 :]]
                if outcome == "outage":
                    raise _Outage()
                return
            # Not due, or another process holds it: keep the thread's order.
            result.waiting += [m.message_key for m in ordered[i:]]
            return

    def _due(self, msg: OutboxMessage, now: datetime, force: bool) -> bool:
        if msg.status == "sending":
            lease = timedelta(seconds=self.lease_seconds)
            return msg.claimed_at is not None and msg.claimed_at <= now - lease
        return force or msg.next_attempt_at is None or msg.next_attempt_at <= now

    def _attempt(self, cur: Any, msg: OutboxMessage, root: OutboxMessage | None, force: bool) -> str:
        now = self.now()
        if not self._due(msg, now, force):
            return "waiting"
        claim_id = uuid.uuid4().hex
        try:
            if not self.outbox.claim(cur, msg, claim_id, now):
                return "waiting"
        except OutboxBusy as e:
            # Nothing was claimed: the message waits for the next flush, as when another process holds it.
            self.log.warning("Slack post %s not attempted: %s", msg.message_key, e)
            return "waiting"
        attempt = msg.attempts + 1
        thread_ts = root.slack_ts if root else None
        channel = (root.slack_channel_id if root else None) or msg.channel
        # An earlier attempt may have been posted without its answer reaching us: look before posting.
        if msg.status == "sending" or msg.last_outcome == "unknown":
            found = self._find_posted(cur, msg, channel, thread_ts)
            if found:
                channel_id, ts = found
                self._mark_sent(cur, msg, claim_id, channel_id, ts, thread_ts)
                self._record(msg, attempt, "reconciled", ts=ts, channel_id=channel_id, thread_ts=thread_ts)
                return "reconciled"
        try:
            resp = self.client().chat_postMessage(
                channel=channel,
                thread_ts=thread_ts,
                text=msg.payload.get("text"),
                blocks=msg.payload.get("blocks"),
                metadata={
                    "event_type": METADATA_EVENT_TYPE,
                    "event_payload": {"message_key": msg.message_key, "incident_id": msg.incident_id},
                },
                unfurl_links=False,
            )
        except Exception as e:  # noqa: BLE001 - every failure keeps the message pending
            outage, outcome = _classify(e)
            error = self.redact(_describe(e))[:2000]
            delay = min(self.backoff_seconds[1], self.backoff_seconds[0] * 2 ** max(0, attempt - 1))
            next_at = self.now() + timedelta(seconds=delay)
            try:
                self.outbox.mark_failed(cur, msg.message_key, claim_id, outcome, error, next_at)
            except OutboxBusy as busy:
                # The row stays claimed: once its lease ends, the next flush looks for it and posts it.
                self.log.warning("Slack post %s: its failure was not recorded: %s", msg.message_key, busy)
            # An outage fixes itself; a refusal (unknown channel, bad auth) needs a person.
            (self.log.warning if outage else self.log.error)(
                "Slack post %s to %s failed (attempt %d, %s); pending, next attempt after %s: %s",
                msg.kind,
                msg.channel,
                attempt,
                outcome,
                next_at.isoformat(timespec="seconds"),
                error,
            )
            self._record(msg, attempt, outcome, error=error, next_attempt_at=next_at)
            return "outage" if outage else "failed"
        ts, channel_id = resp["ts"], resp.get("channel") or channel
        self._mark_sent(cur, msg, claim_id, channel_id, ts, thread_ts)
        self._record(msg, attempt, "sent", ts=ts, channel_id=channel_id, thread_ts=thread_ts)
        return "sent"

    def _mark_sent(
        self, cur: Any, msg: OutboxMessage, claim_id: str, channel_id: str, ts: str, thread_ts: str | None
    ) -> None:
        try:
            if self.outbox.mark_sent(cur, msg.message_key, claim_id, channel_id, ts, thread_ts, self.now()):
                return
            why = "claim lost"
        except OutboxBusy as e:
            why = str(e)
        # Posted, not recorded: once the claim's lease ends, a flush finds the post by its metadata.
        self.log.warning("Slack post %s: its ts %s was not recorded (%s)", msg.message_key, ts, why)

    def _find_posted(
        self, cur: Any, msg: OutboxMessage, channel: str, thread_ts: str | None
    ) -> tuple[str, str] | None:
        """Looks for the message by its metadata key; ``None`` when not found or when Slack cannot say."""

        def match(m: dict[str, Any]) -> bool:
            payload = (m.get("metadata") or {}).get("event_payload") or {}
            return payload.get("message_key") == msg.message_key and m.get("ts") != thread_ts

        client = self.client()
        try:
            if thread_ts:
                found = self._find_in_pages(
                    msg, match, client.conversations_replies, channel=channel, ts=thread_ts
                )
                return None if found is None else (found[0] or channel, found[1])
            channel_id = self.outbox.known_channel_id(cur, msg.channel)
            if not channel_id or msg.claimed_at is None:
                return None
            # The post, if any, went out while the claim held: between the claim and the end of its lease
            # (a margin either side for the clocks), newest first, page by page.
            margin = timedelta(minutes=5)
            oldest = msg.claimed_at - margin
            latest = msg.claimed_at + timedelta(seconds=self.lease_seconds) + margin
            found = self._find_in_pages(
                msg,
                match,
                client.conversations_history,
                channel=channel_id,
                oldest=f"{oldest.timestamp():.6f}",
                latest=f"{latest.timestamp():.6f}",
                inclusive=True,
            )
            return None if found is None else (channel_id, found[1])
        except Exception as e:  # noqa: BLE001 - cannot tell: post again rather than lose it
            self.log.warning(
                "Slack post %s: could not check for an earlier post (%s)",
                msg.message_key,
                self.redact(str(e)),
            )
        return None

    def _find_in_pages(
        self,
        msg: OutboxMessage,
        match: Callable[[dict[str, Any]], bool],
        call: Callable[..., Any],
        **params: Any,
    ) -> tuple[str | None, str] | None:
        """``(channel, ts)`` of the first message ``match`` accepts, following ``call``'s cursor for at most
        ``RECONCILE_PAGES`` pages (Slack serves apps outside its Marketplace 15 messages a call)."""
        cursor = None
        for _ in range(RECONCILE_PAGES):
            resp = call(**params, include_all_metadata=True, cursor=cursor, limit=200)
            for m in resp.get("messages", []):
                if match(m):
                    return resp.get("channel"), m["ts"]
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not resp.get("has_more") or not cursor:
                return None
        self.log.warning(
            "Slack post %s: not in the first %d pages of the conversation, and more remain: posted again "
            "rather than lost",
            msg.message_key,
            RECONCILE_PAGES,
        )
        return None

    def _record(self, msg: OutboxMessage, attempt: int, outcome: str, **detail: Any) -> None:
        base = {
            "message_key": msg.message_key,
            "channel": msg.channel,
            "kind": msg.kind,
            "version": msg.version,
        }
        detail = {
            k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in detail.items() if v is not None
        }
        self.store.append_event(
            msg.incident_id,
            "slack_attempt",
            f"{msg.message_key}#{attempt}",
            {**base, "attempt": attempt, "outcome": outcome, **detail},
        )
        if outcome in ("sent", "reconciled"):
            self.store.append_event(
                msg.incident_id, "slack_message", msg.message_key, {**base, "root": msg.is_root, **detail}
            )


def _describe(e: Exception) -> str:
    if isinstance(e, SlackApiError):
        resp = e.response
        status = getattr(resp, "status_code", "?")
        return f"Slack answered HTTP {status}: {resp.get('error') or resp.data}"
    return f"{type(e).__name__}: {e}"


def _classify(e: Exception) -> tuple[bool, str]:
    """(is an outage, outcome): Slack's error answers are ``failed``; no answer is ``unknown``."""
    if isinstance(e, SlackApiError):
        status = getattr(e.response, "status_code", 200) or 200
        return status >= 500 or status == 429, "failed"
    return True, "unknown"
