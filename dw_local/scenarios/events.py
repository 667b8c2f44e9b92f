"""What can happen on a night of a world: the fault vocabulary and the benign events, with parameters that
name the world's own tables and columns. A world written as data (``generic.py``) plays them as written; the
distributor (``dw_local/worlds/distributor/faults.py``) names them from its own parameters.

Each event is a real change to what the pipeline reads or runs, never an edit of what it built. Hooks run in
this order on a night: ``before_load`` (reference rows, schemas), ``transform`` (the night's new rows before
they are loaded; pure), ``before_run`` (a node change deployed to Coalesce), then the job runs unless an
event says it does not. ``repair`` undoes a persistent event (``persists``) before a later night.

A ``where`` restricts an event to the rows whose columns hold the given values: ``{CHANNEL: web}``, or a
list for any of several (``{SDK_VERSION: ["6.0", "6.1"]}``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, TypeAdapter, field_validator

from dw_dagster.coalesce.sql import quote_identifier
from dw_dagster.config import FileModel
from dw_local.coalesce_sim.project_specs import column_id, node_id
from dw_local.world import WorldError, sim_control
from dw_local.worlds.distributor.simulation import rng_for

if TYPE_CHECKING:
    from dw_dagster.coalesce.client import CoalesceClient
    from dw_local.scenarios.generic import Frames, GenericWorld

_IDENT = r"^[A-Z_][A-Z0-9_$]*$"
Ident = Annotated[str, Field(pattern=_IDENT)]
Fraction = Annotated[float, Field(gt=0, le=1)]
# A column a node_failure adds to a node carries this description, so repair finds exactly it.
NODE_FAILURE_MARKER = "dw_local scenario: node_failure"


class Event(FileModel):
    """One event. Its hooks take the world that plays it, reading only what every world offers: ``tables``
    (``SourceRef`` by Source node name), ``actual_columns``, ``project``, ``spec.seed`` and
    ``spec.environment_id``; a world file's also ``once_frame``, ``load`` and ``spec.sources``."""

    kind: str
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

    def check(self, world: GenericWorld) -> None:
        """The parameters make sense on this world (raise ValueError naming the parameter)."""
        for name in self.tables():
            if name not in world.tables:
                raise ValueError(
                    f"table: {name} is not a source of world {world.spec.name} ({sorted(world.tables)})"
                )
        column = getattr(self, "column", None)
        table = getattr(self, "table", None)
        if column is not None and table in world.tables and column not in world.tables[table].columns:
            raise ValueError(f"column: {table} has no column {column}")
        where = getattr(self, "where", None) or {}
        for name in where | (getattr(self, "set", None) or {}):
            if table in world.tables and name not in world.tables[table].columns:
                raise ValueError(f"where/set: {table} has no column {name}")
        if table not in world.tables:
            return
        load = world.spec.sources[table].load
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
        if where and load == "once" and not _matching(world.once_frame(table), where).any():
            raise ValueError(f"where: no row of {table} matches {where}")
        for name, value in where.items():
            possible = world.possible_values(table, name)
            if possible is not None and not any(v in possible for v in _values(value)):
                shown = sorted(map(str, possible))[:12]
                raise ValueError(
                    f"where: {table}.{name} never holds {value!r} (its values: {', '.join(shown)})"
                )

    def growth(self, night: int) -> float:
        return 1.0

    def before_load(self, world: GenericWorld, cur: Any, night: int) -> None:
        pass

    def transform(self, world: GenericWorld, frames: Frames, night: int) -> Frames:
        return frames

    def before_run(self, world: GenericWorld, coalesce: CoalesceClient) -> None:
        pass

    def repair(self, world: GenericWorld, cur: Any, coalesce: CoalesceClient) -> None:
        pass

    def rng(self, world: GenericWorld, night: int) -> np.random.Generator:
        return rng_for(world.spec.seed, f"event/{self.kind}", night)


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _matching(frame: pd.DataFrame, where: dict[str, Any] | None) -> np.ndarray:
    mask = np.ones(len(frame), dtype=bool)
    for column, value in (where or {}).items():
        mask &= frame[column].isin(_values(value)).to_numpy()
    return mask


