"""dagster-postgres's event log storage, storing a run's planned check events in one transaction
(``planned_checks``). Needs dagster-postgres, which the deployment installs beside dw-dagster."""

from __future__ import annotations

from collections.abc import Sequence

from dagster._core.events.log import EventLogEntry
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

from dw_dagster.event_log.planned_checks import (
    event_rows,
    insert_planned_check_events,
    is_planned_check_batch,
)


class BatchedPostgresEventLogStorage(PostgresEventLogStorage):
    """``PostgresEventLogStorage`` (same config: ``postgres_url`` or ``postgres_db``). A failure rolls the
    batch back whole; Dagster then stores it again one event at a time."""

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> BatchedPostgresEventLogStorage:
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not is_planned_check_batch(self, events):
            super().store_event_batch(events)
            return
        # One database: the event rows and the execution records commit together. store_event's NOTIFY is
        # left out: dagster-postgres no longer listens to it (kept there only for older versions' watchers).
        with self.index_transaction() as conn:
            insert_planned_check_events(self, conn, events, event_rows(self, events))
