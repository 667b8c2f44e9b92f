"""The Coalesce project file (``docs/project-file.md``): its models, its checks, and its expansion into the
shapes of Coalesce's API (``docs/coalesce-api.md``).

Every problem names the file, the node (or environment, job, schedule) and the field, so that whoever
edits the file can go straight to the line.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from dw_dagster.coalesce.selectors import SelectorError, parse_selector
from dw_dagster.coalesce.sql import RefSyntaxError, find_refs, resolve_refs

# Ids must survive restarts and edits: derived from names, never random.
_ID_NAMESPACE = uuid.NAMESPACE_URL
SOURCE_NODE_TYPE = "Source"
COLUMN_TESTS = ("unique", "notNull")
# Fields the file does not carry, reported the same for every environment.
ENVIRONMENT_CREATED_AT = "2024-01-08T15:00:00.000Z"
ENVIRONMENT_CREATED_BY = {"id": "1", "firstName": "Local", "lastName": "Simulator"}


def node_id(location: str, name: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, f"{location}.{name}"))


def column_id(location: str, name: str, column: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, f"{location}.{name}.{column}"))


# ------------------
# The file's models
# ------------------

DigitId = Annotated[str, StringConstraints(pattern=r"^\d+$")]
Text = Annotated[str, StringConstraints(min_length=1)]
SourceColumn = Annotated[str, StringConstraints(pattern=r"^[^.\s]+\.[^.\s]+\.[^.\s]+$")]


class _FileModel(BaseModel):
    # Unknown keys are typos in a hand-written file; ids may be written unquoted.
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, frozen=True, populate_by_name=True)


class ProjectInfo(_FileModel):
    id: DigitId
    name: Text
    # The organization the project belongs to: cancelRun must name it (orgID).
    orgID: Text = "1"


class StorageLocation(_FileModel):
    database: Text
    # `schema` would shadow a BaseModel attribute.
    schema_name: Text = Field(alias="schema")


class EnvironmentSpec(_FileModel):
    id: DigitId
    name: Text
    storageMappings: dict[str, StorageLocation] = Field(min_length=1)

    def table(self, location: str, name: str) -> tuple[str, str, str]:
        mapping = self.storageMappings[location]
        return mapping.database, mapping.schema_name, name


class ColumnSpec(_FileModel):
    name: Text
    dataType: Text
    description: str = ""
    nullable: bool = True
    transform: str | None = None
    sources: list[SourceColumn] = []
    tests: list[Literal["unique", "notNull"]] = []
    isBusinessKey: bool = False
    isSurrogateKey: bool = False
    primaryKey: bool = False
    uniqueKey: bool = False


class NodeTestSpec(_FileModel):
    name: Text
    description: str = ""
    sql: Text
    continueOnFailure: bool = False
    runOrder: Literal["Before", "After"] = "After"


class NodeSpec(_FileModel):
    name: Text
    nodeType: Text
    locationName: Text
    description: str = ""
    materializationType: Literal["table", "view"] | None = None
    join: str = ""
    columns: list[ColumnSpec] = Field(min_length=1)
    tests: list[NodeTestSpec] = []

    @property
    def key(self) -> tuple[str, str]:
        return self.locationName, self.name

    @property
    def label(self) -> str:
        return f"{self.locationName}.{self.name}"

    @property
    def id(self) -> str:
        return node_id(self.locationName, self.name)

    @property
    def is_source(self) -> bool:
        return self.nodeType == SOURCE_NODE_TYPE

    @property
    def materialization(self) -> Literal["table", "view"]:
        if self.materializationType is not None:
            return self.materializationType
        return "view" if self.nodeType == "View" else "table"

    def column_id(self, column: str) -> str:
        return column_id(self.locationName, self.name, column)


class JobSpec(_FileModel):
    id: DigitId
    name: Text
    includeSelector: str = ""
    excludeSelector: str = ""

    def to_api(self) -> dict[str, Any]:
        return self.model_dump()


class ScheduleSpec(_FileModel):
    jobID: DigitId
    environmentID: DigitId
    cron: Text
    timezone: Text = "UTC"


class ProjectFile(_FileModel):
    project: ProjectInfo
    environments: list[EnvironmentSpec] = Field(min_length=1)
    nodes: list[NodeSpec] = Field(min_length=1)
    jobs: list[JobSpec] = []
    schedules: list[ScheduleSpec] = []


# ------------------
# Problems
# ------------------


@dataclass(frozen=True)
class Problem:
    subject: str  # "node STAGE.STG_ONHAND", "environment 2", "job 1", "schedules[0]"
    field: str  # "columns[2].sources[0]"
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.field}: {self.message}"


class ProjectFileError(ValueError):
    def __init__(self, path: Path, problems: Sequence[Problem | str]):
        self.path = path
        self.problems = [str(p) for p in problems]
        super().__init__(f"{path}: " + "\n  ".join(self.problems))


def _format_loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _subject(raw: Any, loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
    """Names what a pydantic error location points into, as a person reading the file would."""
    if len(loc) >= 2 and isinstance(loc[1], int) and isinstance(raw, dict):
        section, index = loc[0], loc[1]
        items = raw.get(section)
        item = items[index] if isinstance(items, list) and index < len(items) else None
        if isinstance(item, dict):
            if section == "nodes" and item.get("name"):
                return f"node {item.get('locationName', '?')}.{item['name']}", loc[2:]
            if section in ("environments", "jobs") and item.get("id") is not None:
                return f"{section[:-1]} {item['id']}", loc[2:]
        return f"{section}[{index}]", loc[2:]
    return "project", loc


def _pydantic_problems(raw: Any, error: ValidationError) -> list[Problem]:
    problems = []
    for e in error.errors(include_url=False):
        subject, rest = _subject(raw, tuple(e["loc"]))
        message = "field required" if e["type"] == "missing" else e["msg"]
        if e["type"] == "string_pattern_mismatch" and rest and rest[0] == "columns" and "sources" in rest:
            message = f"expected LOCATION.NODE.COLUMN, got {e['input']!r}"
        problems.append(Problem(subject, _format_loc(rest) or "<item>", message))
    return problems


# ------------------
# Checks and lineage
# ------------------

_LEFTOVER_TEMPLATE = re.compile(r"\{\{|\{%")


def _ref_problems(text: str, field: str, subject: str, known: set[tuple[str, str]]) -> list[Problem]:
    try:
        refs = find_refs(text)
    except RefSyntaxError as e:
        return [Problem(subject, field, str(e))]
    problems = [
        Problem(subject, field, f"ref('{loc}', '{name}') names no node of the project")
        for loc, name in refs
        if (loc, name) not in known
    ]
    if _LEFTOVER_TEMPLATE.search(resolve_refs(text, lambda loc, name: "_")):
        problems.append(Problem(subject, field, "only {{ ref('LOCATION', 'NODE') }} templates are supported"))
    return problems


def check_nodes(nodes: Sequence[NodeSpec], environments: Sequence[EnvironmentSpec]) -> list[Problem]:
    """What is wrong with a set of nodes: duplicates, unmapped locations, refs and column sources that
    name nothing, columns that cannot be selected, and dependency cycles."""
    problems: list[Problem] = []
    by_key: dict[tuple[str, str], NodeSpec] = {}
    for node in nodes:
        if node.key in by_key:
            problems.append(Problem(f"node {node.label}", "name", "two nodes have this location and name"))
        by_key.setdefault(node.key, node)
    known = set(by_key)
    columns = {(n.locationName, n.name, c.name) for n in nodes for c in n.columns}

    for node in nodes:
        subject = f"node {node.label}"
        for env in environments:
            if node.locationName not in env.storageMappings:
                problems.append(
                    Problem(
                        subject,
                        "locationName",
                        f"{node.locationName!r} has no storage mapping in environment {env.id} ({env.name})",
                    )
                )
        if node.is_source and node.join.strip():
            problems.append(Problem(subject, "join", "a Source node is read, never built: it has no join"))
        problems += _ref_problems(node.join, "join", subject, known)
        seen_columns: set[str] = set()
        for i, column in enumerate(node.columns):
            if column.name in seen_columns:
                problems.append(Problem(subject, f"columns[{i}].name", f"duplicate column {column.name!r}"))
            seen_columns.add(column.name)
            for j, source in enumerate(column.sources):
                if tuple(source.split(".")) not in columns:
                    field = f"columns[{i}].sources[{j}]"
                    problems.append(Problem(subject, field, f"{source} names no column of the project"))
            if not node.is_source and column.transform is None and len(column.sources) != 1:
                problems.append(
                    Problem(
                        subject,
                        f"columns[{i}].transform",
                        f"needed: without a transform a column selects its single source "
                        f"(this one has {len(column.sources)})",
                    )
                )
        seen_tests: set[str] = set()
        for i, test in enumerate(node.tests):
            if test.name in seen_tests:
                problems.append(Problem(subject, f"tests[{i}].name", f"duplicate test {test.name!r}"))
            seen_tests.add(test.name)
            problems += _ref_problems(test.sql, f"tests[{i}].sql", subject, known)

    if not problems:
        cycle = NodeGraph(nodes).cycle()
        if cycle:
            names = " -> ".join(n.label for n in cycle)
            problems.append(Problem(f"node {cycle[0].label}", "join", f"dependency cycle: {names}"))
    return problems


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


# ------------------
# Loading
# ------------------


@dataclass(frozen=True)
class Project:
    path: Path
    file: ProjectFile

    @cached_property
    def graph(self) -> NodeGraph:
        return NodeGraph(self.file.nodes)

    def environment(self, environment_id: str) -> EnvironmentSpec | None:
        return next((e for e in self.file.environments if e.id == environment_id), None)

    def job(self, job_id: str) -> JobSpec | None:
        return next((j for j in self.file.jobs if j.id == job_id), None)


def _check_file(file: ProjectFile) -> list[Problem]:
    problems = check_nodes(file.nodes, file.environments)
    for kind, items in (("environment", file.environments), ("job", file.jobs)):
        ids = [item.id for item in items]
        repeated = sorted(i for i in set(ids) if ids.count(i) > 1)
        problems += [Problem(f"{kind} {i}", "id", f"two {kind}s share this id") for i in repeated]
    for job in file.jobs:
        for field in ("includeSelector", "excludeSelector"):
            try:
                parse_selector(getattr(job, field))
            except SelectorError as e:
                problems.append(Problem(f"job {job.id}", field, str(e)))
    env_ids, job_ids = {e.id for e in file.environments}, {j.id for j in file.jobs}
    for i, schedule in enumerate(file.schedules):
        subject = f"schedules[{i}]"
        if schedule.jobID not in job_ids:
            problems.append(Problem(subject, "jobID", f"no job has id {schedule.jobID}"))
        if schedule.environmentID not in env_ids:
            message = f"no environment has id {schedule.environmentID}"
            problems.append(Problem(subject, "environmentID", message))
        try:
            ZoneInfo(schedule.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(Problem(subject, "timezone", f"unknown time zone {schedule.timezone!r}"))
        if not croniter.is_valid(schedule.cron):
            problems.append(Problem(subject, "cron", f"not a cron expression: {schedule.cron!r}"))
    return problems


def load_project(path: Path) -> Project:
    """Reads and checks a project file; raises :class:`ProjectFileError` listing every problem."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ProjectFileError(path, [f"cannot read: {e.strerror}"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ProjectFileError(path, [f"{where}not valid YAML ({getattr(e, 'problem', e)})"]) from None
    try:
        file = ProjectFile.model_validate(raw)
    except ValidationError as e:
        raise ProjectFileError(path, _pydantic_problems(raw, e)) from None
    problems = _check_file(file)
    if problems:
        raise ProjectFileError(path, problems)
    return Project(path, file)


