"""Dagster's sqlite event log storage (the local world's), storing a run's planned check events in one
run-shard and one index transaction (``planned_checks``)."""

from __future__ import annotations

from collections.abc import Sequence

from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from dw_dagster.event_log.planned_checks import (
    event_rows,
    insert_planned_check_events,
    is_planned_check_batch,
)


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` (same config: ``base_dir``, the folder of its run shards and index).

    The run's shard is committed first: a failure of the index transaction leaves the events in the run's
    own log when Dagster then stores the batch again one event at a time (there twice; the index once)."""

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> BatchedSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not is_planned_check_batch(self, events):
            super().store_event_batch(events)
            return
        rows = event_rows(self, events)
        # The run's own log, then the index (another file), which holds the rows readers query across runs.
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
        with self.index_transaction() as conn:
            insert_planned_check_events(self, conn, events, rows)
