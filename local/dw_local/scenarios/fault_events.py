"""The fault vocabulary: what goes wrong on a night of a world, each a real change to what the pipeline reads
or runs (``events.py`` says how a night plays them)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from dw_dagster.sql import quote_identifier
from dw_local.scenarios.event_base import Event, Fraction, Ident, NewKey, NewKeyWithRow
from dw_local.scenarios.event_rows import matching, pick_matching, restore_rows, where_sql
from dw_local.world import WorldError, sim_control

# A column a node_failure adds to a node carries this description, so repair finds exactly it.
NODE_FAILURE_MARKER = "dw_local scenario: node_failure"


class NewKeyUnmapped(NewKey):
    """The reference night: a new key appears in a source (a storefront, an org) and the reference table the
    pipeline inner-joins to has no row for it. ``fraction`` of the night's rows (those matching ``where``)
    carry the new ``value`` in ``column``."""

    kind: Literal["new_key_unmapped"]


class NewKeyParentUnmapped(NewKeyWithRow):
    """A new key one join further up: a new key appears in a source and its owners add its reference row the
    same day (as ``new_key_mapped``), but that row names a key of the next reference table up (``parent``,
    ``TABLE.COLUMN``: a new biller for a new payee code) that table has no row for, so a join on it drops
    the new key's rows. List it on every night the key keeps arriving; its row is added once."""

    kind: Literal["new_key_parent_unmapped"]
    parent: str = Field(pattern=r"^[A-Z_][A-Z0-9_$]*\.[A-Z_][A-Z0-9_$]*$", description="TABLE.COLUMN")

    def check(self, world):
        super().check(world)
        table, column = self.parent.split(".")
        if table not in world.tables or world.source_load(table) != "once":
            raise ValueError(f"parent: {table} is not a load: once (reference) source of world {world.name}")
        if column not in world.tables[table].columns:
            raise ValueError(f"parent: {table} has no column {column}")
        if column not in self.row:
            raise ValueError(f"row: names no {column}, the key of the parent {table} it points at")
        if self.row[column] in set(world.once_frame(table)[column]):
            raise ValueError(
                f"parent: {table} has a row for {column}={self.row[column]!r}: the new key would be mapped "
                "all the way up (that is new_key_mapped)"
            )


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
        clause, args = where_sql(self.where)
        cur.execute(f"DELETE FROM {world.tables[self.table].qualified} WHERE {clause}", args)
        if not cur.rowcount:
            raise WorldError(f"reference_row_deleted: no row of {self.table} matches {self.where}")

    def repair(self, world, cur, coalesce):
        restore_rows(world, cur, self.table, self.where)


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
        edit = {**self.set, **world.edit_stamp(self.table, night)}
        assignments = ", ".join(f"{quote_identifier(c)} = %s" for c in edit)
        clause, args = where_sql(self.where)
        cur.execute(
            f"UPDATE {world.tables[self.table].qualified} SET {assignments} WHERE {clause}",
            (*edit.values(), *args),
        )

    def repair(self, world, cur, coalesce):
        restore_rows(world, cur, self.table, self.where)


class DuplicateLoad(Event):
    """Replication applies the night's rows (``where``, ``fraction``) twice, identical to the last column."""

    kind: Literal["duplicate_load"]
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: Ident
    fraction: Fraction = 1.0
    where: dict[str, Any] | None = None

    def transform(self, world, frames, night):
        frame = frames[self.table]
        rows = pick_matching(self, frame, self.rng(world, night))
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
        missing = pick_matching(self, frame, self.rng(world, night))
        return {**frames, self.table: frame[~missing].reset_index(drop=True)}


class ReplicationStalled(Event):
    """Replication delivers nothing for the night; the job still runs. The next night played catches up
    (its own rows plus the missed night's)."""

    kind: Literal["replication_stalled"]
    loads_source: ClassVar[bool] = False

    def reloaded(self, world):
        return {name for name in world.tables if world.source_load(name) != "once"}


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
        rows = matching(frame, self.where)
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
    """A surge of NULLs in a join key (its rows drop out of an inner join), or in any column (a value: a
    group whose values are all NULL): ``fraction`` of the night's rows arrive with ``column`` NULL (the column
    made nullable first, as a replication target often is; it stays nullable)."""

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
        rows = pick_matching(self, frame, self.rng(world, night))
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

    def reloaded(self, world):
        return {self.table}  # the rows loaded meanwhile lack the column's values

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
            raise ValueError(f"node: {self.node} is not a built node of {world.project_file}")
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
        if world.source_load(self.table) == "once" and not world.refreshed(self.table):
            raise ValueError(
                f"table: {self.table} is load: once and never re-synced, so it cannot go stale: give it a "
                f"nightly refresh in the world file (sources.{self.table}.refresh) to play it not refreshed"
            )

    def held_tables(self):
        return {self.table}

    def reloaded(self, world):
        return {self.table}