# ------------------
# API shapes
# ------------------


def environment_to_api(env: EnvironmentSpec, project: ProjectInfo, status: str) -> dict[str, Any]:
    return {
        "id": env.id,
        "name": env.name,
        "project": project.id,
        "createdAt": ENVIRONMENT_CREATED_AT,
        "createdBy": dict(ENVIRONMENT_CREATED_BY),
        "status": status,
    }


def node_summary(node: NodeSpec, env: EnvironmentSpec) -> dict[str, Any]:
    database, schema, _ = env.table(node.locationName, node.name)
    return {
        "id": node.id,
        "name": node.name,
        "nodeType": node.nodeType,
        "database": database,
        "schema": schema,
        "locationName": node.locationName,
    }


_ALIAS = re.compile(r"""\s+(?:AS\s+)?"([^"]+)\"""", re.IGNORECASE)


def _aliases(join: str) -> dict[str, str]:
    """``{alias: nodeID}`` for refs followed by an alias other than the node's own name."""
    aliases = {}
    for match in re.finditer(r"\{\{[^}]*\}\}", join):
        refs = find_refs(match[0])
        alias = _ALIAS.match(join, match.end())
        if refs and alias and alias[1] != refs[0][1]:
            aliases[alias[1]] = node_id(*refs[0])
    return aliases


