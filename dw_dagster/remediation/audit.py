"""The audit trail: every approval, refusal, change, receipt and control event, chained and signed.

The records themselves are rows in the ops schema (``INCIDENT_EVENTS``, ``CONTROL_EVENTS``), which anyone
with write access could edit. Each one is also appended to ``AUDIT_TRAIL`` as an entry holding the digest of
the record, the hash of the entry before it and a signature over both: the code location's HMAC
(``DW_SIGNING_KEY``) when the process holds it, else the Ed25519 signature of the person acting (their
approver key). An edited or deleted record no longer matches its entry, an entry edited or removed breaks
the chain after it, and a record written straight into the table has no entry: ``dw-dagster audit verify``
walks the chain and names the first that does not verify.

One entry kind is accepted unsigned: the refusal of an attempt by someone who could not prove who they are
(a command run without an approver key, in a shell without the code location's key). It proves nothing, and
it is still a link of the chain: the next signed entry covers it.

Entries are appended with a MERGE on the sequence number: two writers reaching for the same number append
one entry; the other reads the new end and tries again.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.text import counted
from dw_dagster.remediation.signing import Seal, canonical, digest
from dw_dagster.sql import placeholders
from dw_dagster.warehouse.connections import Connections
from dw_dagster.warehouse.ops import OpsSchema

AUDITED = frozenset(
    {
        "proposal",
        "submission",
        "binding",
        "approval",
        "decision",
        "refused",
        "applying",
        "change",
        "rerun",
        "undo",
        "receipt",
        "retryable",
    }
)
"""The incident events that go on the trail: what was proposed, submitted, approved, refused, changed and
undone, and the receipts."""
CONTROL = "control"
"""The subject of the org-wide stop's events."""
GENESIS = "genesis"
CODE_LOCATION = "code-location"
UNPROVEN = "unproven"
_APPEND_TRIES = 20


class AuditError(Exception):
    """The trail could not be appended to."""


def record_digest(detail: Mapping[str, Any]) -> str:
    """The digest of a record as it reads back from the warehouse (JSON text, as the store writes it)."""
    return digest(json.loads(json.dumps(dict(detail), default=str)))


@dataclass(frozen=True)
class TrailSigner:
    """How this process signs the entries it appends: the code location's seal, else a person's key."""

    seal: Seal | None = None
    person_email: str | None = None
    key: Ed25519PrivateKey | None = None

    @classmethod
    def of_process(cls, key: Ed25519PrivateKey | None = None, email: str | None = None) -> TrailSigner:
        """The code location's seal when this process holds ``DW_SIGNING_KEY``; else the person's key."""
        seal = Seal.optional()
        if seal is not None:
            return cls(seal=seal)
        return cls(person_email=email, key=key) if key is not None and email else cls()

    def sign(self, content: Mapping[str, Any]) -> tuple[str, str]:
        """``(signer, signature)`` of an entry; an empty signature when nothing here can sign."""
        if self.seal is not None:
            return CODE_LOCATION, self.seal.sign("audit", content)
        if self.key is not None and self.person_email:
            return f"person:{self.person_email}", base64.b64encode(self.key.sign(canonical(content))).decode()
        return UNPROVEN, ""

    @property
    def signer(self) -> str:
        if self.seal is not None:
            return CODE_LOCATION
        return f"person:{self.person_email}" if self.key is not None and self.person_email else UNPROVEN


@dataclass(frozen=True)
class Entry:
    seq: int
    prev: str
    subject: str
    kind: str
    event_key: str
    event_digest: str
    at: str
    signer: str
    signature: str
    entry_hash: str

    def content(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "prev": self.prev,
            "subject": self.subject,
            "kind": self.kind,
            "event_key": self.event_key,
            "event_digest": self.event_digest,
            "at": self.at,
            "signer": self.signer,
        }

    def names(self) -> str:
        return f"entry {self.seq} ({self.kind} {self.event_key!r} of {self.subject})"


