"""Every private Dagster name the Coalesce integration uses, in one place, behind the version check.

The integration prefers Dagster's public API; each name below has no public equivalent in dagster 1.13.27,
and the comment above it says what uses it and why. They were verified on one release
(``dagster_version.VERIFIED_DAGSTER_VERSION``; pyproject.toml pins it): importing this module on another
release is an error naming both releases, never a quiet fallback. The optional fast path that writes Dagster's
storage rows itself (the run sensor's ``batch_run_events``, ``runless_store``) is off unless configured.

The integration imports nothing above itself; the product's own uses live in ``dw_dagster/internals.py``,
behind the same check (``dagster_version``).
"""

from __future__ import annotations

from dw_dagster.coalesce.dagster_version import require_verified_dagster

require_verified_dagster("Dagster's internals used by the Coalesce integration (dw_dagster.coalesce)")

# Below the check, so that another release fails above with a message rather than here with an ImportError.
# ruff: noqa: E402

# The base of typed metadata sets (the ``coalesce/*`` keys, metadata.py): Dagster exports its own sets
# (TableMetadataSet) but not their base, which dagster-dbt and dagster-fivetran import from here too.
from dagster._core.definitions.metadata.metadata_set import NamespacedMetadataSet

# The run sensor's batched events (runless_store.py, only with ``batch_run_events``): the event records,
# tables, runless run and clock with which Dagster's ``report_runless_asset_event`` writes its rows, so that
# a tick writes the same rows in a few transactions. The public API stores them one transaction each.
from dagster._core.events import (
    AssetObservationData,
    DagsterEvent,
    DagsterEventType,
    StepMaterializationData,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

# The state kept in the instance: reading the previous state at a refresh (previous_state.py), and the
# component's ``defs_state.management_type`` values (component.py). ``StateBackedComponent`` is public;
# the storage it writes to and the enum of its settings are not exported.
from dagster._core.storage.defs_state.base import DefsStateStorage
from dagster._core.storage.event_log.base import EventLogStorage
from dagster._core.storage.event_log.migration import ASSET_KEY_INDEX_COLS
from dagster._core.storage.event_log.schema import AssetKeyTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

# What the daemon gives a sensor tick (60 s unless DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS says otherwise): the
# polling sensor's time budget stays under it (sensor_builder.py). Dagster does not export it.
from dagster._grpc.client import DEFAULT_SENSOR_GRPC_TIMEOUT
from dagster._time import datetime_from_timestamp, get_current_timestamp

# A resource's method computed once per resource (the workspace's client and jobs, resources.py): Dagster's
# resources are frozen models, to which functools' caches do not apply. dagster-dbt uses it the same way.
from dagster._utils.cached_method import cached_method
from dagster_shared.serdes.objects.models.defs_state_info import DefsStateManagementType

__all__ = [
    "ASSET_KEY_INDEX_COLS",
    "DEFAULT_SENSOR_GRPC_TIMEOUT",
    "RUNLESS_JOB_NAME",
    "RUNLESS_RUN_ID",
    "AssetKeyTable",
    "AssetObservationData",
    "DagsterEvent",
    "DagsterEventType",
    "DefsStateManagementType",
    "DefsStateStorage",
    "EventLogEntry",
    "EventLogStorage",
    "NamespacedMetadataSet",
    "SqlEventLogStorage",
    "SqlEventLogStorageTable",
    "SqliteEventLogStorage",
    "StepMaterializationData",
    "cached_method",
    "datetime_from_timestamp",
    "get_current_timestamp",
]
