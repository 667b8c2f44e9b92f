"""Whether a sensor whose work lives in the warehouse (the ops schema) has anything to do, from Dagster's own
storage: the warehouse is the customer's money, and an idle tick must not wake it.

Everything that creates work for these sensors leaves a record in Dagster's storage after its warehouse
writes: a run (checks, diagnosis, lifecycle, remediation, a report) ends with a status change in the run
storage, and the commands that change an incident report a runless ``dw/incidents`` materialization in the
event log. So a sensor keeps, in its cursor, the *mark* of the storage it last acted on (the event log's
highest storage id and the latest run update) and the next moment its own work falls due (an approval's
expiry, an outbox retry). A tick whose mark is unchanged and whose due moment has not come reads two rows
of Dagster's storage and returns a ``SkipReason``; any other tick does the sensor's work. The mark is read
before the work, so a write that lands while the work runs is followed by a record that wakes the next tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg
import pydantic

from dw_dagster.coalesce.sensor_builder import DEFAULT_TICK_TIME_BUDGET_SECONDS


class Mark(pydantic.BaseModel, frozen=True):
    event_id: int
    """The event log's highest storage id (on SQLite: asset and runless events; on Postgres: every event)."""
    run_updated: float
    """The latest run's update time (every run status change), epoch seconds."""


class GateCursor(pydantic.BaseModel):
    """A gated sensor's cursor: what it last acted on and when it must look again whatever happens."""

    mark: Mark | None = None
    due: datetime | None = None


def storage_mark(instance: dg.DagsterInstance) -> Mark:
    """Two reads of Dagster's storage: the highest event id and the most recently updated run."""
    records = instance.get_run_records(limit=1, order_by="update_timestamp", ascending=False)
    updated = records[0].update_timestamp.timestamp() if records and records[0].update_timestamp else 0.0
    return Mark(event_id=instance.event_log_storage.get_maximum_record_id() or 0, run_updated=updated)


@dataclass
class Gate:
    """One tick's decision: ``work`` says why the warehouse is read (None: it is not)."""

    mark: Mark
    previous: GateCursor
    work: str | None
    now: datetime
    budget_seconds: float = DEFAULT_TICK_TIME_BUDGET_SECONDS
    """The tick's time budget: past it, no new item of work starts (the daemon gives a tick 60 s)."""
    left: list[str] = field(default_factory=list)
    """What the tick left for the next one when its budget was spent."""

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.budget_seconds

    def out_of_time(self, item: str) -> bool:
        """Whether the budget is spent; if so, ``item`` is left for the next tick (which :meth:`done` makes
        due at once)."""
        if time.monotonic() < self.deadline:
            return False
        self.left.append(item)
        return True

    def leftover(self) -> str:
        """What the tick left, for its skip message; empty when nothing."""
        if not self.left:
            return ""
        return f"; the tick's {self.budget_seconds:g} s budget was spent: left for the next tick: {', '.join(self.left)}"

    def skip(self, what: str) -> dg.SkipReason:
        """The idle tick's answer: nothing read from the warehouse, the cursor kept."""
        due = f"; next due {self.previous.due:%Y-%m-%d %H:%M:%S} UTC" if self.previous.due else ""
        return dg.SkipReason(
            f"{what}: nothing new in Dagster's storage since the last look{due}; the warehouse was not read"
        )

    def done(self, context: dg.SensorEvaluationContext, due: datetime | None = None) -> None:
        """Records that the work for this mark is done; ``due``: when to look again even if nothing happens
        (at once when the tick left work)."""
        if self.left:
            due = self.now if due is None else min(due, self.now)
        context.update_cursor(GateCursor(mark=self.mark, due=due).model_dump_json())


def open_gate(context: dg.SensorEvaluationContext, now: datetime) -> Gate:
    """Reads the cursor (one that cannot be read is a first tick: the work is done, never skipped)."""
    try:
        previous = GateCursor.model_validate_json(context.cursor) if context.cursor else GateCursor()
    except pydantic.ValidationError:
        previous = GateCursor()
    mark = storage_mark(context.instance)
    if previous.mark is None:
        work = "first look (no cursor)"
    elif mark != previous.mark:
        work = "Dagster's storage changed since the last look"
    elif previous.due is not None and now >= previous.due:
        work = f"due at {previous.due:%Y-%m-%d %H:%M:%S} UTC"
    else:
        work = None
    return Gate(mark, previous, work, now)


Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)
