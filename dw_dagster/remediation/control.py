"""The org-wide stop: one durable switch that halts every autonomous dispatch at once.

``dw-dagster stop`` appends an event to ``CONTROL_EVENTS`` in the ops schema; ``dw-dagster resume`` appends
another. Each event is signed by the person who gives it (their approver key; ``--as`` alone in the local
world only), a member of the governing team (below), and chained: it carries a sequence number the code
assigns (one more than the event in force) and the hash of the event in force when it was given. The event
in force is the last of that chain, never the row with the latest timestamp (a timestamp is the writer's: a
row dated 2099 would otherwise lift every later stop). A row that is unsigned, signed by nobody governing,
or not the next link of the chain is ignored and reported (:attr:`ControlState.ignored`); two people giving
an event at once both reach for the same number: the stop wins the link, a stop that lost gives its event
again after it, and a resume that lost to a stop says so and is not applied. So ``dw-dagster stop`` always
takes effect.

The governing team is every team a domain of the context file escalates to (``escalation_team``): the
people automation hands over to when it needs a person. A context file whose domains name none is governed
by every team.

Every dispatch point asks at the moment it would act (the hold notice as it is routed and as it is posted,
the proposals sensor, each remediation step that changes something), so a stop takes effect on the next
action, not the next deploy. The rows are never updated: they are the record of who stopped what, when and
why, and each is on the audit trail (:mod:`~dw_dagster.remediation.audit`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from dw_dagster.context.models import ContextFile, Person
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_notifier import IncidentNotifier
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.notifications.text import counted
from dw_dagster.records.incidents import Incident
from dw_dagster.records.remediation import RemediationPlan
from dw_dagster.remediation.audit import CONTROL, AuditTrail, Record, TrailSigner, utc
from dw_dagster.remediation.identity import IdentityError, Proof, Signer, verify_proof
from dw_dagster.remediation.signing import digest
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

GENESIS = "genesis"
_PROOF: TypeAdapter[Any] = TypeAdapter(Proof)
_TRIES = 5
_COLUMNS = "SEQ, PREV_HASH, ACTION, ACTOR, EMAIL, REASON, SIGNED_AT, PROOF, EVENT_AT"


class ControlError(Exception):
    """A stop or resume that could not be given (who gives it, or the chain kept moving)."""


class ControlEvent(BaseModel):
    """A stop or resume as signed: what its signature covers."""

    seq: int
    prev: str
    action: Literal["stop", "resume"]
    actor: str
    email: str
    reason: str | None = None
    at: str

    def record(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def hash(self) -> str:
        return digest(self.record())

    @property
    def key(self) -> str:
        """Its key on the audit trail."""
        return f"control|{self.seq}|{self.hash}"


class ControlState(BaseModel):
    stopped: bool
    actor: str | None = None
    reason: str | None = None
    at: datetime | None = None
    seq: int = 0
    """The sequence number of the event in force (0: none given yet)."""
    head: str = GENESIS
    """The hash of the event in force: the next event names it."""
    ignored: list[str] = []
    """Rows that are not events of the chain (unsigned, signed by nobody governing, out of order), and why."""

    def describe(self) -> str:
        if not self.stopped:
            text = "autonomous dispatch is running" + (
                f" (resumed by {self.actor} at {self.at:%Y-%m-%d %H:%M} UTC)" if self.at else ""
            )
        else:
            at = f" at {self.at:%Y-%m-%d %H:%M} UTC" if self.at else ""
            text = f"autonomous dispatch is STOPPED by {self.actor}{at}: {self.reason or 'no reason given'}"
        if self.ignored:
            shown = "; ".join(self.ignored[:3]) + (
                f"; and {len(self.ignored) - 3} more" if len(self.ignored) > 3 else ""
            )
            text += f" [ignored {counted(len(self.ignored), 'control row')}: {shown}]"
        return text


def governing_teams(context: ContextFile) -> list[str]:
    """The teams that may stop and resume: those the domains escalate to; every team when none is named."""
    named = list(dict.fromkeys(d.escalation_team for d in context.domains.values() if d.escalation_team))
    return named or list(context.teams)


def _governs(context: ContextFile, person: Person) -> bool:
    return bool(set(context.teams_of(person)) & set(governing_teams(context)))


def _row_event(row: tuple[Any, ...]) -> tuple[ControlEvent | None, str | None]:
    """The signed event of a row (and its proof's JSON), or None when the row carries none."""
    seq, prev, action, actor, email, reason, signed_at, proof, _ = row
    if seq is None or not prev or not email or not signed_at or not proof:
        return None, None
    try:
        event = ControlEvent(
            seq=int(seq), prev=prev, action=action, actor=actor, email=email, reason=reason, at=signed_at
        )
    except ValidationError:
        return None, None
    return event, proof


def _describe_row(row: tuple[Any, ...]) -> str:
    at = row[8]
    when = f" dated {at:%Y-%m-%d %H:%M}" if isinstance(at, datetime) else ""
    return f"{row[2]} by {row[3]!r}{when}"


class OrgControl:
    def __init__(self, warehouse: WarehouseResource, ops: OpsSchema, context: ContextFile | None):
        self.warehouse = warehouse
        self.ops = ops
        self.context = context

    def _verify(self, event: ControlEvent, proof_json: str) -> str | None:
        """Why the event does not count (None when it does)."""
        if self.context is None:
            return "no context file to verify it with"
        try:
            proof = _PROOF.validate_python(json.loads(proof_json))
            person = verify_proof(event.record(), proof, self.context, action=f"dw_{event.action}")
        except (ValidationError, ValueError, IdentityError) as e:
            return f"its signature does not verify ({e})"
        if not _governs(self.context, person):
            return f"{person.name} is not a member of the governing team ({', '.join(governing_teams(self.context))})"
        return None

    def state(self) -> ControlState:
        with self.ops.connect(self.warehouse, "control.read", job="control") as conn:
            cur = conn.cursor()
            cur.execute(f"SELECT {_COLUMNS} FROM {self.ops.table('CONTROL_EVENTS')}")
            rows = cur.fetchall()
        ignored: list[str] = []
        valid: dict[int, list[ControlEvent]] = {}
        seen: set[str] = set()
        for row in rows:
            event, proof = _row_event(row)
            if event is None or proof is None:
                ignored.append(f"{_describe_row(row)}: unsigned")
                continue
            if event.hash in seen:
                continue  # the same signed event twice is one event
            why = self._verify(event, proof)
            if why:
                ignored.append(f"{_describe_row(row)}: {why}")
                continue
            seen.add(event.hash)
            valid.setdefault(event.seq, []).append(event)
        chain: list[ControlEvent] = []
        head = GENESIS
        while True:
            nxt = [e for e in valid.get(len(chain) + 1, []) if e.prev == head]
            if not nxt:
                break
            # Two events given at once on the same link: the stop wins, then the lower hash (any process
            # reading the same rows picks the same one).
            chosen = min(nxt, key=lambda e: (e.action != "stop", e.hash))
            chain.append(chosen)
            head = chosen.hash
        on_chain = {e.hash for e in chain}
        for events in valid.values():
            for e in events:
                if e.hash not in on_chain:
                    ignored.append(
                        f"{e.action} by {e.actor!r} (event {e.seq}): out of order, not after the event in force"
                    )
        if not chain:
            return ControlState(stopped=False, ignored=ignored)
        last = chain[-1]
        return ControlState(
            stopped=last.action == "stop",
            actor=last.actor,
            reason=last.reason,
            at=datetime.fromisoformat(last.at),
            seq=last.seq,
            head=last.hash,
            ignored=ignored,
        )

    def records(self) -> dict[str, Record]:
        """Every control row as the audit trail names it; a row with no signed event is keyed by what it says
        (the trail never holds one)."""
        with self.ops.connect(self.warehouse, "control.read", job="control") as conn:
            cur = conn.cursor()
            cur.execute(f"SELECT {_COLUMNS} FROM {self.ops.table('CONTROL_EVENTS')}")
            rows = cur.fetchall()
        out: dict[str, Record] = {}
        for row in rows:
            event, _ = _row_event(row)
            if event is not None:
                out[event.key] = Record(CONTROL, digest(event.record()), utc(row[8]))
            else:
                out[f"control|unsigned|{_describe_row(row)}"] = Record(CONTROL, "", utc(row[8]))
        return out

    def dispatch_allowed(self) -> bool:
        return not self.state().stopped

    def set(
        self, action: Literal["stop", "resume"], signer: Signer, reason: str | None = None
    ) -> ControlState:
        """Gives ``action`` as ``signer``'s person, signed and chained after the event in force; returns the
        state after it. Retried after another event that took the same link: it always takes effect."""
        if self.context is None:
            raise ControlError("no context file: nobody may stop or resume")
        person = signer.person
        if not _governs(self.context, person):
            raise ControlError(
                f"{person.name} may not {action}: the org-wide stop is given by a member of the governing team "
                f"({', '.join(governing_teams(self.context))}: the teams the domains escalate to)"
            )
        trail = AuditTrail(self.warehouse, self.ops, TrailSigner.of_process(signer.key, person.email))
        for _ in range(_TRIES):
            state = self.state()
            event = ControlEvent(
                seq=state.seq + 1,
                prev=state.head,
                action=action,
                actor=person.name,
                email=person.email,
                reason=reason,
                at=datetime.now(UTC).isoformat(),
            )
            proof = signer.prove(event.record())
            with self.ops.connect(self.warehouse, f"control.{action}", job="control") as conn:
                conn.cursor().execute(
                    f"INSERT INTO {self.ops.table('CONTROL_EVENTS')} (EVENT_AT, ACTION, ACTOR, REASON, SEQ,"
                    " PREV_HASH, EMAIL, SIGNED_AT, PROOF) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        datetime.now(UTC),
                        action,
                        person.name,
                        reason,
                        event.seq,
                        event.prev,
                        person.email,
                        event.at,
                        json.dumps(proof.model_dump()),
                    ),
                )
            trail.append(CONTROL, CONTROL, event.key, event.record())
            after = self.state()
            if after.head == event.hash or action == "resume" and not after.stopped:
                return after
            if action == "resume":
                # A stop given at the same moment wins the link: a resume is never applied over it unasked.
                raise ControlError(
                    f"not resumed: {after.describe()} was given meanwhile; resume again if you still mean to"
                )
        raise ControlError(
            f"{action}: another event kept taking the next link of the chain; nothing in force changed by this command"
        )


