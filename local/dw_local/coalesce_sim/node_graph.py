"""The lineage of a set of nodes from their join refs: dependency order, cycles, ancestors, column sources."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property

from dw_dagster.coalesce.sql import find_refs
from dw_local.coalesce_sim.project_specs import NodeSpec


class NodeGraph:
    """A set of nodes (one environment's, or the workspace's) with their lineage from the join refs."""

    def __init__(self, nodes: Iterable[NodeSpec]):
        self.nodes: dict[str, NodeSpec] = {n.id: n for n in nodes}
        self._position = {node_id: k for k, node_id in enumerate(self.nodes)}
        self.ids_by_key = {n.key: i for i, n in self.nodes.items()}
        self.parents: dict[str, list[str]] = {
            i: [self.ids_by_key[ref] for ref in find_refs(n.join) if ref in self.ids_by_key]
            for i, n in self.nodes.items()
        }

    @cached_property
    def edges(self) -> list[tuple[str, str]]:
        return [(parent, child) for child, parents in self.parents.items() for parent in parents]

    def _kahn(self) -> tuple[list[str], set[str]]:
        waiting = {i: len(set(p)) for i, p in self.parents.items()}
        children: dict[str, list[str]] = {i: [] for i in self.nodes}
        for parent, child in set(self.edges):
            children[parent].append(child)
        order: list[str] = []
        ready = [i for i in self.nodes if waiting[i] == 0]
        while ready:
            current = ready.pop(0)
            order.append(current)
            for child in sorted(children[current], key=self._position.__getitem__):
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
        return order, set(self.nodes) - set(order)

    @cached_property
    def order(self) -> list[str]:
        """Node ids in dependency order, ties kept in file order."""
        return self._kahn()[0]

    def cycle(self) -> list[NodeSpec]:
        stuck = self._kahn()[1]
        if not stuck:
            return []
        # Walk parents inside the stuck set until a node repeats: that loop is a cycle.
        path = [min(stuck, key=self._position.__getitem__)]
        while True:
            parent = next(p for p in self.parents[path[-1]] if p in stuck)
            if parent in path:
                # In the direction data flows, from the loop's first node in file order, back to it.
                flow = path[path.index(parent) :][::-1]
                first = flow.index(min(flow, key=self._position.__getitem__))
                flow = flow[first:] + flow[:first]
                return [self.nodes[i] for i in [*flow, flow[0]]]
            path.append(parent)

    def ancestors(self, node: str) -> set[str]:
        seen: set[str] = set()
        todo = list(self.parents[node])
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo += self.parents[current]
        return seen

    def replace(self, node: NodeSpec) -> NodeGraph:
        return NodeGraph(node if i == node.id else n for i, n in self.nodes.items())

    def column_source(self, node: str, column: str) -> str | None:
        """``LOC.NODE.COLUMN`` for a node id and column id, or None."""
        spec = self.nodes.get(node)
        if spec is None:
            return None
        names = (c.name for c in spec.columns if spec.column_id(c.name) == column)
        return next((f"{spec.label}.{name}" for name in names), None)