class AuditTrail:
    def __init__(self, warehouse: Connections, ops: OpsSchema, signer: TrailSigner | None = None):
        self.warehouse = warehouse
        self.ops = ops
        self.signer = signer or TrailSigner.of_process()

    def _connect(self, purpose: str):
        return self.ops.connect(self.warehouse, purpose, job="audit")

    def append(self, subject: str, kind: str, event_key: str, detail: Mapping[str, Any]) -> Entry:
        """Appends the record ``(subject, event_key)`` of ``kind`` after the trail's last entry."""
        table = self.ops.table("AUDIT_TRAIL")
        event_digest = record_digest(detail)
        with self._connect(f"audit.{kind}") as conn:
            cur = conn.cursor()
            for _ in range(_APPEND_TRIES):
                cur.execute(f"SELECT SEQ, ENTRY_HASH FROM {table} ORDER BY SEQ DESC LIMIT 1")
                last = cur.fetchone()
                seq, prev = (int(last[0]) + 1, str(last[1])) if last else (1, GENESIS)
                at = datetime.now(UTC).isoformat()
                content = {
                    "seq": seq,
                    "prev": prev,
                    "subject": subject,
                    "kind": kind,
                    "event_key": event_key,
                    "event_digest": event_digest,
                    "at": at,
                    "signer": self.signer.signer,
                }
                signer, signature = self.signer.sign(content)
                entry = Entry(**content, signature=signature, entry_hash=digest(content))  # type: ignore[arg-type]
                cur.execute(
                    f"MERGE INTO {table} t USING (SELECT ? AS SEQ) s ON t.SEQ = s.SEQ WHEN NOT MATCHED THEN INSERT"
                    " (SEQ, PREV_HASH, SUBJECT, KIND, EVENT_KEY, EVENT_DIGEST, RECORDED_AT, SIGNER, SIGNATURE,"
                    " ENTRY_HASH) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        seq,
                        seq,
                        prev,
                        subject,
                        kind,
                        event_key,
                        event_digest,
                        at,
                        signer,
                        signature,
                        entry.entry_hash,
                    ),
                )
                if cur.rowcount > 0:
                    return entry
        raise AuditError(f"{table}: could not append after {_APPEND_TRIES} tries (other writers kept ahead)")

    def entries(self) -> list[Entry]:
        with self._connect("audit.read") as conn:
            cur = conn.cursor()
            cur.execute(
                "SELECT SEQ, PREV_HASH, SUBJECT, KIND, EVENT_KEY, EVENT_DIGEST, RECORDED_AT, SIGNER, SIGNATURE,"
                f" ENTRY_HASH FROM {self.ops.table('AUDIT_TRAIL')} ORDER BY SEQ"
            )
            return [
                Entry(int(r[0]), *(str(v) if v is not None else "" for v in r[1:])) for r in cur.fetchall()
            ]

    def _records(self) -> dict[tuple[str, str], Record]:
        """Every audited incident event, by ``(incident id, event_key)``."""
        kinds = sorted(AUDITED)
        with self._connect("audit.read") as conn:
            cur = conn.cursor()
            cur.execute(
                f"SELECT INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL FROM {self.ops.table('INCIDENT_EVENTS')}"
                f" WHERE KIND IN ({placeholders(len(kinds))})",
                tuple(kinds),
            )
            return {
                (incident_id, key): Record(kind, digest(json.loads(detail or "{}")), utc(at))
                for incident_id, key, kind, at, detail in cur.fetchall()
            }

    def verify(
        self, context: ContextFile | None, seal: Seal | None, control: Mapping[str, Record] | None = None
    ) -> AuditReport:
        """Walks the chain from its first entry: each link, hash and signature, and the record each entry
        names (``control``: the org-wide stop's records, by key); then the audited records no entry names."""
        records = self._records()
        records.update({(CONTROL, key): r for key, r in (control or {}).items()})
        return verify_entries(self.entries(), records, context, seal)


@dataclass(frozen=True)
class Record:
    """An audited record as the warehouse holds it."""

    kind: str
    digest: str
    at: datetime | None


def utc(at: Any) -> datetime | None:
    """A warehouse timestamp in UTC (None when there is none)."""
    if not isinstance(at, datetime):
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


@dataclass
class AuditReport:
    entries: int
    problems: list[str] = field(default_factory=list)
    """What does not verify, in the chain's order: the first is the first event that does not verify."""
    unverifiable: list[str] = field(default_factory=list)
    """What this process could not check (the code location's entries without its key): errored, not passed."""
    predating: int = 0
    """Records written before the trail's first entry (by a dw-dagster without the trail): not on it."""

    @property
    def verified(self) -> bool:
        return not self.problems and not self.unverifiable


