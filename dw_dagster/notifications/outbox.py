"""The Slack outbox: durable message state in the warehouse's ops schema.

Two tables (``dw_dagster/warehouse/ops.py``):

- ``SLACK_OUTBOX``: one row per message. ``MESSAGE_KEY`` is ``incident|channel|kind|version`` (version =
  a hash of the content), so enqueueing the same message again is a no-op (MERGE on the key). A row is
  ``pending`` until Slack answers with its ``ts``, then ``sent``; while one process posts it, ``sending``
  with a claim id and a lease. Attempts, the last outcome and the last error are kept on the row.
- ``SLACK_THREADS``: one row per incident and channel naming the message that is the thread's root. The
  first message enqueued for a channel wins the MERGE; every other message in that channel is a reply to
  the root's recorded ``ts``.

Claims are compare-and-set on ``(STATUS, ATTEMPTS)``: of two processes flushing at once, one posts. A
state change the warehouse refuses because others hold the row (Snowflake queues concurrent DML on a table
lock and aborts a statement once too many wait; the local DuckDB refuses a concurrent update as a conflict)
is tried again; if it still fails, :class:`OutboxBusy` says so and the row is as it was.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from dw_dagster.sql import placeholders
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

COLUMNS = (
    "MESSAGE_KEY, INCIDENT_ID, CHANNEL, KIND, VERSION, THREAD_KEY, PAYLOAD, STATUS, ATTEMPTS, LAST_OUTCOME,"
    " LAST_ERROR, CREATED_AT, NEXT_ATTEMPT_AT, CLAIM_ID, CLAIMED_AT, SENT_AT, SLACK_CHANNEL_ID, SLACK_TS,"
    " THREAD_TS"
)


# A state change is tried this many times, waiting a little longer each time (with jitter, so that the
# processes that collided do not collide again).
STATE_CHANGE_TRIES = 4
STATE_CHANGE_WAIT_SECONDS = 0.1


class OutboxBusy(RuntimeError):
    """A state change of a message failed on every try; the row is unchanged."""


def thread_key(incident_id: str, channel: str) -> str:
    return f"{incident_id}|{channel}"


def message_key(incident_id: str, channel: str, kind: str, version: str) -> str:
    return f"{incident_id}|{channel}|{kind}|{version}"


class OutboxMessage(BaseModel):
    message_key: str
    incident_id: str
    channel: str
    kind: str
    version: str
    thread_key: str
    payload: dict[str, Any]
    status: str
    """``pending``, ``sending`` (claimed by a process) or ``sent``."""
    attempts: int
    last_outcome: str | None = None
    """``sent``; ``failed`` (Slack answered with an error); ``unknown`` (no answer: it may have been
    posted)."""
    last_error: str | None = None
    created_at: datetime
    next_attempt_at: datetime | None = None
    claim_id: str | None = None
    claimed_at: datetime | None = None
    sent_at: datetime | None = None
    slack_channel_id: str | None = None
    slack_ts: str | None = None
    thread_ts: str | None = None
    root_key: str | None = None
    """The thread's root message key (from ``SLACK_THREADS``)."""

    @property
    def is_root(self) -> bool:
        return self.root_key is None or self.root_key == self.message_key

    @classmethod
    def from_row(cls, row: tuple) -> OutboxMessage:
        names = [c.strip().lower() for c in COLUMNS.split(",")] + ["root_key"]
        data = dict(zip(names, row, strict=True))
        data["payload"] = json.loads(data["payload"] or "{}")
        return cls(**data)