def _column_reference(source: str) -> dict[str, str]:
    location, name, column = source.split(".")
    return {"nodeID": node_id(location, name), "columnID": column_id(location, name, column)}


def node_detail(node: NodeSpec, env: EnvironmentSpec) -> dict[str, Any]:
    refs = find_refs(node.join)
    return {
        **node_summary(node, env),
        "description": node.description,
        "config": {},
        "metadata": {
            "columns": [
                {
                    "columnID": node.column_id(c.name),
                    "name": c.name,
                    "dataType": c.dataType,
                    "description": c.description,
                    "nullable": c.nullable,
                    "transform": c.transform or "",
                    "isBusinessKey": c.isBusinessKey,
                    "isSurrogateKey": c.isSurrogateKey,
                    "primaryKey": c.primaryKey,
                    "uniqueKey": c.uniqueKey,
                    "appliedColumnTests": {test: True for test in c.tests},
                    "sources": [
                        {
                            "transform": c.transform or "",
                            "columnReferences": [_column_reference(s) for s in c.sources],
                        }
                    ],
                }
                for c in node.columns
            ],
            "sourceMapping": [
                {
                    "name": node.name,
                    "aliases": _aliases(node.join),
                    "customSQL": {"customSQL": ""},
                    "dependencies": [{"locationName": loc, "nodeName": name} for loc, name in refs],
                    "join": {"joinCondition": node.join},
                    "noLinkRefs": [],
                }
            ],
            "appliedNodeTests": [
                {
                    "name": t.name,
                    "description": t.description,
                    "continueOnFailure": t.continueOnFailure,
                    "runOrder": t.runOrder,
                    "templateString": t.sql,
                }
                for t in node.tests
            ],
            "cteString": "",
            "enabledColumnTestIDs": sorted({test for c in node.columns for test in c.tests}),
        },
        "materializationType": node.materialization,
        "isMultisource": False,
        "overrideSQL": False,
    }


# ------------------
# A node edited in the API's shape
# ------------------


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
            [f"{_format_loc(err['loc']) or '<body>'}: {err['msg']}" for err in e.errors(include_url=False)]
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
