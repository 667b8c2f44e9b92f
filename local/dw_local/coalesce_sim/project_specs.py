"""The Coalesce project file's models (``docs/project-file.md``): the project, its environments and their
storage mappings, its nodes with their columns and tests, its jobs and schedules; and the node and column
ids, derived from names.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints

# Ids must survive restarts and edits: derived from names, never random.
_ID_NAMESPACE = uuid.NAMESPACE_URL
SOURCE_NODE_TYPE = "Source"
COLUMN_TESTS = ("unique", "notNull")


def node_id(location: str, name: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, f"{location}.{name}"))


def column_id(location: str, name: str, column: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, f"{location}.{name}.{column}"))


# `{{ parameters.my_var }}` in a transform, a join or a test: https://docs.coalesce.io/docs/rtp-default.
PARAMETER_TEMPLATE = re.compile(r"\{\{\s*parameters\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

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
    # The environment's default run-time parameters (Build Settings > Environments > Parameters): any JSON,
    # as the docs' example holds a list and a number (https://docs.coalesce.io/docs/rtp-default).
    runTimeParameters: dict[Text, JsonValue] = {}

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
