"""Stores a tick's runless asset events in a few transactions, where Dagster's storage allows it.

Dagster's sensor daemon stores a ``SensorResult``'s ``asset_events`` one ``report_runless_asset_event`` at a
time: about 11 ms each, 22 s for a 2,000-node run (benchmarks/HISTORY.md, "2026-12-02 (tick)"), past the
daemon's tick budget. :func:`store_runless_asset_events` writes the same ``EventLogEntry`` rows that call
builds, with the same asset index rows (tags, the asset table's latest materialization or observation), in
one transaction on dagster-postgres and in one run-shard and one index transaction on Dagster's sqlite
storage.

It has to reach into Dagster's private ``_store_asset_event_tags`` and ``_event_to_row``, and write the
asset table's rows that the private ``_store_asset_event`` writes (its values from
``_get_asset_entry_values``): the public ``store_event_batch`` updates the asset table for the batch's last
event only (dagster-postgres), and the public ``store_asset_event`` opens a transaction per event. Each
event is serialised once, for both of sqlite's shards and for its asset row, and the asset rows go in a few
multi-row upserts instead of a statement (on postgres a round trip) per asset. So it is off unless
configured (the polling sensor's ``batch_run_events``, the component attribute of the same name), and then
used only on the storage classes it was verified on (or a subclass that overrides none of the methods it
calls or mirrors; ``dagster_internals`` refuses to load on a dagster release other than the verified one);
on any other storage it stores nothing, a warning says it is off, and the caller hands the events to the daemon.
``tests/production/test_runless_store.py`` compares what it stores with what ``report_runless_asset_event``
stores on both storages: it is the test that fails when Dagster's internals change.

What a reader sees stored (the asset's materializations and observations, which the sensor's replay guard
reads) becomes visible all at once, at the last commit: on sqlite the run shard is written first, so a
crash in between leaves rows only in the runless run's own log, written again on the replayed tick.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite

from dw_dagster.coalesce.dagster_internals import (
    ASSET_KEY_INDEX_COLS,
    RUNLESS_JOB_NAME,
    RUNLESS_RUN_ID,
    AssetKeyTable,
    AssetObservationData,
    DagsterEvent,
    DagsterEventType,
    EventLogEntry,
    EventLogStorage,
    SqlEventLogStorage,
    SqlEventLogStorageTable,
    SqliteEventLogStorage,
    StepMaterializationData,
    datetime_from_timestamp,
    get_current_timestamp,
)

FEATURE = "The run sensor's batched events (batch_run_events)"
SQLITE_STORAGE = f"{SqliteEventLogStorage.__module__}.{SqliteEventLogStorage.__qualname__}"
POSTGRES_STORAGE = "dagster_postgres.event_log.event_log.PostgresEventLogStorage"
VERIFIED_STORAGES = {SQLITE_STORAGE: "sqlite", POSTGRES_STORAGE: "postgres"}
# Asset rows per upsert: four bound values each, well under PostgreSQL's 65,535 per statement.
UPSERT_ROWS = 1000
# What this module calls on the storage: a subclass that overrides none of them stores the same rows.
USED_METHODS = (
    "run_connection",
    "index_transaction",
    "_event_to_row",
    "_store_asset_event_tags",
    "_store_asset_event",
    "_get_asset_entry_values",
    "has_secondary_index",
    "_has_asset_key_index_cols_on_connection",
)

logger = logging.getLogger(__name__)
# Storages already told that the fast path is off on them: a daemon's instance is told once, not every tick.
_warned_storages: weakref.WeakSet[EventLogStorage] = weakref.WeakSet()
# The two dialects' INSERT builders, each with its own ``on_conflict_*`` methods.
DialectInsert = Callable[[Table], postgresql.Insert] | Callable[[Table], sqlite.Insert]


def runless_entry(event: dg.AssetMaterialization | dg.AssetObservation) -> EventLogEntry:
    """The ``EventLogEntry`` that ``DagsterInstance.report_runless_asset_event`` stores for ``event``."""
    payload: StepMaterializationData | AssetObservationData
    if isinstance(event, dg.AssetMaterialization):
        event_type, payload = DagsterEventType.ASSET_MATERIALIZATION, StepMaterializationData(event)
    elif isinstance(event, dg.AssetObservation):
        event_type, payload = DagsterEventType.ASSET_OBSERVATION, AssetObservationData(event)
    else:
        raise TypeError(f"Expected an AssetMaterialization or AssetObservation, got {event!r}")
    dagster_event = DagsterEvent(
        event_type_value=event_type.value, event_specific_data=payload, job_name=RUNLESS_JOB_NAME
    )
    # Dagster's EventLogEntry.__new__ is unannotated (it checks each argument at run time instead).
    return EventLogEntry(  # type: ignore[no-untyped-call]
        user_message="",
        level="INFO",
        job_name=RUNLESS_JOB_NAME,
        run_id=RUNLESS_RUN_ID,
        error_info=None,
        timestamp=get_current_timestamp(),
        step_key=dagster_event.step_key,
        dagster_event=dagster_event,
    )


def batch_storage_kind(instance: dg.DagsterInstance) -> str | None:
    """``"sqlite"`` or ``"postgres"`` when the instance's event log is a storage this module was verified
    on (that class, or a subclass that overrides none of the methods used here), else None. (The dagster
    release is checked when ``dagster_internals`` loads.)"""
    cls = type(instance.event_log_storage)
    for base in cls.__mro__:
        kind = VERIFIED_STORAGES.get(f"{base.__module__}.{base.__qualname__}")
        if kind is not None:
            return kind if all(getattr(cls, name) is getattr(base, name) for name in USED_METHODS) else None
    return None


def store_runless_asset_events(
    instance: dg.DagsterInstance, events: Sequence[dg.AssetMaterialization | dg.AssetObservation]
) -> bool:
    """Stores ``events`` in order as ``report_runless_asset_event`` would, in as few transactions as the
    storage allows. False, with nothing stored and a warning that the feature is off, when the storage is
    not one this was verified on."""
    storage = instance.event_log_storage
    kind = batch_storage_kind(instance)
    # Both verified storages are SqlEventLogStorage subclasses: the isinstance only tells mypy so.
    if kind is None or not isinstance(storage, SqlEventLogStorage):
        name = f"{type(storage).__module__}.{type(storage).__qualname__}"
        if storage not in _warned_storages:
            _warned_storages.add(storage)
            logger.warning(
                "%s is off on this instance: its event log storage %s is not one they were verified on "
                "(%s, or a subclass that overrides none of %s); the daemon stores the events one at a time",
                FEATURE,
                name,
                " or ".join(VERIFIED_STORAGES),
                ", ".join(USED_METHODS),
            )
        return False
    entries = [runless_entry(event) for event in events]
    if entries:
        (_store_postgres if kind == "postgres" else _store_sqlite)(storage, entries)
    return True


def _store_postgres(storage: SqlEventLogStorage, entries: list[EventLogEntry]) -> None:
    # One database: the event rows, their tags and the asset rows commit together. store_event's NOTIFY is
    # left out: dagster-postgres no longer listens to it (kept there only for older versions' watchers).
    rows = _event_rows(storage, entries)
    with storage.index_transaction() as conn:
        ids = _insert_events(conn, rows)
        index_cols = storage.has_secondary_index(ASSET_KEY_INDEX_COLS)
        _store_index_rows(storage, conn, entries, rows, ids, index_cols, postgresql.insert)


def _store_sqlite(storage: SqlEventLogStorage, entries: list[EventLogEntry]) -> None:
    # The runless run's shard, then the index shard (another file) with the rows readers query.
    rows = _event_rows(storage, entries)
    with storage.run_connection(RUNLESS_RUN_ID) as conn:
        conn.execute(SqlEventLogStorageTable.insert(), rows)
    with storage.index_transaction() as conn:
        ids = _insert_events(conn, rows)
        index_cols = storage._has_asset_key_index_cols_on_connection(conn)  # noqa: SLF001
        _store_index_rows(storage, conn, entries, rows, ids, index_cols, sqlite.insert)


def _event_rows(storage: SqlEventLogStorage, entries: list[EventLogEntry]) -> list[dict[str, Any]]:
    """The ``event_logs`` rows of ``entries`` (each event serialised once, however many tables get it)."""
    return [storage._event_to_row(entry) for entry in entries]  # noqa: SLF001


def _insert_events(conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
    """Inserts ``rows`` (SQLAlchemy sends multi-row INSERTs within the database's limits on bound
    parameters) and returns their ids in the rows' order."""
    table = SqlEventLogStorageTable
    return [
        int(r[0])
        for r in conn.execute(table.insert().returning(table.c.id, sort_by_parameter_order=True), rows)
    ]