def _person_key(context: ContextFile | None, email: str) -> Ed25519PublicKey | None:
    person = context.person(email) if context else None
    if person is None or not person.approver_key:
        return None
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(person.approver_key.removeprefix("ed25519:")))


def _signature_problem(entry: Entry, context: ContextFile | None, seal: Seal | None) -> str | None:
    """Why ``entry``'s signature does not verify; ``"unverifiable"`` when this process cannot tell."""
    content = entry.content()
    if entry.signer == CODE_LOCATION:
        if seal is None:
            return "unverifiable"
        return (
            None
            if seal.is_sealed("audit", {**content, "seal": entry.signature})
            else "its seal is not the code location's"
        )
    if entry.signer.startswith("person:"):
        email = entry.signer.removeprefix("person:")
        key = _person_key(context, email)
        if key is None:
            return f"signed as {email}, who holds no approver_key in the context file"
        try:
            key.verify(base64.b64decode(entry.signature), canonical(content))
        except (InvalidSignature, ValueError):
            return f"its signature is not {email}'s"
        return None
    if entry.signer == UNPROVEN and entry.kind == "refused" and not entry.signature:
        return None  # an unproven person's refused attempt: proves nothing, covered by the next link
    return f"unsigned ({entry.signer!r})"


def verify_entries(
    entries: Iterable[Entry],
    records: Mapping[tuple[str, str], Record],
    context: ContextFile | None,
    seal: Seal | None,
) -> AuditReport:
    entries = list(entries)
    report = AuditReport(entries=len(entries))
    began = datetime.fromisoformat(entries[0].at) if entries else None
    prev_hash, seen = GENESIS, set()
    for expected, entry in enumerate(entries, start=1):
        where = entry.names()
        if entry.seq != expected:
            report.problems.append(
                f"entry {expected} is missing from the trail (the next is {entry.seq}): deleted"
            )
            break
        if entry.prev != prev_hash:
            report.problems.append(f"{where}: does not follow entry {expected - 1}: the chain was altered")
        if digest(entry.content()) != entry.entry_hash:
            report.problems.append(f"{where}: its hash does not match its content: altered")
        problem = _signature_problem(entry, context, seal)
        if problem == "unverifiable":
            report.unverifiable.append(
                f"{where}: sealed by the code location (DW_SIGNING_KEY is not set here)"
            )
        elif problem:
            report.problems.append(f"{where}: {problem}")
        prev_hash = entry.entry_hash
        record = records.get((entry.subject, entry.event_key))
        seen.add((entry.subject, entry.event_key))
        if record is None:
            report.problems.append(f"{where}: the record is gone from the warehouse: deleted")
        elif (record.kind, record.digest) != (entry.kind, entry.event_digest):
            report.problems.append(f"{where}: the record in the warehouse is not the one appended: edited")
    for (subject, key), record in sorted(records.items()):
        if (subject, key) in seen:
            continue
        if began is not None and record.at is not None and record.at < began:
            # Written before this deployment kept a trail (its time is the writer's: counted, not trusted).
            report.predating += 1
            continue
        report.problems.append(
            f"{record.kind} {key!r} of {subject}: not on the audit trail: written outside dw-dagster"
        )
    if not entries and records:
        report.problems.insert(
            0,
            f"the audit trail is empty while {counted(len(records), 'audited record')} "
            f"{'exists' if len(records) == 1 else 'exist'}: deleted",
        )
    return report


class AuditedStore(IncidentStore):
    """The incident store whose audited events also go on the trail, signed by this process."""

    def __init__(self, store: IncidentStore, signer: TrailSigner | None = None):
        super().__init__(store.warehouse, store.ops, run_id=store.run_id, policy=store.policy)
        self.trail = AuditTrail(store.warehouse, store.ops, signer)

    def append_event(self, incident_id: str, kind: str, event_key: str, detail: dict[str, Any]) -> bool:
        new = super().append_event(incident_id, kind, event_key, detail)
        if new and kind in AUDITED:
            self.trail.append(incident_id, kind, event_key, detail)
        return new


def audited(store: IncidentStore, signer: TrailSigner | None = None) -> AuditedStore:
    """``store`` whose audited events go on the trail (itself when it already is such a store and no other
    signer is given)."""
    if isinstance(store, AuditedStore) and signer is None:
        return store
    return AuditedStore(store, signer)
