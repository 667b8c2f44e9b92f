"""The benign events: what changes on a night of a world without anything going wrong (growth, a new key
mapped in time, a column added and carried through), which a detector should not alarm on."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from dw_dagster.sql import quote_identifier
from dw_local.coalesce_sim.project_specs import column_id, node_id
from dw_local.scenarios.event_base import Event, Ident, NewKeyWithRow
from dw_local.world import sim_control


class NewKeyMapped(NewKeyWithRow):
    """Benign: a new key appears in a source and its owners added its reference row the same day."""

    kind: Literal["new_key_mapped"]
    benign: ClassVar[bool] = True


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
                f"table: {self.table} is not a source of world {world.name} ({sorted(world.tables)})"
            )
        if self.column in world.tables[self.table].columns:
            raise ValueError(f"column: {self.table} already has a column {self.column}")
        built = {n.name for n in world.project.file.nodes if not n.is_source}
        for i, node in enumerate(self.nodes):
            if node not in built:
                raise ValueError(f"nodes[{i}]: {node} is not a built node of {world.project_file}")

    def before_load(self, world, cur, night):
        table = world.tables[self.table]
        if self.column not in world.actual_columns(cur, self.table):
            cur.execute(
                f"ALTER TABLE {table.qualified} ADD COLUMN {quote_identifier(self.column)} {self.data_type}"
            )
            if world.source_load(self.table) == "once":
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