def pick_rows(mask: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Exactly round(fraction x candidates) of the candidate rows (``mask``; at least one), chosen by ``rng``."""
    candidates = np.flatnonzero(mask)
    k = min(len(candidates), max(1, round(fraction * len(candidates))))
    out = np.zeros(len(mask), dtype=bool)
    out[rng.choice(candidates, size=k, replace=False)] = True
    return out


def _pick(event: Any, frame: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    """``pick_rows`` of the night's rows matching the event's ``where``."""
    mask = _matching(frame, event.where)
    if not mask.any():
        # A night's rows are drawn when it is played, so this cannot be checked when the file is loaded.
        raise WorldError(
            f"{event.kind}: where: no row of {event.table}'s new rows on the night matches {event.where}"
        )
    return pick_rows(mask, event.fraction, rng)


def _where_sql(where: dict[str, Any]) -> tuple[str, tuple]:
    clauses, args = [], []
    for column, value in where.items():
        values = _values(value)
        clauses.append(f"{quote_identifier(column)} IN ({', '.join(['%s'] * len(values))})")
        args += values
    return " AND ".join(clauses), tuple(args)


def _restore_rows(world: GenericWorld, cur: Any, table: str, where: dict[str, Any]) -> None:
    """Puts the world file's rows matching ``where`` back in a once table, as they were installed."""
    clause, args = _where_sql(where)
    cur.execute(f"DELETE FROM {world.tables[table].qualified} WHERE {clause}", args)
    original = world.once_frame(table)
    world.load(cur, table, original[_matching(original, where)])


def _new_key(event: NewKeyUnmapped | NewKeyMapped, world: GenericWorld, frames: Frames, night: int) -> Frames:
    """``fraction`` of the night's rows matching ``where`` now carry the new key (orders on a new storefront)."""
    frame = frames[event.table].copy()
    rows = _pick(event, frame, event.rng(world, night))
    frame.loc[rows, event.column] = event.value
    return {**frames, event.table: frame}


# ---------------------------------------------------------------------------------------------- faults


class NewKeyUnmapped(Event):
    """The reference night: a new key appears in a source (a storefront, an org) and the reference table the
    pipeline inner-joins to has no row for it. ``fraction`` of the night's rows (those matching ``where``)
    carry the new ``value`` in ``column``."""

    kind: Literal["new_key_unmapped"]
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    column: Ident
    value: Any
    fraction: Fraction = 0.1
    where: dict[str, Any] | None = None
    persists: ClassVar[bool] = True

    def transform(self, world, frames, night):
        return _new_key(self, world, frames, night)


class ReferenceRowDeleted(Event):
    """Someone deletes rows of a reference table (``where`` picks them); persists until repaired."""

    kind: Literal["reference_row_deleted"]
    table_load: ClassVar[Literal["night", "once"] | None] = "once"
    table: Ident
    where: dict[str, Any] = Field(min_length=1)
    persists: ClassVar[bool] = True

    def edits_reference(self):
        return self.table

    def before_load(self, world, cur, night):
        clause, args = _where_sql(self.where)
        cur.execute(f"DELETE FROM {world.tables[self.table].qualified} WHERE {clause}", args)
        if not cur.rowcount:
            raise WorldError(f"reference_row_deleted: no row of {self.table} matches {self.where}")

    def repair(self, world, cur, coalesce):
        _restore_rows(world, cur, self.table, self.where)


class ReferenceRowRemapped(Event):
    """Someone points reference rows (``where``) at other values (``set``); persists until repaired."""

    kind: Literal["reference_row_remapped"]
    table_load: ClassVar[Literal["night", "once"] | None] = "once"
    table: Ident
    where: dict[str, Any] = Field(min_length=1)
    set: dict[str, Any] = Field(min_length=1)
    persists: ClassVar[bool] = True

    def edits_reference(self):
        return self.table

    def before_load(self, world, cur, night):
        assignments = ", ".join(f"{quote_identifier(c)} = %s" for c in self.set)
        clause, args = _where_sql(self.where)
        cur.execute(
            f"UPDATE {world.tables[self.table].qualified} SET {assignments} WHERE {clause}",
            (*self.set.values(), *args),
        )

    def repair(self, world, cur, coalesce):
        _restore_rows(world, cur, self.table, self.where)


class DuplicateLoad(Event):
    """Replication applies the night's rows (``where``, ``fraction``) twice, identical to the last column."""

    kind: Literal["duplicate_load"]
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    fraction: Fraction = 1.0
    where: dict[str, Any] | None = None

    def transform(self, world, frames, night):
        frame = frames[self.table]
        rows = _pick(self, frame, self.rng(world, night))
        return {**frames, self.table: pd.concat([frame, frame[rows]], ignore_index=True)}


class PartialLoad(Event):
    """Replication applies only part of the night's rows: ``fraction`` of those matching ``where`` are
    missing."""

    kind: Literal["partial_load"]
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    fraction: Fraction = 0.3
    where: dict[str, Any] | None = None

    def transform(self, world, frames, night):
        frame = frames[self.table]
        missing = _pick(self, frame, self.rng(world, night))
        return {**frames, self.table: frame[~missing].reset_index(drop=True)}


class ReplicationStalled(Event):
    """Replication delivers nothing for the night; the job still runs. The next night played catches up
    (its own rows plus the missed night's)."""

    kind: Literal["replication_stalled"]
    loads_source: ClassVar[bool] = False


class UnitChange(Event):
    """A source column changes unit or sign: its values (the rows matching ``where``, e.g. one app version or
    channel) multiplied by ``factor``, any factor but 0 and 1 (100 for cents, 0.27, 3.7; -1 flips the sign),
    and stored as the column carries them (rounded to its scale: a NUMBER(18,2) keeps two decimals)."""

    kind: Literal["unit_change"]
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    column: Ident
    factor: float = 100
    where: dict[str, Any] | None = None

    @field_validator("factor")
    @classmethod
    def _changes_something(cls, factor: float) -> float:
        if factor in (0, 1) or not np.isfinite(factor):
            raise ValueError(f"expected a factor other than 0 and 1 (negative flips the sign), got {factor}")
        return factor

    def check(self, world):
        super().check(world)
        if not world.tables[self.table].is_numeric(self.column):
            data_type = world.tables[self.table].types[self.column]
            raise ValueError(
                f"column: unit_change multiplies a number; {self.table}.{self.column} is {data_type}"
            )

    def transform(self, world, frames, night):
        frame = frames[self.table].copy()
        rows = _matching(frame, self.where)
        if not rows.any():
            raise WorldError(
                f"unit_change: where: no row of {self.table}'s new rows on the night matches {self.where}"
            )
        scaled = frame.loc[rows, self.column].astype(float) * self.factor
        scale = world.tables[self.table].scale(self.column)
        frame[self.column] = frame[self.column].astype(float)
        frame.loc[rows, self.column] = scaled if scale is None else scaled.round(scale)
        if scale == 0:  # a whole-number column loads whole numbers (``12``, not ``12.0``)
            frame[self.column] = frame[self.column].astype("Int64")
        return {**frames, self.table: frame}


class NullJoinKey(Event):
    """A surge of NULLs in a join key: ``fraction`` of the night's rows arrive with ``column`` NULL (the
    column made nullable first, as a replication target often is; it stays nullable)."""

    kind: Literal["null_join_key"]
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    column: Ident
    fraction: Fraction = 0.1
    where: dict[str, Any] | None = None

    def before_load(self, world, cur, night):
        table = world.tables[self.table].qualified
        cur.execute(f"ALTER TABLE {table} ALTER COLUMN {quote_identifier(self.column)} DROP NOT NULL")

    def transform(self, world, frames, night):
        frame = frames[self.table].copy()
        rows = _pick(self, frame, self.rng(world, night))
        values = frame[self.column].astype(object)
        values[rows] = None
        frame[self.column] = values
        return {**frames, self.table: frame}


class ColumnRenamed(Event):
    """A source column is renamed (the replicated DDL change); later rows arrive under the new name."""

    kind: Literal["column_renamed"]
    table: Ident
    column: Ident
    new_name: Ident
    persists: ClassVar[bool] = True

    def before_load(self, world, cur, night):
        columns = world.actual_columns(cur, self.table)
        if self.new_name in columns:
            return  # renamed on an earlier night
        if self.column not in columns:
            raise WorldError(
                f"column_renamed: {self.table} has no column {self.column} now (columns: {columns})"
            )
        cur.execute(
            f"ALTER TABLE {world.tables[self.table].qualified} RENAME COLUMN "
            f"{quote_identifier(self.column)} TO {quote_identifier(self.new_name)}"
        )

    def repair(self, world, cur, coalesce):
        if self.new_name in world.actual_columns(cur, self.table):
            cur.execute(
                f"ALTER TABLE {world.tables[self.table].qualified} RENAME COLUMN "
                f"{quote_identifier(self.new_name)} TO {quote_identifier(self.column)}"
            )


class ColumnDropped(Event):
    """A source column is dropped (the replicated DDL change); repair adds it back (rows loaded meanwhile
    keep it NULL)."""

    kind: Literal["column_dropped"]
    table: Ident
    column: Ident
    persists: ClassVar[bool] = True

    def before_load(self, world, cur, night):
        if self.column in world.actual_columns(cur, self.table):
            table = world.tables[self.table].qualified
            cur.execute(f"ALTER TABLE {table} DROP COLUMN {quote_identifier(self.column)}")

    def repair(self, world, cur, coalesce):
        if self.column not in world.actual_columns(cur, self.table):
            table = world.tables[self.table]
            cur.execute(
                f"ALTER TABLE {table.qualified} ADD COLUMN {quote_identifier(self.column)} {table.types[self.column]}"
            )


class NodeFailure(Event):
    """An engineer deploys a change to a built node that reads a column its source does not have: the node
    fails and nodes downstream are not built. Persists until repaired (the change reverted and deployed)."""

    kind: Literal["node_failure"]
    node: Ident
    persists: ClassVar[bool] = True

    def tables(self) -> list[str]:
        return [self.node]

    def check(self, world):
        if not any(n.name == self.node and not n.is_source for n in world.project.file.nodes):
            raise ValueError(f"node: {self.node} is not a built node of {world.spec.project}")
        if self._plain_column(world) is None:
            raise ValueError(f"node: {self.node} has no column read straight from one source column to break")

    def _plain_column(self, world):
        """The node's first column read straight from one source column: the one the broken change copies."""
        spec = next(n for n in world.project.file.nodes if n.name == self.node and not n.is_source)
        return next((c for c in spec.columns if c.transform is None and len(c.sources) == 1), None)

    def _workspace(self, world, coalesce) -> tuple[str, dict]:
        node_id = next(n.id for n in world.project.file.nodes if n.name == self.node and not n.is_source)
        path = f"workspace/nodes/{node_id}?environmentID={world.spec.environment_id}"
        return path, sim_control(coalesce, "GET", path)

    def _deploy(self, world, coalesce, path: str, detail: dict) -> None:
        sim_control(coalesce, "PUT", path, detail)
        sim_control(coalesce, "POST", "deploy", {"environmentID": world.spec.environment_id})

    def before_run(self, world, coalesce):
        path, detail = self._workspace(world, coalesce)
        columns = detail["metadata"]["columns"]
        if any(c.get("description") == NODE_FAILURE_MARKER for c in columns):
            return  # deployed on an earlier night
        plain = self._plain_column(world)
        _, source_node, source_column = plain.sources[0].split(".")
        broken = {
            k: v for k, v in next(c for c in columns if c["name"] == plain.name).items() if k != "columnID"
        }
        broken.update(
            name=f"{plain.name}_V2",
            transform=f"{quote_identifier(source_node)}.{quote_identifier(source_column + '_V2')}",
            description=NODE_FAILURE_MARKER,
            appliedColumnTests={},
            isBusinessKey=False,
        )
        detail["metadata"]["columns"] = [*columns, broken]
        self._deploy(world, coalesce, path, detail)

    def repair(self, world, cur, coalesce):
        path, detail = self._workspace(world, coalesce)
        columns = detail["metadata"]["columns"]
        kept = [c for c in columns if c.get("description") != NODE_FAILURE_MARKER]
        if len(kept) != len(columns):
            detail["metadata"]["columns"] = kept
            self._deploy(world, coalesce, path, detail)


class SchedulerSkip(Event):
    """The Scheduler starts no run tonight; the sources move on as usual."""

    kind: Literal["scheduler_skip"]
    runs_job: ClassVar[bool] = False


class SourceNotRefreshed(Event):
    """One source table gets nothing new tonight while every other moves on (its connector or sync job
    stopped), as opposed to the whole replication stalling. An append table's rows arrive with the next
    night played; a snapshot table keeps the last rows it was loaded with; a reference table (``load: once``
    with a nightly ``refresh``) keeps its last sync stamp, and an edit of its rows made upstream tonight (a
    new key's row added) reaches it only with the next sync."""

    kind: Literal["source_not_refreshed"]
    table: Ident

    def check(self, world):
        super().check(world)
        source = world.spec.sources[self.table]
        if source.load == "once" and source.refresh is None:
            raise ValueError(
                f"table: {self.table} is load: once and never re-synced, so it cannot go stale: give it a "
                f"nightly refresh in the world file (sources.{self.table}.refresh) to play it not refreshed"
            )

    def held_tables(self):
        return {self.table}


# ---------------------------------------------------------------------------------------------- benign


class NewKeyMapped(Event):
    """Benign: a new key appears in a source and its owners added its reference row the same day."""

    kind: Literal["new_key_mapped"]
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    column: Ident
    value: Any
    fraction: Fraction = 0.1
    where: dict[str, Any] | None = None
    reference: Ident
    row: dict[str, Any] = Field(min_length=1)
    benign: ClassVar[bool] = True
    persists: ClassVar[bool] = True

    def edits_reference(self):
        return self.reference

    def check(self, world):
        super().check(world)
        if world.spec.sources[self.reference].load != "once":
            raise ValueError(f"reference: {self.reference} is not a load: once (reference) source")
        if wrong := sorted(set(self.row) - set(world.tables[self.reference].columns)):
            raise ValueError(f"row: {self.reference} has no column {wrong[0]}")

    def before_load(self, world, cur, night):
        columns = ", ".join(quote_identifier(c) for c in self.row)
        marks = ", ".join(["%s"] * len(self.row))
        cur.execute(
            f"INSERT INTO {world.tables[self.reference].qualified} ({columns}) VALUES ({marks})",
            tuple(self.row.values()),
        )

    def transform(self, world, frames, night):
        return _new_key(self, world, frames, night)


class SteadyGrowth(Event):
    """Benign: the business grows: each night from ``since_night`` has ``pct`` percent more rows than the
    night before. List it on every night it applies."""

    kind: Literal["steady_growth"]
    pct: float = Field(default=1.0, gt=-20, le=20)
    since_night: int = Field(ge=0, description="Absolute night index (the runner converts a scenario's).")
    benign: ClassVar[bool] = True

    def growth(self, night):
        return (1 + self.pct / 100) ** max(0, night - self.since_night + 1)


class ColumnAdded(Event):
    """Benign: a source gains a column (the replicated DDL change) and an engineer carries it through
    ``nodes`` (built nodes, each reading it from the one before, the first from ``table``): the Coalesce
    project shows it, with its column lineage. The night's new rows draw its ``values`` (a reference
    table's installed rows take the first; later nights' rows leave it NULL). The numbers do not move; a
    column whose name or values look personal is a question for the data's governance owners. Persists
    until repaired (the column dropped and the nodes deployed without it)."""

    kind: Literal["column_added"]
    table: Ident
    column: Ident
    data_type: str = Field(default="VARCHAR(256)", pattern=r"^[A-Z_]+(\(\d+(,\s*\d+)?\))?$")
    description: str = ""
    values: list[Any] = Field(min_length=1, description="The values the night's rows draw from.")
    nodes: list[Ident] = Field(default_factory=list)
    benign: ClassVar[bool] = True
    persists: ClassVar[bool] = True

    def check(self, world):
        # Not the base check: the column is one the table does not have yet.
        if self.table not in world.tables:
            raise ValueError(
                f"table: {self.table} is not a source of world {world.spec.name} ({sorted(world.tables)})"
            )
        if self.column in world.tables[self.table].columns:
            raise ValueError(f"column: {self.table} already has a column {self.column}")
        built = {n.name for n in world.project.file.nodes if not n.is_source}
        for i, node in enumerate(self.nodes):
            if node not in built:
                raise ValueError(f"nodes[{i}]: {node} is not a built node of {world.spec.project}")

    def before_load(self, world, cur, night):
        table = world.tables[self.table]
        if self.column not in world.actual_columns(cur, self.table):
            cur.execute(
                f"ALTER TABLE {table.qualified} ADD COLUMN {quote_identifier(self.column)} {self.data_type}"
            )
            if world.spec.sources[self.table].load == "once":
                # Reference rows are not reloaded: the installed ones take the first value.
                cur.execute(
                    f"UPDATE {table.qualified} SET {quote_identifier(self.column)} = %s", (self.values[0],)
                )

    def transform(self, world, frames, night):
        if self.table not in frames:
            return frames
        frame = frames[self.table].copy()
        picks = self.rng(world, night).integers(0, len(self.values), size=len(frame))
        frame[self.column] = [self.values[i] for i in picks]
        return {**frames, self.table: frame}

    def _node(self, world, name: str, source: bool):
        return next(n for n in world.project.file.nodes if n.name == name and n.is_source == source)

    def _detail(self, world, coalesce, node) -> tuple[str, dict]:
        path = f"workspace/nodes/{node_id(node.locationName, node.name)}?environmentID={world.spec.environment_id}"
        return path, sim_control(coalesce, "GET", path)

    def before_run(self, world, coalesce):
        chain = [self._node(world, self.table, True), *(self._node(world, n, False) for n in self.nodes)]
        changed = False
        for i, node in enumerate(chain):
            path, detail = self._detail(world, coalesce, node)
            columns = detail["metadata"]["columns"]
            if any(c["name"] == self.column for c in columns):
                continue  # deployed on an earlier night
            column: dict[str, Any] = {
                "name": self.column,
                "dataType": self.data_type,
                "description": self.description,
                "nullable": True,
                "transform": "",
            }
            if i:
                parent = chain[i - 1]
                column["sources"] = [
                    {
                        "transform": "",
                        "columnReferences": [
                            {
                                "nodeID": node_id(parent.locationName, parent.name),
                                "columnID": column_id(parent.locationName, parent.name, self.column),
                            }
                        ],
                    }
                ]
            detail["metadata"]["columns"] = [*columns, column]
            sim_control(coalesce, "PUT", path, detail)
            changed = True
        if changed:
            sim_control(coalesce, "POST", "deploy", {"environmentID": world.spec.environment_id})

    def repair(self, world, cur, coalesce):
        chain = [self._node(world, self.table, True), *(self._node(world, n, False) for n in self.nodes)]
        for node in reversed(chain):
            path, detail = self._detail(world, coalesce, node)
            kept = [c for c in detail["metadata"]["columns"] if c["name"] != self.column]
            if len(kept) != len(detail["metadata"]["columns"]):
                detail["metadata"]["columns"] = kept
                sim_control(coalesce, "PUT", path, detail)
        sim_control(coalesce, "POST", "deploy", {"environmentID": world.spec.environment_id})
        if self.column in world.actual_columns(cur, self.table):
            table = world.tables[self.table]
            cur.execute(f"ALTER TABLE {table.qualified} DROP COLUMN {quote_identifier(self.column)}")


GenericEvent = Annotated[
    NewKeyUnmapped
    | ReferenceRowDeleted
    | ReferenceRowRemapped
    | DuplicateLoad
    | PartialLoad
    | ReplicationStalled
    | UnitChange
    | NullJoinKey
    | ColumnRenamed
    | ColumnDropped
    | NodeFailure
    | SchedulerSkip
    | SourceNotRefreshed
    | NewKeyMapped
    | SteadyGrowth
    | ColumnAdded,
    Field(discriminator="kind"),
]
EVENTS: TypeAdapter[GenericEvent] = TypeAdapter(GenericEvent)