class SlackOutbox:
    def __init__(self, warehouse: WarehouseResource, ops: OpsSchema, run_id: str | None = None):
        self.warehouse = warehouse
        self.ops = ops
        self.run_id = run_id

    @contextmanager
    def connect(self, purpose: str) -> Iterator[Any]:
        with self.ops.connect(
            self.warehouse, purpose, job="notifications", dagster_run_id=self.run_id
        ) as conn:
            yield conn.cursor()

    @property
    def _outbox(self) -> str:
        return self.ops.table("SLACK_OUTBOX")

    @property
    def _threads(self) -> str:
        return self.ops.table("SLACK_THREADS")

    # -- enqueue ---------------------------------------------------------------------------------

    def thread_root(self, cur: Any, key: str) -> str | None:
        cur.execute(f"SELECT ROOT_KEY FROM {self._threads} WHERE THREAD_KEY = ?", (key,))
        row = cur.fetchone()
        return row[0] if row else None

    def exists(self, cur: Any, key: str) -> bool:
        cur.execute(f"SELECT 1 FROM {self._outbox} WHERE MESSAGE_KEY = ?", (key,))
        return cur.fetchone() is not None

    def enqueue(
        self,
        cur: Any,
        incident_id: str,
        channel: str,
        kind: str,
        version: str,
        payload: dict[str, Any],
        now: datetime,
    ) -> tuple[str, bool]:
        """Adds the message once (by key) and makes it its thread's root if the thread has none yet.

        Returns the message key and whether the message is new.
        """
        key = message_key(incident_id, channel, kind, version)
        tkey = thread_key(incident_id, channel)
        cur.execute(
            f"MERGE INTO {self._outbox} t USING (SELECT ? AS MESSAGE_KEY) s ON t.MESSAGE_KEY = s.MESSAGE_KEY"
            " WHEN NOT MATCHED THEN INSERT (MESSAGE_KEY, INCIDENT_ID, CHANNEL, KIND, VERSION, THREAD_KEY,"
            " PAYLOAD, STATUS, ATTEMPTS, CREATED_AT) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?)",
            (key, key, incident_id, channel, kind, version, tkey, json.dumps(payload), now),
        )
        new = cur.rowcount > 0
        self.claim_thread(cur, tkey, incident_id, channel, key, now)
        return key, new

    def claim_thread(
        self, cur: Any, tkey: str, incident_id: str, channel: str, root_key: str, now: datetime
    ) -> None:
        cur.execute(
            f"MERGE INTO {self._threads} t USING (SELECT ? AS THREAD_KEY) s ON t.THREAD_KEY = s.THREAD_KEY"
            " WHEN NOT MATCHED THEN INSERT (THREAD_KEY, INCIDENT_ID, CHANNEL, ROOT_KEY, CREATED_AT)"
            " VALUES (?, ?, ?, ?, ?)",
            (tkey, tkey, incident_id, channel, root_key, now),
        )

    # -- read ------------------------------------------------------------------------------------

    def messages(
        self, cur: Any, incident_id: str | None = None, unsent_only: bool = False, key: str | None = None
    ) -> list[OutboxMessage]:
        where, args = ["1 = 1"], []
        if incident_id:
            where.append("o.INCIDENT_ID = ?")
            args.append(incident_id)
        if unsent_only:
            where.append("o.STATUS <> 'sent'")
        if key:
            where.append("o.MESSAGE_KEY = ?")
            args.append(key)
        cols = ", ".join(f"o.{c.strip()}" for c in COLUMNS.split(","))
        cur.execute(
            f"SELECT {cols}, t.ROOT_KEY FROM {self._outbox} o LEFT JOIN {self._threads} t"
            f" ON t.THREAD_KEY = o.THREAD_KEY WHERE {' AND '.join(where)}"
            " ORDER BY o.CREATED_AT, o.MESSAGE_KEY",
            tuple(args),
        )
        return [OutboxMessage.from_row(r) for r in cur.fetchall()]

    def get(self, cur: Any, key: str) -> OutboxMessage | None:
        rows = self.messages(cur, key=key)
        return rows[0] if rows else None

    def thread_channels(
        self, cur: Any, incident_id: str, root_kinds: Sequence[str] | None = None
    ) -> list[str]:
        """Channels with a thread for the incident, optionally only those whose root is of ``root_kinds``."""
        sql = (
            f"SELECT t.CHANNEL FROM {self._threads} t JOIN {self._outbox} o ON o.MESSAGE_KEY = t.ROOT_KEY"
            " WHERE t.INCIDENT_ID = ?"
        )
        args: list[Any] = [incident_id]
        if root_kinds:
            sql += f" AND o.KIND IN ({placeholders(len(root_kinds))})"
            args += list(root_kinds)
        cur.execute(sql + " ORDER BY t.CREATED_AT, t.CHANNEL", tuple(args))
        return [r[0] for r in cur.fetchall()]

    def known_channel_id(self, cur: Any, channel: str) -> str | None:
        """The Slack channel id an earlier post to ``channel`` returned, if any."""
        cur.execute(
            f"SELECT SLACK_CHANNEL_ID FROM {self._outbox}"
            " WHERE CHANNEL = ? AND SLACK_CHANNEL_ID IS NOT NULL LIMIT 1",
            (channel,),
        )
        row = cur.fetchone()
        return row[0] if row else None

    # -- state transitions -----------------------------------------------------------------------

    def _change(self, cur: Any, key: str, sql: str, params: tuple) -> bool:
        """Runs one compare-and-set ``UPDATE`` of the row ``key``; True if it changed the row. A statement
        the warehouse refuses is tried again (it changed nothing), then :class:`OutboxBusy`."""
        from snowflake.connector.errors import ProgrammingError  # imported with a connection, not at load

        attempt = 1
        while True:
            try:
                cur.execute(sql, params)
                return cur.rowcount == 1
            except ProgrammingError as e:
                if attempt == STATE_CHANGE_TRIES:
                    raise OutboxBusy(
                        f"outbox message {key}: the warehouse refused {attempt} times: {e}"
                    ) from e
            time.sleep(STATE_CHANGE_WAIT_SECONDS * 2 ** (attempt - 1) * (1 + random.random()))
            attempt += 1

    def claim(self, cur: Any, msg: OutboxMessage, claim_id: str, now: datetime) -> bool:
        """Takes the message for one attempt if nobody changed it since it was read (compare-and-set)."""
        return self._change(
            cur,
            msg.message_key,
            f"UPDATE {self._outbox} SET STATUS = 'sending', CLAIM_ID = ?, CLAIMED_AT = ?,"
            " ATTEMPTS = ATTEMPTS + 1 WHERE MESSAGE_KEY = ? AND STATUS = ? AND ATTEMPTS = ?",
            (claim_id, now, msg.message_key, msg.status, msg.attempts),
        )

    def mark_sent(
        self,
        cur: Any,
        key: str,
        claim_id: str,
        channel_id: str,
        ts: str,
        thread_ts: str | None,
        now: datetime,
    ) -> bool:
        return self._change(
            cur,
            key,
            f"UPDATE {self._outbox} SET STATUS = 'sent', LAST_OUTCOME = 'sent', LAST_ERROR = NULL,"
            " SENT_AT = ?, SLACK_CHANNEL_ID = ?, SLACK_TS = ?, THREAD_TS = ?, NEXT_ATTEMPT_AT = NULL"
            " WHERE MESSAGE_KEY = ? AND CLAIM_ID = ?",
            (now, channel_id, ts, thread_ts, key, claim_id),
        )

    def mark_failed(
        self, cur: Any, key: str, claim_id: str, outcome: str, error: str, next_attempt_at: datetime
    ) -> bool:
        return self._change(
            cur,
            key,
            f"UPDATE {self._outbox} SET STATUS = 'pending', LAST_OUTCOME = ?, LAST_ERROR = ?,"
            " NEXT_ATTEMPT_AT = ?, CLAIM_ID = NULL WHERE MESSAGE_KEY = ? AND CLAIM_ID = ?",
            (outcome, error, next_attempt_at, key, claim_id),
        )
