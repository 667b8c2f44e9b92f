"""The storage of the local world's Dagster instances as the deployment configures it (docs/production.md):
Dagster's own, with the deployment's event log storage (dw_dagster/event_log), which stores a checks run's
planned check events in one transaction when ``DAGSTER_EVENT_BATCH_SIZE`` is set where runs are created."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._core.instance.ref import InstanceRef

# Planned check events per batch, as the deployment sets it (Dockerfile): a checks run of up to 1,000 checks
# in one transaction, 2,001 in three.
EVENT_BATCH_SIZE = "1000"


def deployment_storage(home: Path, postgres_url: str | None = None) -> dict:
    """The storage sections of the ``dagster.yaml`` of an instance at ``home``: Dagster's sqlite storage
    under ``home`` (the files Dagster's default puts there), or dagster-postgres at ``postgres_url``; either
    with the deployment's event log storage."""
    if postgres_url is None:
        event_log = {"base_dir": str(home / "history" / "runs")}
        return {"event_log_storage": {"module": "dw_dagster.event_log.sqlite", "class": "BatchedSqliteEventLogStorage", "config": event_log}}  # fmt: skip
    pg = {"postgres_url": postgres_url}
    return {
        "run_storage": {
            "module": "dagster_postgres.run_storage",
            "class": "PostgresRunStorage",
            "config": pg,
        },
        "event_log_storage": {
            "module": "dw_dagster.event_log.postgres",
            "class": "BatchedPostgresEventLogStorage",
            "config": pg,
        },  # fmt: skip
        "schedule_storage": {
            "module": "dagster_postgres.schedule_storage",
            "class": "PostgresScheduleStorage",
            "config": pg,
        },  # fmt: skip
    }


def deployment_instance(home: Path) -> dg.DagsterInstance:
    """The instance of ``home``'s ``dagster.yaml`` (one without storage: the local world's), on the
    deployment's storage under ``home``. The path is given here, not written into the file: a seeded world's
    home is copied to another place to be used."""
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home), overrides=deployment_storage(home)))
