"""New columns that look sensitive, found when a finished Coalesce run is reported.

For the environment of the run, the nodes as deployed now (one ``GET /nodes?detail=true``: what a state
refresh reads) are compared with the columns last seen (:mod:`dw_dagster.governance.columns`). A new column
is judged by its name and description, then, when the run built or read its node, by a bounded sample of
its values (one ``SELECT ... LIMIT`` per column, from a run that has work, never from idle polling). A
sensitive one becomes a WARN finding for the governance owners with where the column reaches downstream
through the nodes' column lineage and the systems reading those tables. Nothing is changed. A new column
that a sensitive new column feeds is part of that column's path, not a finding of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

import networkx as nx

from dw_dagster.coalesce.workspace_models import CoalesceColumn, CoalesceNode
from dw_dagster.context.governance import GovernanceConfig
from dw_dagster.context.models import ContextFile
from dw_dagster.governance.detectors import Detectors, Match
from dw_dagster.records.incidents import Finding
from dw_dagster.sql import quote_identifier, table_reference
from dw_dagster.warehouse.resources import WarehouseResource

log = logging.getLogger(__name__)

CHECK_NAME = "sensitive_column"
# Types whose values can hold an identifier written as text or digits; dates, times, booleans and floats
# are judged by their names only.
SAMPLED_TYPES = (
    "VARCHAR",
    "STRING",
    "TEXT",
    "CHAR",
    "NUMBER",
    "DECIMAL",
    "NUMERIC",
    "INT",
    "BIGINT",
    "VARIANT",
)


@dataclass(frozen=True)
class NewColumn:
    environment_id: str
    node: CoalesceNode
    column: CoalesceColumn
    asset_key: str

    @property
    def label(self) -> str:
        return f"{self.asset_key}.{self.column.name}"


@dataclass
class Review:
    """What one review saw: the columns new since the last one and the findings among them."""

    new_columns: list[NewColumn] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    sampled: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """New columns whose sample could not be read: judged by name only, and said so."""


def new_columns(
    environment_id: str,
    nodes: Sequence[CoalesceNode],
    previous: Mapping[str, Iterable[str]],
    asset_key_of: Callable[[CoalesceNode], str],
) -> list[NewColumn]:
    """Columns of nodes seen before that were not there then (a node never seen is a new table: its
    columns become known without a finding, as at the first review)."""
    out = []
    for node in nodes:
        if node.id not in previous:
            continue
        known = {c.upper() for c in previous[node.id]}
        for column in node.metadata.columns:
            if column.name.upper() not in known:
                out.append(NewColumn(environment_id, node, column, asset_key_of(node)))
    return out


class ColumnGraph:
    """Column lineage over the nodes as deployed now: (node id, column id) edges, upstream to downstream."""

    def __init__(self, nodes: Sequence[CoalesceNode]):
        self.graph = nx.DiGraph()
        self.names: dict[tuple[str, str], tuple[CoalesceNode, CoalesceColumn]] = {}
        for node in nodes:
            for column in node.metadata.columns:
                self.names[(node.id, column.column_id)] = (node, column)
                self.graph.add_node((node.id, column.column_id))
                for source in column.sources:
                    for ref in source.column_references:
                        self.graph.add_edge((ref.node_id, ref.column_id), (node.id, column.column_id))

    def downstream(
        self, node: CoalesceNode, column: CoalesceColumn
    ) -> list[tuple[CoalesceNode, CoalesceColumn]]:
        start = (node.id, column.column_id)
        if start not in self.graph:
            return []
        reached = nx.descendants(self.graph, start)
        order = [n for n in nx.topological_sort(self.graph.subgraph(reached)) if n in self.names]
        return [self.names[n] for n in order]

    def upstream(self, node: CoalesceNode, column: CoalesceColumn) -> set[tuple[str, str]]:
        start = (node.id, column.column_id)
        return nx.ancestors(self.graph, start) if start in self.graph else set()


class SensitiveColumnWatch:
    """Reviews the columns of an environment after a run; see the module docstring."""

    def __init__(self, context: ContextFile | None, warehouse: WarehouseResource | None):
        self.context = context
        self.config: GovernanceConfig = (context.governance if context else None) or GovernanceConfig()
        self.detectors = Detectors(self.config)
        self.warehouse = warehouse

    def owners(self, asset_key: str) -> list[str]:
        if self.config.owners:
            return list(self.config.owners)
        return list(self.context.owners_for(asset_key)) if self.context else []

    def review(
        self,
        *,
        environment_id: str,
        nodes: Sequence[CoalesceNode],
        previous: Mapping[str, Iterable[str]],
        asset_key_of: Callable[[CoalesceNode], str],
        touched_node_ids: Iterable[str],
        business_date: date,
        coalesce_run_id: str | None = None,
        run_tag: Mapping[str, str] | None = None,
    ) -> Review:
        review = Review(new_columns=new_columns(environment_id, nodes, previous, asset_key_of))
        if not review.new_columns:
            return review
        touched = set(touched_node_ids)
        graph = ColumnGraph(nodes)
        flagged: list[tuple[NewColumn, Match]] = []
        for new in review.new_columns:
            if self.config.ignored(new.asset_key, new.column.name):
                continue
            match = self.detectors.by_metadata(new.column.name, new.column.description)
            if match is None and new.node.id in touched and self._samplable(new.column):
                match = self._by_sample(new, review, run_tag or {})
            if match is not None:
                flagged.append((new, match))
        flagged_ids = {(n.node.id, n.column.column_id) for n, _ in flagged}
        for new, match in flagged:
            # A column fed by another flagged new column is on that one's path.
            if graph.upstream(new.node, new.column) & flagged_ids:
                continue
            review.findings.append(
                self._finding(new, match, graph, asset_key_of, business_date, coalesce_run_id)
            )
        return review

    @staticmethod
    def _samplable(column: CoalesceColumn) -> bool:
        return column.data_type.upper().startswith(SAMPLED_TYPES)

    def _by_sample(self, new: NewColumn, review: Review, run_tag: Mapping[str, str]) -> Match | None:
        node = new.node
        if self.warehouse is None or not (node.database and node.schema_name):
            return None
        column = quote_identifier(new.column.name)
        table = table_reference(node.database, node.schema_name, node.name)
        sql = f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL LIMIT ?"
        try:
            with self.warehouse.tagged_connection(
                "governance.sample", asset=new.asset_key, column=new.column.name, **run_tag
            ) as conn:
                cur = conn.cursor()
                cur.execute(sql, (self.config.sample_rows,))
                values = [row[0] for row in cur.fetchall()]
        except Exception as e:  # noqa: BLE001 - judged by name only, and the review says so
            review.errors.append(f"{new.label}: sample not read ({type(e).__name__}: {e})")
            log.warning("%s: sample not read; judged by its name and description only: %s", new.label, e)
            return None
        review.sampled.append(new.label)
        return self.detectors.by_values(values)

    def _finding(
        self,
        new: NewColumn,
        match: Match,
        graph: ColumnGraph,
        asset_key_of: Callable[[CoalesceNode], str],
        business_date: date,
        coalesce_run_id: str | None,
    ) -> Finding:
        reached = [f"{asset_key_of(n)}.{c.name}" for n, c in graph.downstream(new.node, new.column)]
        assets = list(dict.fromkeys([new.asset_key, *(r.rsplit(".", 1)[0] for r in reached)]))
        systems = self._systems_reading(assets)
        owners = self.owners(new.asset_key)
        category = match.category.replace("_", " ")
        why = {"name": "its name", "description": "its description"}.get(match.by, match.detail)
        path = " -> ".join([new.label, *reached]) if reached else f"{new.label} (no column downstream yet)"
        summary = (
            f"New column {new.label} looks like {category} data ({why}); it reaches {path}"
            + (f", read by {', '.join(systems)}" if systems else "")
            + ". Nothing was changed."
        )
        return Finding(
            check_name=CHECK_NAME,
            asset_key=new.asset_key,
            business_date=business_date,
            summary=summary,
            severity="WARN",
            evidence={
                "column": new.column.name,
                "data_type": new.column.data_type,
                "description": new.column.description,
                "category": match.category,
                "matched_by": match.by,
                "matched": match.detail,
                "table": ".".join(p for p in (new.node.database, new.node.schema_name, new.node.name) if p),
                "downstream_columns": reached,
                "downstream_assets": assets[1:],
                "systems": systems,
                "owners": owners,
                "environment_id": new.environment_id,
                "node_id": new.node.id,
            },
            # Its own incident: a governance question, not the cause of a wrong number.
            cause_scope=f"{CHECK_NAME}:{new.asset_key}.{new.column.name}",
            coalesce_run_id=coalesce_run_id,
        )

    def _systems_reading(self, assets: Sequence[str]) -> list[str]:
        if not self.context:
            return []
        wanted = set(assets)
        return [s.name for s in self.context.systems if wanted & set(s.upstream)]
