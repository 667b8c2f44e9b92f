"""dw-dagster's own tables, in an ops schema of the warehouse.

The warehouse is the one store every process can reach (sensors in the daemon, checks in run workers on
other machines, the CLI), and it survives restarts of all of them. Rows are only appended or merged on a
key, so a re-tick or a retried step never duplicates a record.

The schema is created and migrated by one command, ``dw-dagster ops migrate`` (``migrations.py``), never by
the steps that use it: a step sends no DDL. When a statement on the ops schema fails, the schema is
compared with ``TABLES``, and a missing or older schema is reported as such, naming the command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dw_dagster.config import DwConfigError
from dw_dagster.sql import quote_identifier as quote

if TYPE_CHECKING:
    from dw_dagster.warehouse.connections import Connections

MIGRATE_COMMAND = "dw-dagster ops migrate"

# The shape of the ops schema. A change here is applied by `dw-dagster ops migrate`: new tables are
# created and new columns added (with their defaults); bump migrations.SCHEMA_VERSION with it.
TABLES: dict[str, str] = {
    # One row per series per business date (dw_dagster/checks/history.py): a recorded total under its name,
    # a table's row count as volume:<asset>, a small table's keys as rows:<asset>, a node's credits as
    # cost:<asset>; re-recording the same date replaces the value.
    "METRIC_HISTORY": """
        METRIC VARCHAR NOT NULL,
        BUSINESS_DATE DATE NOT NULL,
        VALUE DOUBLE,
        GROUPS VARCHAR,
        RECORDED_AT TIMESTAMP_TZ NOT NULL,
        DAGSTER_RUN_ID VARCHAR,
        COALESCE_RUN_ID VARCHAR,
        FLAGGED BOOLEAN NOT NULL DEFAULT FALSE,
        SOURCE VARCHAR
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
    # Append-only: each org-wide stop and resume of autonomous dispatch (dw_dagster/remediation/control.py),
    # signed by the person who gave it (PROOF) and chained: the event in force is the last of the chain of
    # SEQ 1, 2, ... each naming the hash of the one before (PREV_HASH), never the latest EVENT_AT.
    "CONTROL_EVENTS": """
        EVENT_AT TIMESTAMP_TZ NOT NULL,
        ACTION VARCHAR NOT NULL,
        ACTOR VARCHAR NOT NULL,
        REASON VARCHAR,
        SEQ INTEGER,
        PREV_HASH VARCHAR,
        EMAIL VARCHAR,
        SIGNED_AT VARCHAR,
        PROOF VARCHAR
    """,
    # Append-only: the audit trail (dw_dagster/remediation/audit.py), one entry per audited record, each with
    # the hash of the one before and a signature; RECORDED_AT is the text the entry's hash covers.
    "AUDIT_TRAIL": """
        SEQ INTEGER NOT NULL,
        PREV_HASH VARCHAR NOT NULL,
        SUBJECT VARCHAR NOT NULL,
        KIND VARCHAR NOT NULL,
        EVENT_KEY VARCHAR NOT NULL,
        EVENT_DIGEST VARCHAR NOT NULL,
        RECORDED_AT VARCHAR NOT NULL,
        SIGNER VARCHAR NOT NULL,
        SIGNATURE VARCHAR NOT NULL,
        ENTRY_HASH VARCHAR NOT NULL
    """,
}


class OpsSchemaError(DwConfigError):
    """The ops schema is missing or older than this dw-dagster: `dw-dagster ops migrate` brings it up."""


def table_columns(columns: str) -> list[tuple[str, str]]:
    """``(name, definition)`` of each column in a ``TABLES`` entry."""
    out = []
    for line in columns.strip().splitlines():
        definition = line.strip().rstrip(",")
        if definition:
            out.append((definition.split()[0].upper(), definition))
    return out


def resolved_name(name: str) -> str:
    """A database or schema name as a user writes it to the connector (SNOWFLAKE_DATABASE, the metrics file's
    ops_schema), as Snowflake resolves it: unquoted upper case, ``"quoted"`` exactly as written
    (https://docs.snowflake.com/en/sql-reference/identifiers-syntax). Statements quote the resolved name, so
    ``dw_prod`` names DW_PROD there as it does at login (quoted as written, it would name no database)."""
    if len(name) > 1 and name.startswith('"') and name.endswith('"'):
        return name[1:-1].replace('""', '"')
    return name.upper()


@dataclass(frozen=True)
class OpsSchema:
    database: str
    schema: str = "DW_OPS"

    def __post_init__(self) -> None:
        object.__setattr__(self, "database", resolved_name(self.database))
        object.__setattr__(self, "schema", resolved_name(self.schema))

    def table(self, name: str) -> str:
        return f"{quote(self.database)}.{quote(self.schema)}.{quote(name)}"

    @property
    def qualified(self) -> str:
        return f"{quote(self.database)}.{quote(self.schema)}"

    def live_columns(self, cur: Any) -> dict[str, set[str]]:
        """The ops schema's tables and their columns as the warehouse has them (empty: no schema)."""
        cur.execute(
            f"SELECT TABLE_NAME, COLUMN_NAME FROM {quote(self.database)}.INFORMATION_SCHEMA.COLUMNS"
            " WHERE TABLE_SCHEMA = ?",
            (self.schema,),
        )
        live: dict[str, set[str]] = {}
        for table, column in cur.fetchall():
            live.setdefault(table.upper(), set()).add(column.upper())
        return live

    def missing(self, live: dict[str, set[str]]) -> list[str]:
        """What this dw-dagster needs that the live schema lacks: ``TABLE`` or ``TABLE.COLUMN``."""
        out = []
        for name, columns in TABLES.items():
            if name not in live:
                out.append(name)
                continue
            out += [f"{name}.{col}" for col, _ in table_columns(columns) if col not in live[name]]
        return out

    def readiness_error(self, cur: Any) -> OpsSchemaError | None:
        """Why statements on this schema cannot work with this dw-dagster, or None if they can."""
        from snowflake.connector.errors import ProgrammingError  # imported with a connection, not at load

        try:
            live = self.live_columns(cur)
        except ProgrammingError:
            live = {}  # no such database
        where = f"{self.database}.{self.schema}"
        if not any(name in live for name in TABLES):
            return OpsSchemaError(
                f"the ops schema {where} does not exist: run `{MIGRATE_COMMAND}` to create it"
            )
        what = self.missing(live)
        if not what:
            return None
        shown = ", ".join(what[:10]) + (f" and {len(what) - 10} more" if len(what) > 10 else "")
        return OpsSchemaError(
            f"the ops schema {where} is older than this dw-dagster (missing {shown}): run `{MIGRATE_COMMAND}`"
        )

    @contextmanager
    def connect(self, warehouse: Connections, purpose: str, **tag_fields: Any) -> Iterator[Any]:
        """A tagged connection whose current schema is this one (reused within a run)."""
        # Quoted: the session's schema is the resolved name exactly (the connector passes it to Snowflake).
        with warehouse.tagged_connection(purpose, schema=quote(self.schema), **tag_fields) as conn:
            # Imported once connected: the connection imports the connector as it should (connections.py).
            from snowflake.connector.errors import ProgrammingError

            try:
                yield conn
            except ProgrammingError as e:
                # Only when a statement fails: is it because the schema is missing or older than the code?
                error = self.readiness_error(conn.cursor())
                if error is not None:
                    raise error from e
                raise
