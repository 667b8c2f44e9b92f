"""Lineage up or down from an asset or one of its columns, through the Coalesce nodes and the systems the
context file places around them (sources, replication, dashboards and who reads them when)."""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

import networkx as nx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from dw_dagster.app.mcp.answers import Answer, answer, table
from dw_dagster.app.mcp.incident_tools import READ_ONLY
from dw_dagster.app.mcp.workspace import Workspace
from dw_dagster.context.lineage import LineageGraph

Direction = Literal["upstream", "downstream"]


class LineageAsset(BaseModel):
    asset_key: str
    distance: int = Field(description="Steps from the starting asset (0: the asset itself).")
    name: str
    kinds: list[str] = Field(description="e.g. coalesce/snowflake for a node, or the system's kind.")
    owners: list[str]
    table: str | None = Field(description="The Snowflake table of a Coalesce node.")
    reads: list[dict] = Field(description="Who reads a system and when (context file).")


class LineageColumn(BaseModel):
    asset_key: str
    column: str
    distance: int


class LineageTrace(Answer):
    asset_key: str
    column: str | None
    direction: Direction
    assets: list[LineageAsset]
    columns: list[LineageColumn] = Field(description="Column lineage, when a column was given.")


def resolve_asset(graph: LineageGraph, asset: str) -> str:
    """An asset key path, a Snowflake table (``DB.SCHEMA.NAME``) or a node name, to its key."""
    if asset in graph:
        return asset
    by_table = graph.key_for_table(asset)
    if by_table:
        return by_table
    keys = list(graph.assets.nodes)
    named = [k for k in keys if k.rsplit("/", 1)[-1].lower() == asset.lower()]
    if len(named) == 1:
        return named[0]
    if len(named) > 1:
        raise ToolError(f"{asset!r} names several assets: {', '.join(sorted(named))}; give the key path")
    close = difflib.get_close_matches(asset.lower(), [k.lower() for k in keys], n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ToolError(f"{asset!r}: no such asset in the lineage ({len(keys)} assets){hint}")


def _column(graph: LineageGraph, key: str, column: str) -> str:
    info = graph.info(key)
    known = list(info.columns) or sorted({c for k, c in graph.columns.nodes if k == key})
    match = next((c for c in known if c.lower() == column.lower()), None)
    if match is None:
        raise ToolError(
            f"{key} has no column {column!r} (its columns: {', '.join(known) or 'none recorded'})"
        )
    return match


def trace(
    graph: LineageGraph,
    asset: str,
    column: str | None = None,
    direction: Direction = "downstream",
    depth: int | None = None,
) -> LineageTrace:
    key = resolve_asset(graph, asset)
    g = graph.assets if direction == "downstream" else graph.assets.reverse(copy=False)
    reached = nx.single_source_shortest_path_length(g, key, cutoff=depth)
    columns: list[LineageColumn] = []
    if column is not None:
        name = _column(graph, key, column)
        cg = graph.columns if direction == "downstream" else graph.columns.reverse(copy=False)
        start = (key, name)
        hops = nx.single_source_shortest_path_length(cg, start, cutoff=depth) if start in cg else {start: 0}
        columns = [LineageColumn(asset_key=k, column=c, distance=d) for (k, c), d in hops.items()]
        columns.sort(key=lambda c: (c.distance, c.asset_key, c.column))
        # A column's trace keeps the assets its column lineage reaches and the systems beyond those.
        kept = {c.asset_key for c in columns} & set(reached)
        for k, _ in sorted(reached.items(), key=lambda kv: kv[1]):
            if not _is_node(graph, k) and any(p in kept for p in g.predecessors(k)):
                kept.add(k)
        reached = {k: d for k, d in reached.items() if k in kept}
        column = name
    assets = [_asset(graph, k, d) for k, d in sorted(reached.items(), key=lambda kv: (kv[1], kv[0]))]
    return LineageTrace(
        asset_key=key,
        column=column,
        direction=direction,
        assets=assets,
        columns=columns,
        text=_text(key, column, direction, assets, columns),
    )


def _is_node(graph: LineageGraph, key: str) -> bool:
    return graph.info(key).table_name is not None


def _asset(graph: LineageGraph, key: str, distance: int) -> LineageAsset:
    info = graph.info(key)
    return LineageAsset(
        asset_key=key,
        distance=distance,
        name=(info.description or key).splitlines()[0].strip() or key,
        kinds=sorted(info.kinds),
        owners=list(info.owners),
        table=info.table_name,
        reads=list(info.reads),
    )


def _reads(reads: list[dict]) -> str:
    return "; ".join(" ".join(str(v) for v in r.values() if v) for r in reads)


def _text(key, column, direction, assets, columns) -> str:
    start = f"{key}.{column}" if column else key
    lines = [f"### {direction.capitalize()} of {start}", ""]
    lines.append(
        table(
            ["step", "asset", "name", "kind", "owners", "table", "read by"],
            [
                [
                    a.distance,
                    a.asset_key,
                    a.name,
                    ", ".join(a.kinds),
                    ", ".join(a.owners),
                    a.table,
                    _reads(a.reads),
                ]
                for a in assets
            ],
        )
    )
    if column:
        lines += ["", "#### Column lineage", ""]
        lines.append(
            table(["step", "asset", "column"], [[c.distance, c.asset_key, c.column] for c in columns])
        )
    return "\n".join(lines)


def register(server: MCPServer, ws: Workspace) -> None:
    @server.tool(annotations=READ_ONLY)
    def trace_lineage(
        asset: Annotated[str, Field(description="An asset key path, a Snowflake table or a node name.")],
        direction: Direction = "downstream",
        column: Annotated[str | None, Field(description="Trace this column's lineage too.")] = None,
        depth: Annotated[int | None, Field(ge=1, description="At most this many steps.")] = None,
    ) -> Annotated[CallToolResult, LineageTrace]:
        """Who a wrong number reaches (downstream) or where it comes from (upstream): the Coalesce nodes with
        their tables and owners, and the systems around the pipeline from the context file (sources,
        replication tasks, dashboards, with who reads them and when). With ``column``, the column's own
        lineage, node by node."""
        return answer(trace(ws.lineage, asset, column, direction, depth))
