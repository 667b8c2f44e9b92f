"""What can happen on a night of a world: the fault vocabulary and the benign events, with parameters that
name the world's own tables and columns. Every world plays them through ``NightWorld.play_night``; the
distributor (``local/dw_local/worlds/distributor/events.py``) adds three kinds of its own.

Each event is a real change to what the pipeline reads or runs, never an edit of what it built. Hooks run in
this order on a night: ``before_load`` (reference rows, schemas), ``transform`` (the night's new rows before
they are loaded; pure), ``before_run`` (a node change deployed to Coalesce), then the job runs unless an
event says it does not. ``repair`` undoes a persistent event (``persists``) before a later night.

A ``where`` restricts an event to the rows whose columns hold the given values: ``{CHANNEL: web}``, or a
list for any of several (``{SDK_VERSION: ["6.0", "6.1"]}``).

The kinds are in ``fault_events.py`` and ``benign_events.py``, on the base ``event_base.Event``; the rows
they change are ``event_rows.py``'s. This module parses an event by its ``kind`` (``vocabulary``).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter

from dw_local.scenarios.benign_events import ColumnAdded, NewKeyMapped, SteadyGrowth
from dw_local.scenarios.fault_events import (
    ColumnDropped,
    ColumnRenamed,
    DuplicateLoad,
    NewKeyParentUnmapped,
    NewKeyUnmapped,
    NodeFailure,
    NullJoinKey,
    PartialLoad,
    ReferenceRowDeleted,
    ReferenceRowRemapped,
    ReplicationStalled,
    SchedulerSkip,
    SourceNotRefreshed,
    UnitChange,
)

KINDS: tuple[type, ...] = (
    NewKeyUnmapped,
    NewKeyParentUnmapped,
    ReferenceRowDeleted,
    ReferenceRowRemapped,
    DuplicateLoad,
    PartialLoad,
    ReplicationStalled,
    UnitChange,
    NullJoinKey,
    ColumnRenamed,
    ColumnDropped,
    NodeFailure,
    SchedulerSkip,
    SourceNotRefreshed,
    NewKeyMapped,
    SteadyGrowth,
    ColumnAdded,
)


def vocabulary(kinds: tuple[type, ...]) -> TypeAdapter[Any]:
    """Parses an event of one of ``kinds`` by its ``kind`` (a world's vocabulary)."""
    return TypeAdapter(Annotated[Union[kinds], Field(discriminator="kind")])  # noqa: UP007 - a tuple of kinds


EVENTS = vocabulary(KINDS)
