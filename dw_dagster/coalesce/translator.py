"""Turns Coalesce nodes into Dagster ``AssetSpec``s. Subclass :class:`DagsterCoalesceTranslator` to change
keys, groups or metadata."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import dagster as dg

from dw_dagster.coalesce.metadata import CoalesceMetadataSet
from dw_dagster.coalesce.transforms import column_transforms
from dw_dagster.coalesce.workspace_models import (
    CoalesceEnvironment,
    CoalesceJob,
    CoalesceNode,
)

SOURCE_NODE_TYPE = "Source"
# The ids of Coalesce's two built-in column tests, as appliedColumnTests names them.
NOT_NULL_TEST = "notNull"
UNIQUE_TEST = "unique"


class CoalesceWorkspaceIndex(NamedTuple):
    """Lookups over one environment's nodes, shared by every node's props."""

    environment: CoalesceEnvironment
    nodes_by_id: Mapping[str, CoalesceNode]
    nodes_by_location_name: Mapping[tuple[str, str], CoalesceNode]
    column_names_by_id: Mapping[str, str]
    jobs_by_node: Mapping[str, Sequence[CoalesceJob]]
    """The environment's jobs whose selectors build each node, by node id."""
    key_cache: dict[str, dg.AssetKey]
    """Asset keys by node id, filled by the translator during one load."""
    spec_cache: dict[tuple[int, str], dg.AssetSpec]
    """Each node's finished spec by (translator, node id), filled during one load: a node's dependencies
    and column lineage name its parents by the keys of their finished specs."""
    json_cache: dict[object, dg.JsonMetadataValue]
    """The JSON metadata values many nodes share (the environment, a set of jobs), each made once per
    load: a JSON value is checked by a round trip through ``json``."""
    parents_cache: dict[str, list[CoalesceNode]]
    """Each node's parents, found once per load (ordering the nodes and making each spec both ask)."""
    value_cache: dict[tuple[object, ...], Any]
    """Immutable Dagster values many specs hold alike, each made once per load rather than once per use
    (every Dagster record checks its fields when made): a parent's ``AssetDep``, which each of its children
    names; a parent column's ``TableColumnDep``, which each column built from it names; a ``TableColumn``
    and a ``TableSchema``, which the nodes with the same columns hold."""

    @classmethod
    def build(
        cls,
        environment: CoalesceEnvironment,
        nodes: Sequence[CoalesceNode],
        jobs_by_node: Mapping[str, Sequence[CoalesceJob]] | None = None,
    ) -> CoalesceWorkspaceIndex:
        return cls(
            environment=environment,
            nodes_by_id={n.id: n for n in nodes},
            nodes_by_location_name={(n.location_name or "", n.name): n for n in nodes},
            column_names_by_id={c.column_id: c.name for n in nodes for c in n.metadata.columns},
            jobs_by_node=jobs_by_node or {},
            key_cache={},
            spec_cache={},
            json_cache={},
            parents_cache={},
            value_cache={},
        )

    def shared_json(self, key: object, data: list[Any] | dict[str, Any]) -> dg.JsonMetadataValue:
        """``MetadataValue.json(data)``, one value for every node whose ``key`` is the same."""
        value = self.json_cache.get(key)
        if value is None:
            value = self.json_cache[key] = dg.MetadataValue.json(data)
        return value

    def props(self, node: CoalesceNode) -> CoalesceNodeProps:
        """The props of one of the environment's nodes (a Source node is read, never built by a job)."""
        jobs = [] if node.node_type == SOURCE_NODE_TYPE else self.jobs_by_node.get(node.id, [])
        return CoalesceNodeProps(node=node, workspace=self, jobs=jobs)

    def parents(self, node: CoalesceNode) -> list[CoalesceNode]:
        """The nodes a node reads, from its source mapping's dependencies, in order, without repeats."""
        found = self.parents_cache.get(node.id)
        if found is not None:
            return found
        out: dict[str, CoalesceNode] = {}
        for mapping in node.metadata.source_mapping:
            for dep in mapping.dependencies:
                parent = self.nodes_by_location_name.get((dep.location_name, dep.node_name))
                if parent is not None:
                    out.setdefault(parent.id, parent)
        found = self.parents_cache[node.id] = list(out.values())
        return found

    def in_lineage_order(self) -> list[CoalesceNode]:
        """Every node after the nodes it reads; a cycle in the lineage is an error naming its nodes."""
        order: list[CoalesceNode] = []
        state: dict[str, int] = {}  # 1: being visited, 2: done
        for root in self.nodes_by_id.values():
            if state.get(root.id):
                continue
            stack = [(root, iter(self.parents(root)))]
            state[root.id] = 1
            while stack:
                node, parents = stack[-1]
                parent = next(parents, None)
                if parent is None:
                    stack.pop()
                    state[node.id] = 2
                    order.append(node)
                elif state.get(parent.id) == 1:
                    cycle = [n.name for n, _ in stack[[n.id for n, _ in stack].index(parent.id) :]]
                    raise ValueError(f"the nodes' lineage has a cycle: {' -> '.join([*cycle, parent.name])}")
                elif not state.get(parent.id):
                    state[parent.id] = 1
                    stack.append((parent, iter(self.parents(parent))))
        return order


