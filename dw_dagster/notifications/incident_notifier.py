"""Delivers an incident's Slack messages through the outbox: never lost, never posted twice.

Every message is first written to the outbox (``SLACK_OUTBOX``) under an idempotency key
``incident|channel|kind|content version``, then posted. Slack's answer (its ``ts``) is recorded on the row;
a failure after the client's own retries leaves the row ``pending`` with the error, the attempt count and
the time of the next attempt, and :meth:`IncidentNotifier.flush_pending` (the outbox sensor, or the next
``notify``) delivers it later. Each attempt's outcome is also appended to the incident's event log
(``slack_attempt``), and each delivered message once (``slack_message``).

One thread per incident per channel: the first message for a channel is the root (``SLACK_THREADS``);
every later message there (a refined diagnosis, a proposed hold, updates, the resolution) is a reply to the
root's recorded ``ts``, posted only once the root is delivered, in order.

Re-ticks and restarts re-enqueue the same keys (no-ops) and find ``sent`` rows done. The one window Slack's
API cannot close (no idempotency key on ``chat.postMessage``) is a crash between Slack accepting a post and
the ``ts`` being written: the claim's lease expires, and before posting again the notifier looks for the
message by its metadata (``message_key``) in the thread (replies) or the channel history (roots, where the
API allows); only if it is not found is it posted again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import dagster as dg
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import Block

from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.models import BlastRadius, Diagnosis, Incident
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.blocks import (
    DagsterLinks,
    SlackMessage,
    dagster_ui_url,
    hold_notice,
    incident_message,
    proposed_hold_notice,
    resolution_message,
    update_message,
)
from dw_dagster.notifications.outbox import OutboxMessage, SlackOutbox, message_key, thread_key
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.routing import Recipients
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

log = logging.getLogger(__name__)

METADATA_EVENT_TYPE = "dw_incident_message"
AUTONOMOUS_KINDS = frozenset({"hold"})
"""Messages that act under a standing approval (not just inform): gated by ``autonomous_dispatch_allowed``."""
_TOKEN_PATTERN = re.compile(r"xox[a-zA-Z]-[A-Za-z0-9-]+")


class Redactor:
    """Removes the bot token (and anything shaped like a Slack token) from text that is logged or stored."""

    def __init__(self, *secrets: str | None):
        self._secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "[redacted]")
        return _TOKEN_PATTERN.sub("xox?-[redacted]", text)


def content_version(*parts: Any) -> str:
    """A short hash of what a message says (not of how it is rendered), so a re-render is not news."""
    raw = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


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


class IncidentNotifier:
    """Posts an incident's messages to Slack through the outbox in the ops schema.

    ``slack`` is the ``SlackNotifier`` resource (dagster-slack); ``store`` the ``IncidentStore`` whose
    warehouse and ops schema also hold the outbox. ``backoff_seconds`` is (first, cap) for the delay before
    retrying a failed message; ``lease_seconds`` how long a claim protects a post in progress (longer than
    the client's timeout times its retries). ``autonomous_dispatch_allowed`` is asked before each message
    that acts under a standing approval (the hold notice) is posted, e.g. the org-wide stop: while it
    answers False such messages stay pending.
    """

    def __init__(
        self,
        slack: SlackNotifier,
        store: IncidentStore,
        *,
        context: ContextFile | None = None,
        ui_url: str | None = None,
        backoff_seconds: tuple[float, float] = (30.0, 1800.0),
        lease_seconds: float = 300.0,
        logger: logging.Logger | None = None,
        clock: Callable[[], datetime] | None = None,
        autonomous_dispatch_allowed: Callable[[], bool] | None = None,
    ):
        if isinstance(slack.token, dg.EnvVar):
            # Built outside Dagster's resource resolution (a command, a test): resolve the EnvVar now.
            slack = slack.process_config_and_initialize()
        self.slack = slack
        self.store = store
        self.outbox = SlackOutbox(store.warehouse, store.ops, run_id=store.run_id)
        self.context = context
        self.links = DagsterLinks(ui_url or dagster_ui_url())
        self.backoff_seconds = backoff_seconds
        self.lease_seconds = lease_seconds
        self.log = logger or log
        self._now = clock or (lambda: datetime.now(UTC))
        self._dispatch_allowed = autonomous_dispatch_allowed
        self.redact = Redactor(slack.token, os.environ.get("SLACK_BOT_TOKEN"))
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.slack.get_client()
        return self._client

    # -- public API ------------------------------------------------------------------------------

    def notify(
        self,
        incident: Incident,
        diagnosis: Diagnosis,
        blast_radius: BlastRadius,
        recipients: Recipients,
        *,
        run_id: str | None = None,
        hold_action: str = "Hold expedite orders",
        standing_approval: str | None = None,
    ) -> list[OutboxMessage]:
        """Enqueues and posts the incident to the owners and the hold notice (sent or proposed).

        Idempotent: calling it again with the same diagnosis posts nothing; with a refined diagnosis it
        posts the new version as a reply in each owner thread. Returns the incident's outbox rows.
        """
        iid = incident.incident_id
        core = (
            incident.title,
            incident.severity,
            diagnosis.model_dump(mode="json"),
            blast_radius.model_dump(mode="json"),
        )
        # Versions follow what the message says: the diagnosis for the incident message, the flagged items
        # for the hold notice. A change of autonomy alone (a stop, a resume) is not a new diagnosis.
        version = content_version(*core)
        hold_version = content_version(hold_action, blast_radius.newly_flagged)
        consumers = ", ".join(recipients.consumer_channels) or "the consumers"
        hold_note = {
            "act": f":octagonal_sign: {consumers} told to {hold_action.lower()} on these SKUs.",
            "propose": f":raising_hand: A hold notice for {consumers} is proposed in this thread:"
            " a person decides.",
            "none": None,
        }[recipients.hold]
        start = self._now()
        seq = iter(range(1_000_000))

        def now() -> datetime:
            # Distinct, increasing enqueue times: the flush delivers in this order (owners first).
            return start + timedelta(microseconds=next(seq))

        with self.outbox.connect("slack.enqueue") as cur:
            for channel in recipients.owner_channels:
                root = self.outbox.thread_root(cur, thread_key(iid, channel))
                key = message_key(iid, channel, "incident", version)
                refined = root is not None and root != key
                msg = incident_message(
                    incident, diagnosis, blast_radius, context=self.context, links=self.links, run_id=run_id,
                    hold_note=hold_note, refined=refined,
                )  # fmt: skip
                self.outbox.enqueue(cur, iid, channel, "incident", version, msg.payload(), now())
            if recipients.hold == "act":
                msg = hold_notice(
                    incident, blast_radius, action=hold_action, standing_approval=standing_approval,
                    links=self.links,
                )  # fmt: skip
                for channel in recipients.consumer_channels:
                    self.outbox.enqueue(cur, iid, channel, "hold", hold_version, msg.payload(), now())
            elif recipients.hold == "propose":
                msg = proposed_hold_notice(
                    incident, blast_radius, consumer_channels=recipients.consumer_channels,
                    autonomy=recipients.autonomy, action=hold_action, links=self.links,
                )  # fmt: skip
                for channel in recipients.owner_channels:
                    self.outbox.enqueue(
                        cur, iid, channel, "hold_proposed", hold_version, msg.payload(), now()
                    )
        self.flush_pending(incident_id=iid)
        return self.messages(iid)

    def post_update(
        self,
        incident: Incident,
        text: str,
        blocks: Sequence[Block | dict[str, Any]] | None = None,
        *,
        kind: str = "update",
        version: str | None = None,
        channels: Sequence[str] | None = None,
        audience: Literal["owners", "all"] = "owners",
    ) -> list[OutboxMessage]:
        """Posts ``text`` (and ``blocks``, else a rendered update) as a reply in the incident's threads.

        ``channels`` defaults to the owners' threads (those started by the incident message), or every
        thread of the incident (the consumers' too) with ``audience="all"``. The same update twice (same
        kind and content, or the same explicit ``version``) is posted once.
        """
        if not text:
            raise ValueError(
                "post_update needs text: Slack shows it in notifications and where blocks cannot render"
            )
        if blocks is None:
            msg = update_message(incident, text)
        else:
            parsed = [b if isinstance(b, Block) else Block.parse(b) for b in blocks]
            msg = SlackMessage(text=text, blocks=[b for b in parsed if b is not None])
        return self._post_to_threads(incident, msg, kind, version, channels, audience)

    def post_resolution(
        self,
        incident: Incident,
        text: str,
        *,
        verification: dict[str, Any] | None = None,
        channels: Sequence[str] | None = None,
    ) -> list[OutboxMessage]:
        """The resolution as a reply in every thread of the incident (owners, and consumers: the hold
        lifts)."""
        msg = resolution_message(incident, text, verification=verification, links=self.links)
        return self._post_to_threads(incident, msg, "resolved", None, channels, "all")

    def flush_pending(
        self, incident_id: str | None = None, *, force: bool = False, time_budget_seconds: float | None = None
    ) -> FlushResult:
        """Delivers what is pending, in thread order; called by the outbox sensor and after each enqueue.

        ``force`` ignores the backoff. A Slack outage (no answer, 5xx, 429 after the client's retries)
        ends the flush at the first failure: the rest stays pending for the next one.
        """
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

    def messages(self, incident_id: str | None = None) -> list[OutboxMessage]:
        with self.outbox.connect("slack.read") as cur:
            return self.outbox.messages(cur, incident_id=incident_id)

    def pending(self, incident_id: str | None = None) -> list[OutboxMessage]:
        with self.outbox.connect("slack.read") as cur:
            return self.outbox.messages(cur, incident_id=incident_id, unsent_only=True)

    # -- internals -------------------------------------------------------------------------------

    def _post_to_threads(
        self,
        incident: Incident,
        msg: SlackMessage,
        kind: str,
        version: str | None,
        channels: Sequence[str] | None,
        audience: Literal["owners", "all"],
    ) -> list[OutboxMessage]:
        payload = msg.payload()
        version = version or content_version(kind, payload)
        iid = incident.incident_id
        with self.outbox.connect("slack.enqueue") as cur:
            if channels is not None:
                targets = list(channels)
            else:
                kinds = ("incident",) if audience == "owners" else None
                targets = self.outbox.thread_channels(cur, iid, root_kinds=kinds)
            if not targets:
                self.log.warning("incident %s: no Slack thread to post %s to; nothing sent", iid, kind)
                return []
            start = self._now()
            keys = [
                self.outbox.enqueue(cur, iid, ch, kind, version, payload, start + timedelta(microseconds=i))
                for i, ch in enumerate(targets)
            ]
            keys = [k for k, _ in keys]
        self.flush_pending(incident_id=iid)
        return [m for m in self.messages(iid) if m.message_key in keys]

    def _flush_thread(
        self, cur: Any, tkey: str, msgs: list[OutboxMessage], force: bool, result: FlushResult
    ) -> None:
        root_key = msgs[0].root_key
        if root_key is None:
            # A crash between the two enqueue statements: the earliest message claims the thread.
            first = msgs[0]
            now = self._now()
            self.outbox.claim_thread(cur, tkey, first.incident_id, first.channel, first.message_key, now)
            root_key = self.outbox.thread_root(cur, tkey)
            msgs = [m.model_copy(update={"root_key": root_key}) for m in msgs]
        root = self.outbox.get(cur, root_key) if root_key else None
        ordered = sorted(msgs, key=lambda m: (not m.is_root, m.created_at, m.message_key))
        for i, msg in enumerate(ordered):
            if not msg.is_root and (root is None or root.status != "sent"):
                # Replies wait for their root's ts.
                result.waiting += [m.message_key for m in ordered[i:]]
                return
            if msg.kind in AUTONOMOUS_KINDS and self._dispatch_allowed and not self._dispatch_allowed():
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
        now = self._now()
        if not self._due(msg, now, force):
            return "waiting"
        claim_id = uuid.uuid4().hex
        if not self.outbox.claim(cur, msg, claim_id, now):
            return "waiting"
        attempt = msg.attempts + 1
        thread_ts = root.slack_ts if root else None
        channel = (root.slack_channel_id if root else None) or msg.channel
        # An earlier attempt may have been posted without its answer reaching us: look before posting.
        if msg.status == "sending" or msg.last_outcome == "unknown":
            found = self._find_posted(cur, msg, channel, thread_ts)
            if found:
                channel_id, ts = found
                self.outbox.mark_sent(cur, msg.message_key, claim_id, channel_id, ts, thread_ts, self._now())
                self._record(msg, attempt, "reconciled", ts=ts, channel_id=channel_id, thread_ts=thread_ts)
                return "reconciled"
        try:
            resp = self.client.chat_postMessage(
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
            outage, outcome = self._classify(e)
            error = self.redact(self._describe(e))[:2000]
            delay = min(self.backoff_seconds[1], self.backoff_seconds[0] * 2 ** max(0, attempt - 1))
            next_at = self._now() + timedelta(seconds=delay)
            self.outbox.mark_failed(cur, msg.message_key, claim_id, outcome, error, next_at)
            # An outage fixes itself; a refusal (unknown channel, bad auth) needs a person.
            (self.log.warning if outage else self.log.error)(
                "Slack post %s to %s failed (attempt %d, %s); pending, next attempt after %s: %s",
                msg.kind, msg.channel, attempt, outcome, next_at.isoformat(timespec="seconds"), error,
            )  # fmt: skip
            self._record(msg, attempt, outcome, error=error, next_attempt_at=next_at)
            return "outage" if outage else "failed"
        ts, channel_id = resp["ts"], resp.get("channel") or channel
        if not self.outbox.mark_sent(cur, msg.message_key, claim_id, channel_id, ts, thread_ts, self._now()):
            self.log.warning("Slack post %s: claim lost before its ts %s was recorded", msg.message_key, ts)
        self._record(msg, attempt, "sent", ts=ts, channel_id=channel_id, thread_ts=thread_ts)
        return "sent"

    @staticmethod
    def _describe(e: Exception) -> str:
        if isinstance(e, SlackApiError):
            resp = e.response
            status = getattr(resp, "status_code", "?")
            return f"Slack answered HTTP {status}: {resp.get('error') or resp.data}"
        return f"{type(e).__name__}: {e}"

    @staticmethod
    def _classify(e: Exception) -> tuple[bool, str]:
        """(is an outage, outcome): Slack's error answers are ``failed``; no answer is ``unknown``."""
        if isinstance(e, SlackApiError):
            status = getattr(e.response, "status_code", 200) or 200
            return status >= 500 or status == 429, "failed"
        return True, "unknown"

    def _find_posted(
        self, cur: Any, msg: OutboxMessage, channel: str, thread_ts: str | None
    ) -> tuple[str, str] | None:
        """Looks for the message by its metadata key; ``None`` when not found or when Slack cannot say."""

        def match(m: dict[str, Any]) -> bool:
            payload = (m.get("metadata") or {}).get("event_payload") or {}
            return payload.get("message_key") == msg.message_key

        try:
            if thread_ts:
                cursor = None
                for _ in range(20):
                    resp = self.client.conversations_replies(
                        channel=channel, ts=thread_ts, include_all_metadata=True, cursor=cursor, limit=200
                    )
                    for m in resp.get("messages", []):
                        if match(m) and m.get("ts") != thread_ts:
                            return resp.get("channel") or channel, m["ts"]
                    cursor = (resp.get("response_metadata") or {}).get("next_cursor")
                    if not resp.get("has_more") or not cursor:
                        return None
                return None
            channel_id = self.outbox.known_channel_id(cur, msg.channel)
            if not channel_id or msg.claimed_at is None:
                return None
            oldest = (msg.claimed_at - timedelta(minutes=5)).timestamp()
            resp = self.client.conversations_history(
                channel=channel_id, oldest=f"{oldest:.6f}", include_all_metadata=True, limit=200
            )
            for m in resp.get("messages", []):
                if match(m):
                    return channel_id, m["ts"]
        except Exception as e:  # noqa: BLE001 - cannot tell: post again rather than lose it
            self.log.warning(
                "Slack post %s: could not check for an earlier post (%s)",
                msg.message_key,
                self.redact(str(e)),
            )
        return None

    def _record(self, msg: OutboxMessage, attempt: int, outcome: str, **detail: Any) -> None:
        base = {
            "message_key": msg.message_key, "channel": msg.channel, "kind": msg.kind, "version": msg.version,
        }  # fmt: skip
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


def build_slack_outbox_sensor(
    ops: OpsSchema,
    *,
    name: str = "slack_outbox",
    minimum_interval_seconds: int = 60,
    time_budget_seconds: float = 40.0,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    dispatch_gate: Callable[[WarehouseResource], Callable[[], bool]] | None = None,
) -> dg.SensorDefinition:
    """A sensor that delivers pending Slack messages (resources ``slack`` and ``snowflake``).

    ``dispatch_gate`` builds, from the warehouse, the ``autonomous_dispatch_allowed`` callable (the org-wide
    stop): autonomous messages stay pending while it answers False.
    """

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Delivers incident messages left pending in the Slack outbox"
        " (a Slack outage delays, never loses).",
    )
    def _sensor(
        context: dg.SensorEvaluationContext, slack: SlackNotifier, snowflake: WarehouseResource
    ) -> dg.SkipReason:
        notifier = IncidentNotifier(
            slack, IncidentStore(snowflake, ops), logger=context.log,
            autonomous_dispatch_allowed=dispatch_gate(snowflake) if dispatch_gate else None,
        )  # fmt: skip
        result = notifier.flush_pending(time_budget_seconds=time_budget_seconds)
        return dg.SkipReason(f"Slack outbox: {result.summary()}")

    return _sensor
