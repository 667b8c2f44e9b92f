"""The lineage graph: every asset (Coalesce nodes and the systems around them) and every column edge, as
networkx graphs, for walking from a wrong number to its cause and to everyone who reads it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import dagster as dg
import networkx as nx

from dw_dagster.coalesce.transforms import TransformRead

Column = tuple[str, str]
"""(asset key path, column name)"""


@dataclass(frozen=True)
class AssetInfo:
    key: str
    description: str
    kinds: frozenset[str]
    owners: tuple[str, ...]
    table_name: str | None
    node_type: str | None
    join: str | None
    reads: tuple[dict, ...]
    columns: tuple[str, ...]
    column_types: tuple[str, ...] = ()
    """The Snowflake type of each of ``columns``, in the same order (``NUMBER(38,0)``, ``TIMESTAMP_NTZ``)."""

    unique: tuple[str, ...] = ()
    """Columns declared unique (a unique test, a unique or primary key)."""

    transforms: tuple[tuple[str, TransformRead], ...] = ()
    """What the columns' transforms say to the diagnosis (``coalesce/column_transforms``), by column: a
    non-additive aggregate, the columns read only through a default. Only the columns that say something."""

    def type_of(self, column: str) -> str:
        return dict(zip(self.columns, self.column_types, strict=False)).get(column, "")

    def transform_of(self, column: str) -> TransformRead | None:
        return next((t for c, t in self.transforms if c == column), None)


def _md(spec: dg.AssetSpec, key: str):
    value = spec.metadata.get(key)
    return getattr(value, "value", getattr(value, "data", value))


class LineageGraph:
    """Asset and column lineage over asset specs; keys are asset key paths like ``sales/fct_orders``."""

    def __init__(self, specs: Iterable[dg.AssetSpec]):
        self.assets = nx.DiGraph()
        self.columns = nx.DiGraph()
        for spec in specs:
            key = spec.key.to_user_string()
            join = _md(spec, "coalesce/join")
            self.assets.add_node(
                key,
                info=AssetInfo(
                    key=key,
                    description=spec.description or "",
                    kinds=frozenset(spec.kinds or ()),
                    owners=tuple(spec.owners or ()),
                    table_name=_md(spec, "dagster/table_name"),
                    node_type=_md(spec, "coalesce/node_type"),
                    join=_strip_fences(join) if isinstance(join, str) else None,
                    reads=tuple(_md(spec, "dw/reads") or ()),
                    columns=tuple(c.name for c in getattr(_md(spec, "dagster/column_schema"), "columns", ())),
                    column_types=tuple(
                        str(c.type) for c in getattr(_md(spec, "dagster/column_schema"), "columns", ())
                    ),
                    unique=tuple(
                        c.name
                        for c in getattr(_md(spec, "dagster/column_schema"), "columns", ())
                        if c.constraints and c.constraints.unique
                    ),
                    transforms=_transforms(_md(spec, "coalesce/column_transforms")),
                ),
            )
            for dep in spec.deps:
                self.assets.add_edge(dep.asset_key.to_user_string(), key)
            lineage = spec.metadata.get("dagster/column_lineage")
            if lineage is not None:
                for column, deps in lineage.deps_by_column.items():
                    for dep in deps:
                        self.columns.add_edge(
                            (dep.asset_key.to_user_string(), dep.column_name), (key, column)
                        )

    def key_for_table(self, table: str) -> str | None:
        """The asset of a Snowflake table, given as ``DB.SCHEMA.NAME`` (quoted or not)."""
        plain = table.replace('"', "")
        return next((k for k, d in self.assets.nodes(data=True) if d["info"].table_name == plain), None)

    def info(self, key: str) -> AssetInfo:
        return self.assets.nodes[key]["info"]

    def __contains__(self, key: str) -> bool:
        return key in self.assets

    def upstream(self, key: str) -> set[str]:
        return nx.ancestors(self.assets, key)

    def downstream(self, key: str) -> set[str]:
        return nx.descendants(self.assets, key)

    def path(self, source: str, target: str) -> list[str]:
        """The nodes on every path from ``source`` to ``target``, in topological order."""
        if source == target:
            return [source]
        between = (nx.descendants(self.assets, source) | {source}) & (
            nx.ancestors(self.assets, target) | {target}
        )
        return [n for n in nx.topological_sort(self.assets.subgraph(between))]

    def column_ancestors(self, *columns: Column) -> set[Column]:
        """Every column any of ``columns`` is derived from, walking column lineage upstream (none for a column
        without lineage)."""
        return set().union(*(nx.ancestors(self.columns, c) for c in columns if c in self.columns))

    def column_sources(self, column: Column) -> list[Column]:
        """The columns one step upstream of ``column``."""
        return list(self.columns.predecessors(column)) if column in self.columns else []

    def aggregates_between(self, source: Column, column: Column) -> list[tuple[Column, str]]:
        """The aggregates applied to ``source``'s values on the way to ``column`` (derived from it), each with
        the column that applies it (``column`` included, ``source`` not: its values are what is aggregated).
        A sum is none of them."""
        if source not in self.columns or column not in self.columns:
            return []
        between = nx.descendants(self.columns, source) & (nx.ancestors(self.columns, column) | {column})
        out = []
        for c in sorted(between):
            read = self.info(c[0]).transform_of(c[1]) if c[0] in self.assets else None
            if read is not None and read.aggregate:
                out.append((c, read.aggregate))
        return out

    def trace_column(self, column: Column, to_asset: str) -> Column | None:
        """The column of ``to_asset`` that ``column`` is derived from, walking column lineage upstream."""
        if column[0] == to_asset:
            return column
        if column not in self.columns:
            return None
        for ancestor in nx.ancestors(self.columns, column):
            if ancestor[0] == to_asset:
                return ancestor
        return None

    def owners_on(self, keys: Sequence[str]) -> list[str]:
        out: dict[str, None] = {}
        for key in keys:
            for owner in self.info(key).owners:
                out.setdefault(owner, None)
        return list(out)


def _transforms(data: object) -> tuple[tuple[str, TransformRead], ...]:
    if not isinstance(data, dict):
        return ()
    return tuple((str(c), TransformRead.from_json(t)) for c, t in data.items() if isinstance(t, dict))


def _strip_fences(markdown: str) -> str:
    # The translator shows join conditions as markdown code blocks.
    lines = [line for line in markdown.strip().splitlines() if not line.startswith("```")]
    return "\n".join(lines).strip()
