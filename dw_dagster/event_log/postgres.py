"""dagster-postgres's event log storage, storing a run's planned check events in one transaction when
configured (``planned_checks``). Needs dagster-postgres, which the deployment installs beside dw-dagster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

from dw_dagster.event_log.planned_checks import (
    CONFIG_FIELD,
    CONFIG_SCHEMA,
    event_rows,
    insert_planned_check_events,
    is_planned_check_batch,
)
from dw_dagster.internals import EventLogEntry


class BatchedPostgresEventLogStorage(PostgresEventLogStorage):
    """``PostgresEventLogStorage`` (same config: ``postgres_url`` or ``postgres_db``), and
    ``batch_planned_check_events`` (default false). A failure rolls the batch back whole; Dagster then
    stores it again one event at a time."""

    def __init__(self, *args: Any, batch_planned_check_events: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_planned_check_events = batch_planned_check_events

    @classmethod
    def config_type(cls) -> dict:
        return {**super().config_type(), **CONFIG_SCHEMA}

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> BatchedPostgresEventLogStorage:
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
            batch_planned_check_events=config_value.get(CONFIG_FIELD, False),
        )

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not (self.batch_planned_check_events and is_planned_check_batch(self, events)):
            super().store_event_batch(events)
            return
        # One database: the event rows and the execution records commit together. store_event's NOTIFY is
        # left out: dagster-postgres no longer listens to it (kept there only for older versions' watchers).
        with self.index_transaction() as conn:
            insert_planned_check_events(self, conn, events, event_rows(self, events))
