"""The models of what a Coalesce environment holds, as the API returns them: the environment, its nodes (as
listed, and in full detail with columns, column lineage, source mapping and node tests) and its jobs."""

from typing import Any

from pydantic import Field

from dw_dagster.coalesce.models import CoalesceModel, UtcDatetime


class CoalesceUser(CoalesceModel):
    id: str
    first_name: str | None = None
    last_name: str | None = None


class CoalesceEnvironment(CoalesceModel):
    id: str
    name: str
    project: str | None = None
    created_at: UtcDatetime | None = None
    created_by: CoalesceUser | None = None
    # Deleting, Deploying, Failed Deploy, Failed Dev Run, Failed Refresh, Initializing, Refreshing,
    # Running Dev Run, Waiting: informative only, so a new value must not break loading.
    status: str | None = None
    # The environment's default run-time parameters (GET /api/v1/environments/{id} only; any JSON values).
    # A run started with `parameters` gets those alone, so the client merges its own over these.
    run_time_parameters: dict[str, Any] = {}


class CoalesceNodeSummary(CoalesceModel):
    """A node as listed without ``detail``."""

    id: str
    name: str
    # Dimension, Fact, Hub, Link, Satellite, Source, Stage, View, persistentStage or a custom type.
    node_type: str
    database: str | None = None
    # `schema` would shadow a BaseModel attribute.
    schema_name: str | None = Field(default=None, alias="schema")
    location_name: str | None = None


class CoalesceColumnReference(CoalesceModel):
    node_id: str
    column_id: str


class CoalesceColumnSource(CoalesceModel):
    transform: str = ""
    column_references: list[CoalesceColumnReference] = []


class CoalesceColumn(CoalesceModel):
    column_id: str
    name: str
    data_type: str
    description: str | None = None
    nullable: bool = True
    transform: str = ""
    is_business_key: bool = False
    is_surrogate_key: bool = False
    primary_key: bool = False
    unique_key: bool = False
    # Column tests (Null and Unique): test id -> enabled.
    applied_column_tests: dict[str, bool] = {}
    # Column-level lineage.
    sources: list[CoalesceColumnSource] = []

    @property
    def is_change_tracking(self) -> bool:
        """Tracked for change (``isChangeTracking``): a type-2 dimension or persistent stage keeps a row per
        version of a business key, so its key repeats by design. Set only where it is on (absent elsewhere,
        as the Transform MCP server's tests find it): kept as an extra field, so a node dumps as it came."""
        return (self.model_extra or {}).get("isChangeTracking") is True


class CoalesceCustomSQL(CoalesceModel):
    custom_sql: str = ""


class CoalesceDependency(CoalesceModel):
    location_name: str
    node_name: str


class CoalesceJoin(CoalesceModel):
    join_condition: str = ""


class CoalesceSourceMapping(CoalesceModel):
    name: str
    aliases: dict[str, str] = {}
    custom_sql: CoalesceCustomSQL | None = None
    dependencies: list[CoalesceDependency] = []
    join: CoalesceJoin | None = None
    no_link_refs: list[Any] = []


class CoalesceNodeTest(CoalesceModel):
    """An entry of ``metadata.appliedNodeTests``: a query returning the failing rows."""

    name: str
    description: str | None = None
    # Whether the run goes on when the test fails (the node is still not vouched for).
    continue_on_failure: bool
    # "Before" or "After" the node's build (v6.2); informative, so a new value does not refuse the page.
    run_order: str
    # The test's SQL, with {{ ref(...) }} templates.
    template_string: str


class CoalesceNodeMetadata(CoalesceModel):
    columns: list[CoalesceColumn] = []
    source_mapping: list[CoalesceSourceMapping] = []
    applied_node_tests: list[CoalesceNodeTest] = []
    enabled_column_test_ids: list[str] = Field(default=[], alias="enabledColumnTestIDs")

    def column_tests(self, column: CoalesceColumn) -> set[str]:
        """The ids of the column tests enabled on ``column``: on in its map, or listed by the node."""
        if not column.applied_column_tests:  # most columns: asked for every column of every node at a load
            return set()
        enabled = self.enabled_column_test_ids
        return {test for test, on in column.applied_column_tests.items() if on or test in enabled}


class CoalesceNode(CoalesceNodeSummary):
    """A node with its full detail: columns, column lineage, source mapping and node tests."""

    description: str | None = None
    config: dict[str, Any] = {}
    metadata: CoalesceNodeMetadata = Field(default_factory=CoalesceNodeMetadata)
    materialization_type: str | None = None
    is_multisource: bool = False
    override_sql: bool = False


class CoalesceJob(CoalesceModel):
    id: str
    name: str
    include_selector: str = ""
    exclude_selector: str = ""
