"""Every private Dagster name the product uses (``dagster._*``), in one place, behind the version check.

dw-dagster prefers Dagster's public API; each name below has no public equivalent in dagster 1.13.27, and the
comment above it says what uses it and why. They were verified on one release
(``dw_dagster.coalesce.dagster_version.VERIFIED_DAGSTER_VERSION``; pyproject.toml pins it): importing this
module on another release is an error naming both releases, never a quiet fallback. No other product module
imports a private Dagster name (``tests/test_layers.py``); the Coalesce integration, which imports nothing
above itself, keeps its own in ``dw_dagster/coalesce/dagster_internals.py`` behind the same check. Upgrading
Dagster means reading these two modules (docs/production.md, "Upgrading Dagster").
"""

from __future__ import annotations

from dw_dagster.coalesce.dagster_version import require_verified_dagster

require_verified_dagster("Dagster's internals used by the product (dw_dagster.internals)")

# Below the check, so that another release fails above with a message rather than here with an ImportError.
# ruff: noqa: E402

# Run tags. Dagster writes and reads these tags itself (retries, re-executions, sensors' run keys, the code
# location) but exports no constant for them; spelling the strings here would hide a rename. Used by the
# retries of checks, incidents and the warehouse, by remediation's parents, and by the gate's sealed runs.
# Where loading the definitions reads the Coalesce state: the defs-state storage in scope (an entered
# instance's, or the one a command names) and the load context that pins the state's versions (a code
# server's initial load reads the latest; a run worker reconstructs with the versions its run was planned
# with, so it does not refresh or re-read what the code server did). Dagster sets both only in its own
# processes; the commands and the definitions' entry point set them as Dagster does.
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType

# The state of an asset's freshness record, as ``DagsterInstance.get_freshness_state_records`` returns it (a night a
# Coalesce job did not run, ``incidents.skipped_run``).
from dagster._core.definitions.freshness import FreshnessState

# The data of an engine event: ``DagsterInstance.report_engine_event`` (public) takes one, and the approval
# gate writes who approved which plan on the run's log with it.
# Dagster's SQL event log storages as the deployment's storages extend them (``dw_dagster.event_log``): the
# event records, the tables and row builders of a run's planned check events, and the sqlite storage's
# shards, migrations and connections. Extending a storage means its class and schema; Dagster's public API
# stores a batch of planned check events one at a time (a transaction each).
from dagster._core.events import DagsterEventType, EngineEventData
from dagster._core.events.log import EventLogEntry

# Whether the daemon's run retries will retry a failed run (``incidents.checks_not_run``: a checks run that
# will be retried is not reported as checks not run). Only Dagster knows its retry policy's answer.
from dagster._core.execution.retries import auto_reexecution_should_retry_run

# The status of an asset check's execution record, as ``DagsterInstance`` (public) returns the checks'
# history (``incidents.nights``) and as Dagster's storage writes a planned check (``event_log``).
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.defs_state.base import DefsStateStorage, set_defs_state_storage
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    SqlEventLogStorageMetadata,
    SqlEventLogStorageTable,
)
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sql import get_alembic_config
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS, create_db_conn_string
from dagster._core.storage.tags import (
    CODE_LOCATION_TAG,
    HIDDEN_TAG_PREFIX,
    PARENT_RUN_ID_TAG,
    RETRY_NUMBER_TAG,
    ROOT_RUN_ID_TAG,
    RUN_KEY_TAG,
    SENSOR_NAME_TAG,
    TICK_ID_TAG,
    WILL_RETRY_TAG,
)

# A copy of a record with fields replaced: a Coalesce spec with its owners and freshness policy set
# (``context.specs.attach_context``). The public ``replace_attributes`` and ``merge_attributes`` make and check
# every field of the spec again, for each of 10,000 specs at a load; Dagster's own ``AssetsDefinition`` copies
# its specs with ``replace`` too.
from dagster._record import replace

# Dagster's clock: what a sensor reads as "now", so that it agrees with the daemon that runs it (the local
# world's daemon freezes this clock for a night's tick).
from dagster._time import get_current_datetime

# A resource's method computed once per resource (the warehouse's connection settings): Dagster's resources
# are frozen models, to which functools' caches do not apply.
from dagster._utils.cached_method import cached_method

__all__ = [
    "CODE_LOCATION_TAG",
    "HIDDEN_TAG_PREFIX",
    "INDEX_SHARD_NAME",
    "PARENT_RUN_ID_TAG",
    "RETRY_NUMBER_TAG",
    "ROOT_RUN_ID_TAG",
    "RUN_KEY_TAG",
    "SENSOR_NAME_TAG",
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "TICK_ID_TAG",
    "WILL_RETRY_TAG",
    "AssetCheckExecutionRecordStatus",
    "AssetCheckExecutionsTable",
    "DagsterEventType",
    "DefinitionsLoadContext",
    "DefinitionsLoadType",
    "DefsStateStorage",
    "EngineEventData",
    "EventLogEntry",
    "FreshnessState",
    "SqlEventLogStorage",
    "SqlEventLogStorageMetadata",
    "SqlEventLogStorageTable",
    "SqliteEventLogStorage",
    "auto_reexecution_should_retry_run",
    "cached_method",
    "create_db_conn_string",
    "get_alembic_config",
    "get_current_datetime",
    "replace",
    "set_defs_state_storage",
    "sqlite_event_log",
]
