"""A node sent back in the API's full node shape, as the workspace's node update takes it: read into the
file's node and checked against the rest of the graph, each problem naming the field in the API's shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dw_local.coalesce_sim.node_checks import check_nodes
from dw_local.coalesce_sim.node_graph import NodeGraph
from dw_local.coalesce_sim.problems import format_loc
from dw_local.coalesce_sim.project_specs import (
    COLUMN_TESTS,
    ColumnSpec,
    EnvironmentSpec,
    NodeSpec,
    NodeTestSpec,
    Text,
)


class _ApiModel(BaseModel):
    # A node is sent back as it was read: read-only fields come along and are ignored.
    model_config = ConfigDict(extra="ignore")


class _ApiColumnReference(_ApiModel):
    nodeID: str
    columnID: str


class _ApiColumnSource(_ApiModel):
    transform: str = ""
    columnReferences: list[_ApiColumnReference] = []


class _ApiColumn(_ApiModel):
    name: Text
    dataType: Text
    description: str | None = None
    nullable: bool = True
    transform: str = ""
    isBusinessKey: bool = False
    isSurrogateKey: bool = False
    primaryKey: bool = False
    uniqueKey: bool = False
    appliedColumnTests: dict[str, bool] = {}
    sources: list[_ApiColumnSource] = []


class _ApiJoin(_ApiModel):
    joinCondition: str = ""


class _ApiCustomSQL(_ApiModel):
    customSQL: str = ""


class _ApiSourceMapping(_ApiModel):
    join: _ApiJoin = _ApiJoin()
    customSQL: _ApiCustomSQL = _ApiCustomSQL()


class _ApiNodeTest(_ApiModel):
    name: Text
    description: str | None = None
    continueOnFailure: bool = False
    runOrder: Literal["Before", "After"] = "After"
    templateString: Text


class _ApiMetadata(_ApiModel):
    columns: list[_ApiColumn] = Field(min_length=1)
    sourceMapping: list[_ApiSourceMapping] = Field(default=[], max_length=1)
    appliedNodeTests: list[_ApiNodeTest] = []


class ApiNode(_ApiModel):
    id: str | None = None
    name: Text
    nodeType: Text
    locationName: Text
    description: str | None = None
    materializationType: Literal["table", "view"] | None = None
    isMultisource: Literal[False] = False
    overrideSQL: Literal[False] = False
    metadata: _ApiMetadata


class NodeEditError(ValueError):
    """An edited node that cannot be applied; each problem names the field in the API's shape."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


# File field -> API field, for problems found by check_nodes on an edited node.
_API_FIELDS = [
    (re.compile(r"^join$"), "metadata.sourceMapping[0].join.joinCondition"),
    (
        re.compile(r"^columns\[(\d+)\]\.sources\[(\d+)\]$"),
        r"metadata.columns[\1].sources[0].columnReferences[\2]",
    ),
    (re.compile(r"^columns\[(\d+)\]\.tests"), r"metadata.columns[\1].appliedColumnTests"),
    (re.compile(r"^columns\["), "metadata.columns["),
    (re.compile(r"^tests\[(\d+)\]\.sql$"), r"metadata.appliedNodeTests[\1].templateString"),
    (re.compile(r"^tests\["), "metadata.appliedNodeTests["),
]


def _api_field(field: str) -> str:
    for pattern, replacement in _API_FIELDS:
        if pattern.search(field):
            return pattern.sub(replacement, field)
    return field


def parse_api_node(
    node_id_: str, payload: Any, graph: NodeGraph, environments: Sequence[EnvironmentSpec]
) -> NodeSpec:
    """An edited node, sent in the API's full node shape, checked against the rest of ``graph``.

    Raises:
        NodeEditError: naming each offending field (``metadata.columns[2].dataType``).
    """
    try:
        api = ApiNode.model_validate(payload)
    except ValidationError as e:
        raise NodeEditError(
            [f"{format_loc(err['loc']) or '<body>'}: {err['msg']}" for err in e.errors(include_url=False)]
        ) from None
    current = graph.nodes[node_id_]
    fixed = {"id": node_id_, "name": current.name, "locationName": current.locationName}
    problems = [
        f"{field}: is {getattr(api, field)!r}; the simulator edits nodes in place (expected {expected!r})"
        for field, expected in fixed.items()
        if getattr(api, field) is not None and getattr(api, field) != expected
    ]
    columns = []
    for i, column in enumerate(api.metadata.columns):
        sources = []
        for j, ref in enumerate(r for s in column.sources for r in s.columnReferences):
            source = graph.column_source(ref.nodeID, ref.columnID)
            if source is None:
                problems.append(
                    f"metadata.columns[{i}].sources[0].columnReferences[{j}]: "
                    f"no column {ref.columnID} in node {ref.nodeID}"
                )
            else:
                sources.append(source)
        unknown = sorted(set(column.appliedColumnTests) - set(COLUMN_TESTS))
        if unknown:
            problems.append(
                f"metadata.columns[{i}].appliedColumnTests: unknown tests {unknown} "
                f"(expected {list(COLUMN_TESTS)})"
            )
        columns.append(
            ColumnSpec(
                name=column.name,
                dataType=column.dataType,
                description=column.description or "",
                nullable=column.nullable,
                transform=column.transform or None,
                sources=sources,
                tests=[t for t in COLUMN_TESTS if column.appliedColumnTests.get(t)],
                isBusinessKey=column.isBusinessKey,
                isSurrogateKey=column.isSurrogateKey,
                primaryKey=column.primaryKey,
                uniqueKey=column.uniqueKey,
            )
        )
    mapping = api.metadata.sourceMapping[0] if api.metadata.sourceMapping else _ApiSourceMapping()
    if mapping.customSQL.customSQL.strip():
        problems.append("metadata.sourceMapping[0].customSQL.customSQL: custom SQL is not simulated")
    if problems:
        raise NodeEditError(problems)
    edited = NodeSpec(
        name=current.name,
        nodeType=api.nodeType,
        locationName=current.locationName,
        description=api.description or "",
        materializationType=api.materializationType,
        join=mapping.join.joinCondition,
        columns=columns,
        tests=[
            NodeTestSpec(
                name=t.name,
                description=t.description or "",
                sql=t.templateString,
                continueOnFailure=t.continueOnFailure,
                runOrder=t.runOrder,
            )
            for t in api.metadata.appliedNodeTests
        ],
    )
    problems = check_nodes(list(graph.replace(edited).nodes.values()), environments)
    if problems:
        # An edit can also break a node that reads this one (a removed column it selects).
        raise NodeEditError(
            [
                f"{_api_field(p.field)}: {p.message}"
                if p.subject == f"node {edited.label}"
                else f"breaks {p.subject}: {p.field}: {p.message}"
                for p in problems
            ]
        )
    return edited