class CoalesceNodeProps(NamedTuple):
    node: CoalesceNode
    workspace: CoalesceWorkspaceIndex
    jobs: Sequence[CoalesceJob]
    """The environment's jobs whose selectors build this node."""

    @property
    def environment(self) -> CoalesceEnvironment:
        return self.workspace.environment

    @property
    def table_name(self) -> str:
        return ".".join(p for p in (self.node.database, self.node.schema_name, self.node.name) if p)

    @property
    def selector(self) -> str:
        """A Coalesce selector that picks exactly this node."""
        return f"{{location: {self.node.location_name} name: {self.node.name}}}"


class DagsterCoalesceTranslator:
    """Translator class which converts Coalesce nodes into AssetSpecs.

    Override :meth:`get_asset_key` to change keys and :meth:`get_asset_spec` for anything else: a node's
    dependencies and column lineage name its parents by the keys of their finished specs, so the graph stays
    connected whichever way a key is changed.
    """

    def get_asset_key(self, node: CoalesceNode, environment: CoalesceEnvironment) -> dg.AssetKey:
        return dg.AssetKey([(node.location_name or "coalesce").lower(), node.name.lower()])

    def _key(self, node: CoalesceNode, workspace: CoalesceWorkspaceIndex) -> dg.AssetKey:
        # Every parent's key is needed once per child column that reads it: compute each once per load.
        key = workspace.key_cache.get(node.id)
        if key is None:
            key = workspace.key_cache[node.id] = self.get_asset_key(node, workspace.environment)
        return key

    def spec_of(self, node: CoalesceNode, workspace: CoalesceWorkspaceIndex) -> dg.AssetSpec:
        """The node's finished spec, as :meth:`get_asset_spec` (a subclass's, with a component's translation)
        makes it, once per load."""
        memo = (id(self), node.id)
        spec = workspace.spec_cache.get(memo)
        if spec is None:
            spec = workspace.spec_cache[memo] = self.get_asset_spec(workspace.props(node))
        return spec

    def _dep(self, parent: CoalesceNode, workspace: CoalesceWorkspaceIndex) -> dg.AssetDep:
        memo = ("dep", id(self), parent.id)
        dep = workspace.value_cache.get(memo)
        if dep is None:
            dep = workspace.value_cache[memo] = dg.AssetDep(self.spec_of(parent, workspace).key)
        return dep

    def get_group_name(self, props: CoalesceNodeProps) -> str:
        return (props.node.location_name or "coalesce").lower()

    def get_asset_spec(self, props: CoalesceNodeProps) -> dg.AssetSpec:
        node, env = props.node, props.environment
        parents = props.workspace.parents(node)
        joins = [
            m.join.join_condition for m in node.metadata.source_mapping if m.join and m.join.join_condition
        ]
        lineage = self._column_lineage(props)
        workspace = props.workspace
        job_refs = tuple((j.id, j.name) for j in props.jobs)
        coalesce = CoalesceMetadataSet.entries(
            node_id=node.id,
            node_name=node.name,
            location=node.location_name,
            node_type=node.node_type,
            environment=workspace.shared_json(
                ("environment", env.id, env.name), {"id": env.id, "name": env.name}
            ),
            selector=props.selector,
            jobs=workspace.shared_json(("jobs", job_refs), [{"id": i, "name": n} for i, n in job_refs]),
            materialization=node.materialization_type,
            join=dg.MetadataValue.md("\n\n".join(f"```sql\n{j.strip()}\n```" for j in joins))
            if joins
            else None,
            node_tests=(
                dg.MetadataValue.json([t.name for t in node.metadata.applied_node_tests])
                if node.metadata.applied_node_tests
                else None
            ),
            column_sources=column_sources_markdown(node, lineage),
            business_key=_business_key(node),
            column_transforms=_column_transforms(node),
        )
        metadata: dict[str, object] = {
            "dagster/table_name": props.table_name,
            "dagster/column_schema": self._column_schema(node, workspace),
            **coalesce,
        }
        if lineage is not None:
            metadata["dagster/column_lineage"] = lineage
        description = node.description or f"Coalesce {node.node_type} node {node.location_name}.{node.name}"
        return dg.AssetSpec(
            key=self._key(node, props.workspace),
            description=description,
            # The parents' keys as their finished specs have them: a key a subclass or a component's
            # translation changed is the key every child depends on (as dagster-dbt's translator does).
            deps=[self._dep(p, props.workspace) for p in parents],
            group_name=self.get_group_name(props),
            kinds={"coalesce", "snowflake"},
            tags={"coalesce/node_type": _tag_value(node.node_type)},
            metadata=metadata,
        )

    def _column_schema(self, node: CoalesceNode, workspace: CoalesceWorkspaceIndex) -> dg.TableSchema:
        # A column is one of a few values across the environment (a column keeps its name, type and
        # description as it flows from node to node), and so is a whole schema (a stage or view passes its
        # parent's columns through): each is made once per load and shared, as Dagster's records are
        # immutable. Making one checks every field, which 10,000 nodes of tens of columns pay for each.
        shared = workspace.value_cache
        columns = []
        for c in node.metadata.columns:
            tests = node.metadata.column_tests(c)
            nullable = c.nullable and NOT_NULL_TEST not in tests
            unique = c.unique_key or c.primary_key or UNIQUE_TEST in tests
            column_memo = ("table_column", c.name, c.data_type, c.description, nullable, unique)
            column = shared.get(column_memo)
            if column is None:
                column = shared[column_memo] = dg.TableColumn(
                    name=c.name,
                    type=c.data_type,
                    description=c.description,
                    constraints=_CONSTRAINTS[nullable, unique],
                )
            columns.append(column)
        memo = ("table_schema", *map(id, columns))  # the columns are the load's shared ones: alive, unique
        schema = shared.get(memo)
        if schema is None:
            schema = shared[memo] = dg.TableSchema(columns=columns)
        return schema

    def _column_lineage(self, props: CoalesceNodeProps) -> dg.TableColumnLineage | None:
        workspace = props.workspace
        nodes_by_id, column_names = workspace.nodes_by_id, workspace.column_names_by_id
        # This translator's parent-column deps by node id, then column id: two lookups a reference, no key
        # built for it (a load of 10,000 nodes reads about 200,000 references).
        memo = ("column_deps", id(self))
        deps_by_node: dict[str, dict[str, dg.TableColumnDep]] = workspace.value_cache.setdefault(memo, {})
        deps_by_column: dict[str, list[dg.TableColumnDep]] = {}
        for column in props.node.metadata.columns:
            deps: list[dg.TableColumnDep] = []
            for source in column.sources:
                for ref in source.column_references:
                    of_node = deps_by_node.get(ref.node_id)
                    dep = None if of_node is None else of_node.get(ref.column_id)
                    if dep is None:
                        name = column_names.get(ref.column_id)
                        parent = nodes_by_id.get(ref.node_id)
                        if parent is None or name is None:
                            continue
                        key = self.spec_of(parent, workspace).key
                        dep = dg.TableColumnDep(asset_key=key, column_name=name)
                        deps_by_node.setdefault(ref.node_id, {})[ref.column_id] = dep
                    deps.append(dep)
            if deps:
                deps_by_column[column.name] = deps
        return dg.TableColumnLineage(deps_by_column=deps_by_column) if deps_by_column else None


