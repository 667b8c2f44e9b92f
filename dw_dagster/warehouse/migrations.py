"""Creating and migrating the ops schema: one versioned, idempotent step, run at deploy time.

``migrate`` compares the live schema (``INFORMATION_SCHEMA.COLUMNS``) with ``ops.TABLES``, creates the
schema and every missing table, adds every missing column, and records the version it brought the schema
to in ``SCHEMA_VERSION`` (one row per migration that changed something, with the statements it sent).
Run again on an up-to-date schema it sends two reads and changes nothing; two deploys running it at once
both succeed (every statement is ``IF NOT EXISTS``).

Changes are additive: a new column must be nullable or carry a ``DEFAULT`` (existing rows get it). A table
folded into another (``RETIRED``) has its rows moved, then is dropped, by the migration that finds it.

Version 2: ``VOLUME_HISTORY``'s row counts became the series ``volume:<asset>`` of ``METRIC_HISTORY`` (with
its new column ``SOURCE``), so that a checks run writes its night in one statement.

Version 3: the audit trail (``AUDIT_TRAIL``), and the org-wide stop's events signed and chained
(``CONTROL_EVENTS``' new columns ``SEQ``, ``PREV_HASH``, ``EMAIL``, ``SIGNED_AT``, ``PROOF``; a row from before has
none of them and is ignored as unsigned).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from dw_dagster.warehouse.ops import TABLES, OpsSchema, OpsSchemaError, table_columns

if TYPE_CHECKING:
    from dw_dagster.warehouse.resources import WarehouseResource

SCHEMA_VERSION = 3
VERSION_TABLE = "SCHEMA_VERSION"
VERSION_COLUMNS = """
    VERSION INTEGER NOT NULL,
    MIGRATED_AT TIMESTAMP_TZ NOT NULL,
    MIGRATED_BY VARCHAR NOT NULL,
    CHANGES VARCHAR
"""


def _volume_rows(ops: OpsSchema) -> str:
    # The series name is dw_dagster.checks.history.volume_series; a row the checks wrote already is kept.
    return (
        f"MERGE INTO {ops.table('METRIC_HISTORY')} t USING (SELECT 'volume:' || ASSET_KEY AS METRIC, BUSINESS_DATE,"
        f" ROW_COUNT, SOURCE, RECORDED_AT, FLAGGED FROM {ops.table('VOLUME_HISTORY')}) s"
        " ON t.METRIC = s.METRIC AND t.BUSINESS_DATE = s.BUSINESS_DATE"
        " WHEN NOT MATCHED THEN INSERT (METRIC, BUSINESS_DATE, VALUE, SOURCE, RECORDED_AT, FLAGGED)"
        " VALUES (s.METRIC, s.BUSINESS_DATE, s.ROW_COUNT, s.SOURCE, s.RECORDED_AT, s.FLAGGED)"
    )


# A table an older schema has and this one folded into another -> the statement that moves its rows.
RETIRED: dict[str, Callable[[OpsSchema], str]] = {"VOLUME_HISTORY": _volume_rows}


@dataclass
class SchemaState:
    """The ops schema as the warehouse has it."""

    version: int | None
    """The version recorded by the last migration; None when the schema was never migrated."""
    missing: list[str]
    """``TABLE`` or ``TABLE.COLUMN`` this dw-dagster needs and the schema lacks."""
    retired: list[str] = field(default_factory=list)
    """Tables of an older schema whose rows are still to be moved (``RETIRED``)."""

    @property
    def current(self) -> bool:
        return (
            not self.missing
            and not self.retired
            and self.version is not None
            and self.version >= SCHEMA_VERSION
        )


@dataclass
class MigrationReport:
    schema: str
    before: SchemaState
    version: int
    changes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.changes:
            return f"ops schema {self.schema} is up to date (version {self.version})"
        was = "new" if self.before.version is None else f"version {self.before.version}"
        changes = f"{len(self.changes)} change{'' if len(self.changes) == 1 else 's'}"
        return f"ops schema {self.schema}: {was} -> version {self.version}, {changes}"


def _package_version() -> str:
    try:
        return f"dw-dagster {version('dw-dagster')}"
    except PackageNotFoundError:
        return "dw-dagster"


def schema_state(cur: Any, ops: OpsSchema) -> SchemaState:
    from snowflake.connector.errors import ProgrammingError  # imported with a connection, not at load

    try:
        live = ops.live_columns(cur)
    except ProgrammingError as e:
        raise OpsSchemaError(
            f"cannot read {ops.database}.INFORMATION_SCHEMA ({e}): does database {ops.database} exist "
            "(SNOWFLAKE_DATABASE) and may this role use it?"
        ) from e
    recorded = None
    if VERSION_TABLE in live:
        cur.execute(f"SELECT MAX(VERSION) FROM {ops.table(VERSION_TABLE)}")
        recorded = cur.fetchone()[0]
    return SchemaState(
        version=recorded,
        missing=ops.missing(live) if live else list(TABLES),
        retired=[name for name in RETIRED if name in live],
    )


def migrate(warehouse: WarehouseResource, ops: OpsSchema) -> MigrationReport:
    """Brings the ops schema to this dw-dagster's version; idempotent. Returns what it did."""
    with warehouse.tagged_connection("ops.migrate", job="ops_migrate") as conn:
        cur = conn.cursor()
        before = schema_state(cur, ops)
        report = MigrationReport(
            f"{ops.database}.{ops.schema}", before, max(before.version or 0, SCHEMA_VERSION)
        )
        if before.current:
            return report
        statements = [f"CREATE SCHEMA IF NOT EXISTS {ops.qualified}"]
        statements.append(f"CREATE TABLE IF NOT EXISTS {ops.table(VERSION_TABLE)} ({VERSION_COLUMNS})")
        for item in before.missing:
            name, _, column = item.partition(".")
            if not column:
                statements.append(f"CREATE TABLE IF NOT EXISTS {ops.table(name)} ({TABLES[name]})")
                continue
            definition = dict(table_columns(TABLES[name]))[column]
            statements.append(f"ALTER TABLE {ops.table(name)} ADD COLUMN IF NOT EXISTS {definition}")
        for name in before.retired:
            statements += [RETIRED[name](ops), f"DROP TABLE IF EXISTS {ops.table(name)}"]
        for sql in statements:
            cur.execute(sql)
        report.changes = statements
        cur.execute(
            f"INSERT INTO {ops.table(VERSION_TABLE)} (VERSION, MIGRATED_AT, MIGRATED_BY, CHANGES)"
            " VALUES (?, ?, ?, ?)",
            (report.version, datetime.now(UTC), _package_version(), json.dumps(report.changes)),
        )
        return report


def state(warehouse: WarehouseResource, ops: OpsSchema) -> SchemaState:
    with warehouse.tagged_connection("ops.status", job="ops_status") as conn:
        return schema_state(conn.cursor(), ops)
