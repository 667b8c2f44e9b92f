"""dw-dagster's own tables, in an ops schema of the warehouse.

The warehouse is the one store every process can reach (sensors in the daemon, checks in run workers on
other machines, the CLI), and it survives restarts of all of them. Rows are only appended or merged on a
key, so a re-tick or a retried step never duplicates a record.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dw_dagster.coalesce.sql import quote_identifier as quote

if TYPE_CHECKING:
    from dw_dagster.warehouse.resources import WarehouseResource

# Warehouses and schemas whose tables this process has already created: DDL once, not per query.
_ENSURED: set[tuple[Any, ...]] = set()

TABLES: dict[str, str] = {
    # One row per recorded total per business date; re-recording the same date replaces the value.
    "METRIC_HISTORY": """
        METRIC VARCHAR NOT NULL,
        BUSINESS_DATE DATE NOT NULL,
        VALUE DOUBLE,
        GROUPS VARCHAR,
        RECORDED_AT TIMESTAMP_TZ NOT NULL,
        DAGSTER_RUN_ID VARCHAR,
        COALESCE_RUN_ID VARCHAR,
        FLAGGED BOOLEAN NOT NULL DEFAULT FALSE
    """,
    # Row counts per monitored table per business date, for the volume baseline.
    "VOLUME_HISTORY": """
        ASSET_KEY VARCHAR NOT NULL,
        BUSINESS_DATE DATE NOT NULL,
        ROW_COUNT DOUBLE,
        SOURCE VARCHAR,
        RECORDED_AT TIMESTAMP_TZ NOT NULL,
        FLAGGED BOOLEAN NOT NULL DEFAULT FALSE
    """,
    # Accepted baseline levels (dw_dagster/checks/history.py): from FROM_DATE on, a series is judged at its
    # new level; one row per series and date, written by a check (explained) or an owner (accepted).
    "BASELINE_LEVELS": """
        SERIES VARCHAR NOT NULL,
        FROM_DATE DATE NOT NULL,
        KIND VARCHAR NOT NULL,
        REASON VARCHAR NOT NULL,
        ACCEPTED_BY VARCHAR,
        RECORDED_AT TIMESTAMP_TZ NOT NULL
    """,
    "INCIDENTS": """
        INCIDENT_ID VARCHAR NOT NULL,
        CAUSE_KEY VARCHAR NOT NULL,
        STATUS VARCHAR NOT NULL,
        BUSINESS_DATE DATE,
        TITLE VARCHAR,
        SEVERITY VARCHAR,
        OPENED_AT TIMESTAMP_TZ NOT NULL,
        UPDATED_AT TIMESTAMP_TZ NOT NULL,
        DETAIL VARCHAR
    """,
    # Append-only: every finding, diagnosis, message, approval and receipt of an incident.
    "INCIDENT_EVENTS": """
        INCIDENT_ID VARCHAR NOT NULL,
        EVENT_KEY VARCHAR NOT NULL,
        KIND VARCHAR NOT NULL,
        EVENT_AT TIMESTAMP_TZ NOT NULL,
        DETAIL VARCHAR
    """,
    # Slack outbox (dw_dagster/notifications/outbox.py): one row per message, keyed by incident, channel,
    # kind and content version; pending until Slack returns its ts, so an outage delays and never loses.
    "SLACK_OUTBOX": """
        MESSAGE_KEY VARCHAR NOT NULL,
        INCIDENT_ID VARCHAR NOT NULL,
        CHANNEL VARCHAR NOT NULL,
        KIND VARCHAR NOT NULL,
        VERSION VARCHAR NOT NULL,
        THREAD_KEY VARCHAR NOT NULL,
        PAYLOAD VARCHAR NOT NULL,
        STATUS VARCHAR NOT NULL,
        ATTEMPTS INTEGER NOT NULL DEFAULT 0,
        LAST_OUTCOME VARCHAR,
        LAST_ERROR VARCHAR,
        CREATED_AT TIMESTAMP_TZ NOT NULL,
        NEXT_ATTEMPT_AT TIMESTAMP_TZ,
        CLAIM_ID VARCHAR,
        CLAIMED_AT TIMESTAMP_TZ,
        SENT_AT TIMESTAMP_TZ,
        SLACK_CHANNEL_ID VARCHAR,
        SLACK_TS VARCHAR,
        THREAD_TS VARCHAR
    """,
    # One Slack thread per incident per channel: which outbox message is its root (first MERGE wins).
    "SLACK_THREADS": """
        THREAD_KEY VARCHAR NOT NULL,
        INCIDENT_ID VARCHAR NOT NULL,
        CHANNEL VARCHAR NOT NULL,
        ROOT_KEY VARCHAR NOT NULL,
        CREATED_AT TIMESTAMP_TZ NOT NULL
    """,
    # Append-only: each org-wide stop and resume of autonomous dispatch; the latest row is in force.
    "CONTROL_EVENTS": """
        EVENT_AT TIMESTAMP_TZ NOT NULL,
        ACTION VARCHAR NOT NULL,
        ACTOR VARCHAR NOT NULL,
        REASON VARCHAR
    """,
}


@dataclass(frozen=True)
class OpsSchema:
    database: str
    schema: str = "DW_OPS"

    def table(self, name: str) -> str:
        return f"{quote(self.database)}.{quote(self.schema)}.{quote(name)}"

    def ensure(self, conn: Any) -> None:
        cur = conn.cursor()
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.database)}.{quote(self.schema)}")
        for name, columns in TABLES.items():
            cur.execute(f"CREATE TABLE IF NOT EXISTS {self.table(name)} ({columns})")

    @contextmanager
    def connect(self, warehouse: WarehouseResource, purpose: str, **tag_fields: Any) -> Iterator[Any]:
        """A tagged connection whose current schema is this one, with dw-dagster's tables in place."""
        args = warehouse._resolved_connection_args()
        where = (args.get("account"), args.get("host"), args.get("port"), self.database, self.schema)
        with warehouse.tagged_connection(purpose, schema=self.schema, **tag_fields) as conn:
            if where not in _ENSURED:
                self.ensure(conn)
                _ENSURED.add(where)
            yield conn
