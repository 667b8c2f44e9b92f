"""Pydantic models of the Coalesce API's requests and responses.

The shapes follow Coalesce's published API, as ``docs/coalesce-api.md`` records what this client relies on. Attributes are snake_case; the wire names are
their aliases (``environment_id`` <-> ``environmentID``, ``override_sql`` <-> ``overrideSQL``), used both
to read responses and to dump models, so ``model_dump_json()`` writes the API's own shape.

Responses tolerate (and keep) fields this module does not declare, so a newer Coalesce does not break
the client; a response that lacks a declared field or has one of the wrong type is rejected with a
:class:`~dw_dagster.coalesce.errors.CoalesceResponseError` naming the endpoint and the field.
"""

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    FieldSerializationInfo,
    SecretStr,
    field_serializer,
    model_validator,
)

COALESCE_DEFAULT_BASE_URL = "https://app.coalescesoftware.io"
# queryResults[].type of a test's result (node tests and column tests).
SQL_TEST_TYPE = "sqlTest"

# Serialization context under which secrets are written in clear: only for a request body.
_REVEAL_SECRETS = "reveal_secrets"

_ACRONYMS = {"id": "ID", "sql": "SQL"}


def _to_api_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(_ACRONYMS.get(word, word.capitalize()) for word in rest)


def _assume_utc(value: datetime) -> datetime:
    # Coalesce reports times in UTC; a timestamp without an offset is read as UTC, never as local time.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_assume_utc)]


class CoalesceModel(BaseModel):
    """Base of the response models: API names on the wire, unknown fields kept."""

    model_config = ConfigDict(
        alias_generator=_to_api_name,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="allow",
        # Coalesce ids are strings of digits; accept them as numbers too.
        coerce_numbers_to_str=True,
    )


class CoalesceRequestModel(BaseModel):
    """Base of the request models: API names on the wire, unknown fields refused (they are ours)."""

    model_config = ConfigDict(
        alias_generator=_to_api_name,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        coerce_numbers_to_str=True,
    )

    def to_request_body(self) -> dict[str, Any]:
        """The JSON body to send, with secrets in clear: for the client only, never for logs."""
        return self.model_dump(mode="json", exclude_none=True, context={_REVEAL_SECRETS: True})


# ------------------
# Responses
# ------------------


class CoalesceErrorInfo(CoalesceModel):
    """The ``error`` object of an error response or of a failed query."""

    error_string: str
    error_detail: str | None = None


class CoalesceErrorBody(CoalesceModel):
    error: CoalesceErrorInfo


ItemT = TypeVar("ItemT")


class CoalescePage(CoalesceModel, Generic[ItemT]):
    """One page of a list endpoint; pass ``next`` back as ``startingFrom`` for the following page."""

    data: list[ItemT]
    next: str | None = None
    limit: int | None = None
    # The jobs listing also says how many there are in all.
    total: int | None = None


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
    # Before or after the node's build.
    run_order: Literal["Before", "After"]
    # The test's SQL, with {{ ref(...) }} templates.
    template_string: str


class CoalesceNodeMetadata(CoalesceModel):
    columns: list[CoalesceColumn] = []
    source_mapping: list[CoalesceSourceMapping] = []
    applied_node_tests: list[CoalesceNodeTest] = []
    enabled_column_test_ids: list[str] = Field(default=[], alias="enabledColumnTestIDs")

    def column_tests(self, column: CoalesceColumn) -> set[str]:
        """The ids of the column tests enabled on ``column``: on in its map, or listed by the node."""
        enabled = set(self.enabled_column_test_ids)
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


class CoalesceRunStatus(StrEnum):
    WAITING_TO_RUN = "waitingToRun"
    INITIALIZING = "initializing"
    RENDERING = "rendering"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        return self in (CoalesceRunStatus.COMPLETED, CoalesceRunStatus.FAILED, CoalesceRunStatus.CANCELED)


class CoalesceRunType(StrEnum):
    DEPLOY = "deploy"
    REFRESH = "refresh"


class CoalesceRunSummary(CoalesceModel):
    id: int
    run_type: CoalesceRunType
    run_status: CoalesceRunStatus
    run_start_time: UtcDatetime | None = None
    run_end_time: UtcDatetime | None = None
    environment_id: str | None = None
    re_run_id: int | None = None
    run_failure_reason: str | None = None


class CoalesceRunUserCredentials(CoalesceModel):
    """The credentials a run used, as Coalesce reports them (never with secrets)."""

    # Drop whatever else the server sends here, so that a secret it might echo is never kept or printed.
    model_config = ConfigDict(extra="ignore")

    snowflake_account: str | None = None
    snowflake_auth_type: str | None = None
    snowflake_username: str | None = None
    snowflake_role: str | None = None
    snowflake_warehouse: str | None = None


