"""A run's planned check events as rows of Dagster's event log, written in one statement per table.

Dagster's ``create_run`` logs one ``ASSET_CHECK_EVALUATION_PLANNED`` event per check key of the run (what the
UI shows as the check "in progress"), one ``store_event`` each: an ``event_logs`` row (on sqlite twice, in
the run's shard and in the index) and the check's execution record (an ``asset_check_executions`` row,
PLANNED), each on a connection and commit of its own. For the checks run of a 2,000-node Coalesce run that is
2,001 events, 29-37 s on this machine (benchmarks/HISTORY.md), most of the run sensor's tick.

The events carry batch metadata, so with ``DAGSTER_EVENT_BATCH_SIZE`` set Dagster hands them to the
storage's ``store_event_batch``, which Dagster's own storages still store one at a time; the storages of
this package (``sqlite``, ``postgres``) write them with :func:`insert_planned_check_events` in one
transaction. It builds the rows as Dagster's private ``_event_to_row`` and
``_store_asset_check_evaluation_planned`` do, so it is used only with the dagster version it was verified
on (pinned in pyproject.toml); for any other batch or version the storages leave the events to Dagster's own
path. ``tests/production/test_planned_check_events.py`` compares what both paths store on both storages: it
is the test that fails when Dagster's internals change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

VERIFIED_DAGSTER_VERSION = "1.13.27"


def is_planned_check_batch(storage: SqlEventLogStorage, events: Sequence[EventLogEntry]) -> bool:
    """Whether the storage's ``store_event_batch`` may write ``events`` with this module: planned check
    events of one run, the verified dagster, and a schema with the execution records (Dagster's path raises
    its own error otherwise)."""
    return (
        dg.__version__ == VERIFIED_DAGSTER_VERSION
        and bool(events)
        and all(e.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED for e in events)
        and len({e.run_id for e in events}) == 1
        and storage.supports_asset_checks
    )


def event_rows(storage: SqlEventLogStorage, events: Sequence[EventLogEntry]) -> list[dict[str, Any]]:
    """The ``event_logs`` rows of ``events``, each event serialised once."""
    return [storage._event_to_row(event) for event in events]  # noqa: SLF001 - see the module's docstring


def insert_planned_check_events(
    storage: SqlEventLogStorage, conn: Any, events: Sequence[EventLogEntry], rows: list[dict[str, Any]]
) -> None:
    """Inserts ``rows`` (``event_rows(events)``), in order, into the index's ``event_logs`` and the events'
    execution records into ``asset_check_executions``, on ``conn`` (a transaction on the storage's index).
    SQLAlchemy sends each as multi-row INSERTs within the database's limits on bound parameters."""
    table = SqlEventLogStorageTable
    result = conn.execute(table.insert().returning(table.c.id, sort_by_parameter_order=True), rows)
    ids = [int(row[0]) for row in result]
    if len(ids) != len(events):
        raise RuntimeError(f"Stored {len(ids)} event rows for {len(events)} planned check events")
    records = [
        record
        for event, row, event_id in zip(events, rows, ids, strict=True)
        for record in _execution_records(storage, event, row["event"], event_id)
    ]
    conn.execute(AssetCheckExecutionsTable.insert(), records)


def _execution_records(
    storage: SqlEventLogStorage, event: EventLogEntry, serialized: str, event_id: int
) -> list[dict[str, Any]]:
    """The rows Dagster's ``_store_asset_check_evaluation_planned`` inserts for ``event``: one per planned
    partition, or one without."""
    planned = event.get_dagster_event().asset_check_planned_data
    partitions = planned.partitions_subset.get_partition_keys() if planned.partitions_subset else [None]
    return [
        {
            "asset_key": planned.asset_key.to_string(),
            "check_name": planned.check_name,
            "partition": partition,
            "run_id": event.run_id,
            "execution_status": AssetCheckExecutionRecordStatus.PLANNED.value,
            "evaluation_event": serialized,
            "evaluation_event_timestamp": storage._event_insert_timestamp(event),  # noqa: SLF001
            "evaluation_event_storage_id": event_id,
        }
        for partition in partitions
    ]
