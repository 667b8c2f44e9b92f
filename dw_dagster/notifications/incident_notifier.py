"""The incident's Slack messages, written to the outbox and delivered: never lost, never posted twice.

Every message is first written to the outbox (``SLACK_OUTBOX``) under an idempotency key
``incident|channel|kind|content version``, then posted (:mod:`~dw_dagster.notifications.delivery`). One
thread per incident per channel: the first message for a channel is the root (``SLACK_THREADS``); every
later message there (a refined diagnosis, a proposed hold, the proposal, updates, the receipt, the
resolution) is a reply to the root, posted only once the root is delivered, in the order enqueued. A
message too long for one Slack message (the receipt, a proposal with a long diff) is enqueued as its parts,
in order. Re-ticks and restarts re-enqueue the same keys (no-ops) and find ``sent`` rows done.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from slack_sdk.models.blocks import Block

from dw_dagster.config import resolve_env_vars
from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.delivery import Delivery, FlushResult, Redactor
from dw_dagster.notifications.hold_message import hold_note, hold_notice, proposed_hold_notice
from dw_dagster.notifications.incident_message import incident_message
from dw_dagster.notifications.kit import SlackMessage
from dw_dagster.notifications.links import DagsterLinks, dagster_ui_url
from dw_dagster.notifications.outbox import OutboxMessage, SlackOutbox, message_key, thread_key
from dw_dagster.notifications.proposal_message import proposal_messages
from dw_dagster.notifications.receipt_message import receipt_checks, receipt_messages
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.routing import Recipients
from dw_dagster.notifications.thread_messages import resolution_message, update_message
from dw_dagster.notifications.wording import Wording, wording_for
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Incident
from dw_dagster.records.remediation import Receipt, RemediationPlan

log = logging.getLogger(__name__)

Audience = Literal["owners", "all"]


def content_version(*parts: Any) -> str:
    """A short hash of what a message says (not of how it is rendered), so a re-render is not news."""
    raw = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


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
        # Built outside Dagster's resource resolution (a command, a test), EnvVars are resolved here, without
        # Dagster's process_config_and_initialize, whose ephemeral instance is never disposed.
        self.slack = slack = resolve_env_vars(slack)
        self.store = store
        self.outbox = SlackOutbox(store.warehouse, store.ops, run_id=store.run_id)
        self.context = context
        self.links = DagsterLinks(ui_url or dagster_ui_url())
        self.log = logger or log
        self._now = clock or (lambda: datetime.now(UTC))
        self._client: Any = None
        self.delivery = Delivery(
            client=lambda: self.client,
            store=store,
            outbox=self.outbox,
            redact=Redactor(slack.token, os.environ.get("SLACK_BOT_TOKEN")),
            log=self.log,
            now=self._now,
            backoff_seconds=backoff_seconds,
            lease_seconds=lease_seconds,
            dispatch_allowed=autonomous_dispatch_allowed,
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.slack.get_client()
        return self._client

    # -- the messages ----------------------------------------------------------------------------

    def notify(
        self,
        incident: Incident,
        diagnosis: Diagnosis,
        blast_radius: BlastRadius,
        recipients: Recipients,
        *,
        run_id: str | None = None,
        wording: Wording | None = None,
        standing_approval: str | None = None,
    ) -> list[OutboxMessage]:
        """Enqueues and posts the incident to the owners and the hold notice (sent or proposed).

        ``run_id`` is the diagnosis run the messages link to; ``wording`` the pipeline's words
        (:func:`wording_for` with the metrics file; without it, the context file's and neutral ones).
        Idempotent: calling it again with the same diagnosis posts nothing; with a refined diagnosis it
        posts the new version as a reply in each owner thread. Returns the incident's outbox rows.
        """
        iid = incident.incident_id
        wording = wording or wording_for(self.context, None, diagnosis, blast_radius)
        core = (
            incident.title,
            incident.severity,
            diagnosis.model_dump(mode="json"),
            blast_radius.model_dump(mode="json"),
        )
        # Versions follow what the message says: the diagnosis for the incident message, the flagged items
        # for the hold notice. A change of autonomy alone (a stop, a resume) is not a new diagnosis.
        version = content_version(*core)
        hold_version = content_version(wording.hold_action, blast_radius.newly_flagged)
        note = hold_note(recipients, self.context, wording)
        times = self._times()
        with self.outbox.connect("slack.enqueue") as cur:
            for channel in recipients.owner_channels:
                root = self.outbox.thread_root(cur, thread_key(iid, channel))
                refined = root is not None and root != message_key(iid, channel, "incident", version)
                msg = incident_message(
                    incident,
                    diagnosis,
                    blast_radius,
                    context=self.context,
                    links=self.links,
                    run_id=run_id,
                    hold_note=note,
                    refined=refined,
                    wording=wording,
                )
                self.outbox.enqueue(cur, iid, channel, "incident", version, msg.payload(), next(times))
            if recipients.hold == "act":
                msg = hold_notice(
                    incident,
                    blast_radius,
                    wording=wording,
                    standing_approval=standing_approval,
                    links=self.links,
                    run_id=run_id,
                )
                for channel in recipients.consumer_channels:
                    self.outbox.enqueue(cur, iid, channel, "hold", hold_version, msg.payload(), next(times))
            elif recipients.hold == "propose":
                msg = proposed_hold_notice(
                    incident,
                    blast_radius,
                    consumer_channels=recipients.consumer_channels,
                    autonomy=recipients.autonomy,
                    wording=wording,
                    links=self.links,
                    run_id=run_id,
                )
                for channel in recipients.owner_channels:
                    self.outbox.enqueue(
                        cur, iid, channel, "hold_proposed", hold_version, msg.payload(), next(times)
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
        audience: Audience = "owners",
        run_id: str | None = None,
    ) -> list[OutboxMessage]:
        """Posts ``text`` (and ``blocks``, else a rendered update) as a reply in the incident's threads.

        ``run_id`` is the run the update speaks of (linked). ``channels`` defaults to the owners' threads
        (those started by the incident message), or every thread of the incident (the consumers' too)
        with ``audience="all"``. The same update twice (same kind and content, or the same explicit
        ``version``) is posted once.
        """
        if not text:
            raise ValueError(
                "post_update needs text: Slack shows it in notifications and where blocks cannot render"
            )
        if blocks is None:
            msg = update_message(incident, text, links=self.links, run_id=run_id)
        else:
            parsed = [b if isinstance(b, Block) else Block.parse(b) for b in blocks]
            msg = SlackMessage(text=text, blocks=[b for b in parsed if b is not None])
        return self._post_to_threads(incident, [(kind, version, msg)], channels, audience)

    def post_resolution(
        self,
        incident: Incident,
        text: str,
        *,
        verification: dict[str, Any] | None = None,
        channels: Sequence[str] | None = None,
        run_id: str | None = None,
    ) -> list[OutboxMessage]:
        """The resolution as a reply in every thread of the incident (owners, and consumers: the hold
        lifts); ``run_id`` is the run that showed it resolved."""
        msg = resolution_message(incident, text, verification=verification, links=self.links, run_id=run_id)
        return self._post_to_threads(incident, [("resolved", None, msg)], channels, "all")

    def post_receipt(
        self,
        incident: Incident,
        receipt: Receipt,
        *,
        resolution: str | None = None,
        wording: Wording | None = None,
    ) -> list[OutboxMessage]:
        """The receipt, whole, in the owners' threads (as many messages as it takes), then, when
        ``resolution`` is given, the resolution in every thread: each thread reads receipt, then resolution."""
        parts = receipt_messages(receipt, context=self.context, links=self.links, wording=wording)
        run = receipt.dagster_run_id
        # One version per part, keyed by the run: a retried step re-enqueues the same keys (no-ops).
        posts = [("receipt", f"{run}.{i}", m) for i, m in enumerate(parts, 1)]
        rows = self._post_to_threads(incident, posts, None, "owners")
        if resolution is not None:
            rows += self.post_resolution(
                incident, resolution, verification=receipt_checks(receipt), run_id=run
            )
        return rows

    def post_proposal(self, incident: Incident, plan: RemediationPlan, *, run_id: str) -> list[OutboxMessage]:
        """The proposed fix with its Approve and Reject buttons, in the owners' threads; ``run_id`` is the
        remediation run held for approval (the buttons name it). Once per plan and run."""
        parts = proposal_messages(incident, plan, run_id=run_id, context=self.context, links=self.links)
        posts = [("proposal", f"{plan.plan_id}.{run_id}.{i}", m) for i, m in enumerate(parts, 1)]
        return self._post_to_threads(incident, posts, None, "owners")

    # -- delivery --------------------------------------------------------------------------------

    def flush_pending(
        self, incident_id: str | None = None, *, force: bool = False, time_budget_seconds: float | None = None
    ) -> FlushResult:
        """Delivers what is pending, in thread order; called by the outbox sensor and after each enqueue.

        ``force`` ignores the backoff. A Slack outage (no answer, 5xx, 429 after the client's retries)
        ends the flush at the first failure: the rest stays pending for the next one.
        """
        return self.delivery.flush(incident_id, force=force, time_budget_seconds=time_budget_seconds)

    def messages(self, incident_id: str | None = None) -> list[OutboxMessage]:
        with self.outbox.connect("slack.read") as cur:
            return self.outbox.messages(cur, incident_id=incident_id)

    def pending(self, incident_id: str | None = None) -> list[OutboxMessage]:
        with self.outbox.connect("slack.read") as cur:
            return self.outbox.messages(cur, incident_id=incident_id, unsent_only=True)

    def _times(self) -> Iterator[datetime]:
        """Distinct, increasing enqueue times from now: the flush delivers in this order."""
        start = self._now()
        return (start + timedelta(microseconds=i) for i in range(1_000_000))

    def _post_to_threads(
        self,
        incident: Incident,
        posts: Sequence[tuple[str, str | None, SlackMessage]],
        channels: Sequence[str] | None,
        audience: Audience,
    ) -> list[OutboxMessage]:
        """Enqueues ``(kind, version, message)`` in order in each target thread, then delivers."""
        iid = incident.incident_id
        keys: list[str] = []
        with self.outbox.connect("slack.enqueue") as cur:
            if channels is not None:
                targets = list(channels)
            else:
                kinds = ("incident",) if audience == "owners" else None
                targets = self.outbox.thread_channels(cur, iid, root_kinds=kinds)
            if not targets:
                self.log.warning("incident %s: no Slack thread to post %s to; nothing sent", iid, posts[0][0])
                return []
            times = self._times()
            for channel in targets:
                for kind, version, msg in posts:
                    payload = msg.payload()
                    key, _ = self.outbox.enqueue(
                        cur,
                        iid,
                        channel,
                        kind,
                        version or content_version(kind, payload),
                        payload,
                        next(times),
                    )
                    keys.append(key)
        self.flush_pending(incident_id=iid)
        return [m for m in self.messages(iid) if m.message_key in keys]