class CoalesceRunDetails(CoalesceModel):
    """``runDetails`` of a refresh run."""

    environment_id: str | None = None
    job_id: str | None = None
    include_nodes_selector: str | None = None
    exclude_nodes_selector: str | None = None
    parallelism: int | None = None
    nodes_in_run: int | None = None
    canceled: bool | None = None


class CoalesceRun(CoalesceRunSummary):
    run_history: list[int] = []
    run_time_parameters: dict[str, Any] = {}
    user_id: str | None = None
    user_credentials: CoalesceRunUserCredentials | None = None
    run_details: CoalesceRunDetails | None = None


class CoalesceQueryResult(CoalesceModel):
    name: str
    # "sqlTest" for a node or column test's result; absent for the queries that build.
    type: str | None = None
    sql: str | None = None
    status: str | None = None
    success: bool
    is_running: bool = False
    start_time: UtcDatetime | None = None
    end_time: UtcDatetime | None = None
    query_id: str | None = None
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None
    warehouse: str | None = None
    error: CoalesceErrorInfo | None = None

    @property
    def is_test(self) -> bool:
        return self.type == SQL_TEST_TYPE


class CoalesceNodeResult(CoalesceModel):
    node_id: str
    name: str
    is_running: bool = False
    query_results: list[CoalesceQueryResult] = []
    # complete | failed | canceled | running: newer than the v6.2 description; used where present.
    run_state: str | None = None

    @property
    def test_results(self) -> list[CoalesceQueryResult]:
        return [q for q in self.query_results if q.is_test]


class CoalesceRunResults(CoalesceModel):
    data: list[CoalesceNodeResult]


class CoalesceStartRunResponse(CoalesceModel):
    run_counter: int


class CoalesceRunStatusResponse(CoalesceModel):
    run_status: CoalesceRunStatus
    run_type: CoalesceRunType | None = None
    run_link: str | None = None


# ------------------
# Requests
# ------------------

_SECRET_FIELDS = ("snowflake_password", "snowflake_key_pair_key", "snowflake_key_pair_pass")


class CoalesceUserCredentials(CoalesceRequestModel):
    """The Snowflake credentials a run is started with (``userCredentials`` of startRun and rerun).

    Secrets are :class:`~pydantic.SecretStr`: masked in ``repr``, ``str`` and ordinary dumps; only the
    client reveals them, when it writes the request body.
    """

    snowflake_username: str
    snowflake_password: SecretStr | None = None
    snowflake_key_pair_key: SecretStr | None = None
    snowflake_key_pair_pass: SecretStr | None = None
    snowflake_warehouse: str | None = None
    snowflake_role: str | None = None
    snowflake_auth_type: Literal["Basic", "KeyPair", "OAuth"] = "Basic"

    @model_validator(mode="after")
    def _check_secret_for_auth_type(self) -> "CoalesceUserCredentials":
        if self.snowflake_auth_type == "Basic" and self.snowflake_password is None:
            raise ValueError("snowflakeAuthType Basic needs snowflakePassword")
        if self.snowflake_auth_type == "KeyPair" and self.snowflake_key_pair_key is None:
            raise ValueError("snowflakeAuthType KeyPair needs snowflakeKeyPairKey")
        return self

    @field_serializer(*_SECRET_FIELDS, when_used="unless-none")
    def _serialize_secret(self, value: SecretStr, info: FieldSerializationInfo) -> str:
        if info.context and info.context.get(_REVEAL_SECRETS):
            return value.get_secret_value()
        return str(value)


class CoalesceStartRunDetails(CoalesceRequestModel):
    environment_id: str
    job_id: str | None = None
    include_nodes_selector: str | None = None
    exclude_nodes_selector: str | None = None
    parallelism: int = 16
    force_ignore_workspace_status: bool | None = None


class CoalesceStartRunRequest(CoalesceRequestModel):
    run_details: CoalesceStartRunDetails
    user_credentials: CoalesceUserCredentials
    parameters: dict[str, str] | None = None


class CoalesceRerunDetails(CoalesceRequestModel):
    run_id: str


class CoalesceRerunRequest(CoalesceRequestModel):
    run_details: CoalesceRerunDetails
    user_credentials: CoalesceUserCredentials
    parameters: dict[str, str] | None = None


class CoalesceCancelRunRequest(CoalesceRequestModel):
    run_id: int
    environment_id: str
    # Required by the scheduler (the Transform MCP server refuses to cancel without it).
    org_id: str