# A column's constraints are one of four values: made once, not once per column of every node.
_CONSTRAINTS = {
    (nullable, unique): dg.TableColumnConstraints(nullable=nullable, unique=unique)
    for nullable in (False, True)
    for unique in (False, True)
}


def _business_key(node: CoalesceNode) -> dg.JsonMetadataValue | None:
    """The node's business key columns, when the key identifies a row: a node that tracks changes keeps a
    row per version of a key (type 2), and the checks would read its repeats as duplicates."""
    columns = node.metadata.columns
    key = [c.name for c in columns if c.is_business_key]
    if not key or any(c.is_change_tracking for c in columns):
        return None
    return dg.MetadataValue.json(key)


def _column_transforms(node: CoalesceNode) -> dg.JsonMetadataValue | None:
    found = column_transforms(node.metadata.columns)
    return dg.MetadataValue.json(found) if found else None


def column_sources_markdown(
    node: CoalesceNode, lineage: dg.TableColumnLineage | None
) -> dg.MarkdownMetadataValue | None:
    """Each column with the columns it is built from and its transform, one list item a column: the
    open-source UI renders it (its column-lineage view, ``dagster/column_lineage``, is Dagster+ only), and a
    list item wraps where a table's last column would be cut off at the panel's edge."""
    if lineage is None:
        return None
    items = []
    shown: dict[dg.AssetKey, str] = {}  # each parent's key as shown, once per node
    by_column = lineage.deps_by_column
    for column in node.metadata.columns:
        deps = by_column.get(column.name)
        if deps:
            sources = []
            for d in deps:
                user = shown.get(d.asset_key)
                if user is None:
                    user = shown[d.asset_key] = d.asset_key.to_user_string()
                sources.append(f"`{user}`.`{d.column_name}`")
            built = " from " + ", ".join(sources)
        else:
            built = " (no source column)"
        transform = f"; transform `{_cell(column.transform)}`" if column.transform.strip() else ""
        items.append(f"- **`{column.name}`**{built}{transform}")
    return dg.MetadataValue.md("\n".join(items))


def _cell(text: str) -> str:
    # A table cell is one line, and a pipe or backtick would end it.
    return " ".join(text.split()).replace("|", "\\|").replace("`", "'")


def _tag_value(value: str) -> str:
    # Tag values allow letters, digits, '-', '_' and '.' only; custom node types may carry spaces.
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in value)[:63]