def gated_notifier(
    slack: SlackNotifier, store: IncidentStore, context: ContextFile | None
) -> IncidentNotifier:
    """The incident notifier whose autonomous messages (the hold notice) wait while the org-wide stop is in
    force: every notifier the code location builds is this one."""
    control = OrgControl(store.warehouse, store.ops, context)
    return IncidentNotifier(
        slack, store, context=context, autonomous_dispatch_allowed=control.dispatch_allowed
    )


def owner_channels(notifier: IncidentNotifier, incident_id: str) -> list[str]:
    """The channels of the incident's owner threads (those its incident message started)."""
    return list(dict.fromkeys(m.channel for m in notifier.messages(incident_id) if m.kind == "incident"))


def escalate(
    notifier: IncidentNotifier,
    incident: Incident,
    context_file: ContextFile,
    plan: RemediationPlan,
    text: str,
    run_id: str | None = None,
) -> None:
    """Tell a person: the owners' threads, and the domain's escalation team's channel; ``run_id`` is the
    run it is about."""
    domain = context_file.domains.get(plan.domain or "")
    channels = None
    if domain and domain.escalation_team:
        owners = owner_channels(notifier, incident.incident_id)
        channels = list(dict.fromkeys([*owners, context_file.teams[domain.escalation_team].slack_channel]))
    notifier.post_update(
        incident,
        f":rotating_light: Needs a person: {text}",
        kind="escalation",
        channels=channels,
        run_id=run_id,
    )