def _store_index_rows(
    storage: SqlEventLogStorage,
    conn: Connection,
    entries: list[EventLogEntry],
    rows: list[dict[str, Any]],
    ids: list[int],
    index_cols: bool,
    dialect_insert: DialectInsert,
) -> None:
    """The asset tags and the asset table's rows that ``_store_asset_event`` writes for each entry, in a few
    multi-row statements: one ``INSERT .. ON CONFLICT`` per set of columns and per occurrence of an asset in
    the batch (a statement may not touch a row twice, and an asset's later event must win). Where an entry
    has no values, dagster-postgres inserts the key alone and Dagster's sqlite storage writes nothing."""
    if len(ids) != len(entries):
        raise RuntimeError(f"Stored {len(ids)} event rows for {len(entries)} events")
    storage._store_asset_event_tags(conn, entries, ids)  # noqa: SLF001 - see the module's docstring
    rounds: list[dict[tuple[str, ...], list[dict[str, Any]]]] = []
    seen: dict[str, int] = {}
    keys_alone = dialect_insert is postgresql.insert
    for entry, values in zip(entries, _asset_values(storage, entries, rows, ids, index_cols), strict=True):
        if not values and not keys_alone:
            continue
        key = _asset_key(entry)
        occurrence = seen[key] = seen.get(key, -1) + 1
        if occurrence == len(rounds):
            rounds.append({})
        rounds[occurrence].setdefault(tuple(sorted(values)), []).append({"asset_key": key, **values})
    for statements in rounds:
        for columns, batch in statements.items():
            for start in range(0, len(batch), UPSERT_ROWS):
                insert = dialect_insert(AssetKeyTable).values(batch[start : start + UPSERT_ROWS])
                conn.execute(
                    insert.on_conflict_do_update(
                        index_elements=[AssetKeyTable.c.asset_key],
                        set_={c: insert.excluded[c] for c in columns},
                    )
                    if columns
                    else insert.on_conflict_do_nothing()
                )


