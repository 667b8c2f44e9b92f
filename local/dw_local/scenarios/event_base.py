"""The base of every event a night of a world can play: its hooks, in the order a night runs them, and the
checks of its parameters against the world; the types of the parameters that name the world's tables and
columns; and the base of the new-key kinds (a new key in a night's rows, with or without its reference row)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from dw_dagster.config import FileModel
from dw_local.scenarios.event_rows import add_row, check_row, matching, values_of, with_new_key
from dw_local.worlds.night_world import Frames, NightWorld, rng_for

if TYPE_CHECKING:
    from dw_dagster.coalesce.client import CoalesceClient

_IDENT = r"^[A-Z_][A-Z0-9_$]*$"
Ident = Annotated[str, Field(pattern=_IDENT)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class Event(FileModel):
    """One event. Its hooks take the world that plays it (a ``NightWorld``), reading only what every world
    offers: ``tables`` (``SourceRef`` by Source node name), ``actual_columns``, ``project``, ``source_load``,
    ``once_frame``, ``possible_values``, ``load``, ``edit_stamp``, ``spec.seed`` and ``spec.environment_id``."""

    kind: str
    stays_in: list[Ident] = Field(
        default_factory=list,
        description="Built nodes that read the night's rows again on later nights (a month-to-date total): "
        "the fault's rows stay in the append source, so it stays in force in these nodes, and only there, on "
        "the nights after it, until repaired.",
    )
    benign: ClassVar[bool] = False
    loads_source: ClassVar[bool] = True
    runs_job: ClassVar[bool] = True
    persists: ClassVar[bool] = False
    table_load: ClassVar[Literal["night", "once"] | None] = None
    """Which sources ``table`` may name: ``night``, those that get new rows each night (append, snapshot),
    whose new rows the event changes; ``once``, the reference tables, whose installed rows it changes."""

    def tables(self) -> list[str]:
        """The source tables (Source node names) or nodes the event changes: what it can make wrong."""
        return [t for t in (getattr(self, "table", None), getattr(self, "reference", None)) if t]

    def edits_reference(self) -> str | None:
        """The reference table whose rows ``before_load`` edits (upstream, then synced): held back while
        that table is not refreshed."""
        return None

    def held_tables(self) -> set[str]:
        """Source tables that get nothing new tonight (``source_not_refreshed``)."""
        return set()

    def changes_load(self) -> bool:
        """Changes the night's new rows (``transform``)."""
        return type(self).transform is not Event.transform

    def reloaded(self, world: NightWorld) -> set[str]:
        """Source tables whose loaded rows the event leaves wrong and a reload from the system they replicate
        puts right (a world that can reload them does so on ``repair``)."""
        table = getattr(self, "table", None)
        return {table} if table and self.changes_load() else set()

    def check(self, world: NightWorld) -> None:
        """The parameters make sense on this world (raise ValueError naming the parameter)."""
        for name in self.tables():
            if name not in world.tables:
                raise ValueError(
                    f"table: {name} is not a source of world {world.name} ({sorted(world.tables)})"
                )
        column = getattr(self, "column", None)
        table = getattr(self, "table", None)
        if column is not None and table in world.tables and column not in world.tables[table].columns:
            raise ValueError(f"column: {table} has no column {column}")
        where = getattr(self, "where", None) or {}
        for name in where | (getattr(self, "set", None) or {}):
            if table in world.tables and name not in world.tables[table].columns:
                raise ValueError(f"where/set: {table} has no column {name}")
        self._check_stays_in(world)
        if table not in world.tables:
            return
        load = world.source_load(table)
        if self.table_load == "night" and load == "once":
            raise ValueError(
                f"table: {self.kind} changes the night's new rows; {table} is load: once (reference data): "
                "expected an append or snapshot source"
            )
        if self.table_load == "once" and load != "once":
            raise ValueError(
                f"table: {self.kind} changes reference rows; {table} is load: {load}: expected a load: once source"
            )
        # A once table's rows are known now; a night's new rows are drawn when it is played, but the values a
        # column's generator can draw are known (a choice, a reference).
        if where and load == "once" and not matching(world.once_frame(table), where).any():
            raise ValueError(f"where: no row of {table} matches {where}")
        for name, value in where.items():
            possible = world.possible_values(table, name)
            if possible is not None and not any(v in possible for v in values_of(value)):
                shown = sorted(map(str, possible))[:12]
                raise ValueError(
                    f"where: {table}.{name} never holds {value!r} (its values: {', '.join(shown)})"
                )

    def _check_stays_in(self, world: NightWorld) -> None:
        if not self.stays_in:
            return
        table = getattr(self, "table", None)
        if self.persists or not self.changes_load() or table not in world.tables:
            raise ValueError(
                f"stays_in: {self.kind} does not leave one night's rows behind: expected an event that changes "
                "a night's new rows and is not in force until repaired anyway"
            )
        if world.source_load(table) != "append":
            raise ValueError(
                f"stays_in: {table} is load: {world.source_load(table)}; only an append source keeps a night's "
                "rows for the nights after"
            )
        built = {n.name for n in world.project.file.nodes if not n.is_source}
        for i, node in enumerate(self.stays_in):
            if node not in built:
                raise ValueError(f"stays_in[{i}]: {node} is not a built node of {world.project_file}")

    def growth(self, night: int) -> float:
        return 1.0

    def before_load(self, world: NightWorld, cur: Any, night: int) -> None:
        pass

    def transform(self, world: NightWorld, frames: Frames, night: int) -> Frames:
        return frames

    def before_run(self, world: NightWorld, coalesce: CoalesceClient) -> None:
        pass

    def repair(self, world: NightWorld, cur: Any, coalesce: CoalesceClient) -> None:
        pass

    def rng(self, world: NightWorld, night: int) -> np.random.Generator:
        return rng_for(world.spec.seed, f"event/{self.kind}", night)


class NewKey(Event):
    """A new key appears in a source: ``fraction`` of the night's rows matching ``where`` carry ``value`` in
    ``column``. In force until repaired (the key keeps arriving)."""

    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    column: Ident
    value: Any
    fraction: Fraction = 0.1
    where: dict[str, Any] | None = None
    persists: ClassVar[bool] = True

    def transform(self, world, frames, night):
        return with_new_key(self, world, frames, night)


class NewKeyWithRow(NewKey):
    """A new key whose owners added its ``row`` to the ``reference`` table the same day (once, however many
    nights the event is listed)."""

    reference: Ident
    row: dict[str, Any] = Field(min_length=1)

    def edits_reference(self):
        return self.reference

    def check(self, world):
        super().check(world)
        check_row(world, self.reference, self.row)

    def before_load(self, world, cur, night):
        add_row(world, cur, self.reference, self.row)