def _asset_key(entry: EventLogEntry) -> str:
    key = entry.get_dagster_event().asset_key
    if key is None:  # runless_entry makes asset events only, which all name their asset
        raise ValueError(f"Expected an asset event, got {entry.get_dagster_event().event_type_value}")
    return key.to_string()


def _asset_values(
    storage: SqlEventLogStorage,
    entries: list[EventLogEntry],
    rows: list[dict[str, Any]],
    ids: list[int],
    index_cols: bool,
) -> list[dict[str, Any]]:
    """``_get_asset_entry_values`` of each entry. A materialization's record is its event row's serialised
    event wrapped, rather than the event serialised a second time (half the cost of storing a tick's
    events), once the first materialization shows the two are the same string; else Dagster's for all."""
    same: bool | None = None
    out = []
    for entry, row, event_id in zip(entries, rows, ids, strict=True):
        if same is not False and entry.get_dagster_event().is_step_materialization:
            wrapped = {
                "last_materialization": '{"__class__": "EventLogRecord", "event_log_entry": '
                f'{row["event"]}, "storage_id": {event_id}}}',
                "last_run_id": entry.run_id,
                **(
                    {"last_materialization_timestamp": datetime_from_timestamp(entry.timestamp)}
                    if index_cols
                    else {}
                ),
            }
            if same is None:
                same = wrapped == storage._get_asset_entry_values(entry, event_id, index_cols)  # noqa: SLF001
            if same:
                out.append(wrapped)
                continue
        out.append(storage._get_asset_entry_values(entry, event_id, index_cols))  # noqa: SLF001
    return out
