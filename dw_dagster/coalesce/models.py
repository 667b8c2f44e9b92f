"""Pydantic models of the Coalesce API's requests and responses, and the client's errors.

The shapes follow ``shared/reference/coalesce-api.md``. Attributes are snake_case; the wire names are
their aliases (``environment_id`` <-> ``environmentID``, ``override_sql`` <-> ``overrideSQL``), used both
to read responses and to dump models, so ``model_dump_json()`` writes the API's own shape.

Responses tolerate (and keep) fields this module does not declare, so a newer Coalesce does not break
the client; a response that lacks a declared field or has one of the wrong type is rejected with a
:class:`CoalesceResponseError` naming the endpoint and the field.
"""

from collections.abc import Sequence
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
    ValidationError,
    field_serializer,
    model_validator,
)
from pydantic_core import ErrorDetails

COALESCE_DEFAULT_BASE_URL = "https://app.coalescesoftware.io"

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
# Errors
# ------------------


class CoalesceError(Exception):
    """Base class of the errors raised by the Coalesce client."""


class CoalesceAPIError(CoalesceError):
    """Coalesce answered with an error status; ``error_string`` and ``error_detail`` come from its body
    ``{"error": {"errorString": ..., "errorDetail": ...}}``.
    """

    def __init__(
        self,
        status: int,
        error_string: str,
        error_detail: str | None,
        endpoint: str,
        retries: int = 0,
    ):
        self.status = status
        self.error_string = error_string
        self.error_detail = error_detail
        self.endpoint = endpoint
        self.retries = retries
        message = f"Coalesce {endpoint} returned {status}: {error_string}"
        if error_detail:
            message += f" ({error_detail})"
        if retries:
            message += f"; gave up after {retries} retries"
        super().__init__(message)


class CoalesceConnectionError(CoalesceError):
    """Coalesce could not be reached, or did not answer in time."""

    def __init__(self, endpoint: str, reason: str, retries: int = 0):
        self.endpoint = endpoint
        self.reason = reason
        self.retries = retries
        message = f"Coalesce {endpoint} failed: {reason}"
        if retries:
            message += f"; gave up after {retries} retries"
        super().__init__(message)


class CoalesceResponseError(CoalesceError):
    """A Coalesce response did not have the documented shape."""

    def __init__(self, endpoint: str, problems: Sequence[str]):
        self.endpoint = endpoint
        self.problems = list(problems)
        super().__init__(f"Malformed response from Coalesce {endpoint}: {'; '.join(self.problems)}")

    @classmethod
    def from_validation_error(cls, endpoint: str, error: ValidationError) -> "CoalesceResponseError":
        return cls(endpoint, [_describe(e) for e in error.errors(include_url=False)])


class CoalesceRunTimeoutError(CoalesceError):
    """A Coalesce run did not reach a terminal status in time."""

    def __init__(self, run_id: int, timeout: float, last_status: "CoalesceRunStatus | None"):
        self.run_id = run_id
        self.timeout = timeout
        self.last_status = last_status
        super().__init__(
            f"Coalesce run {run_id} did not finish within {timeout:g} s "
            f"(last status: {last_status.value if last_status else 'unknown'})"
        )


def _describe(error: ErrorDetails) -> str:
    path = _format_loc(error["loc"])
    if error["type"] == "missing":
        return f"{path}: field required"
    return f"{path}: {error['msg']} (got {_short_repr(error['input'])})"


def _format_loc(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "<body>"


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


ModelT = TypeVar("ModelT", bound=BaseModel)


def parse_response(model: type[ModelT], payload: Any, endpoint: str) -> ModelT:
    """Validates a decoded response body, raising a :class:`CoalesceResponseError` naming
    ``endpoint`` (method and path) and each offending field.
    """
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        raise CoalesceResponseError.from_validation_error(endpoint, e) from e


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
    applied_column_tests: dict[str, Any] = {}
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
    # The test's SQL, with {{ ref(...) }} templates.
    template_string: str = ""


class CoalesceNodeMetadata(CoalesceModel):
    columns: list[CoalesceColumn] = []
    source_mapping: list[CoalesceSourceMapping] = []
    applied_node_tests: list[CoalesceNodeTest] = []


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


class CoalesceNodeResult(CoalesceModel):
    node_id: str
    name: str
    is_running: bool = False
    query_results: list[CoalesceQueryResult] = []
    # complete | failed | canceled | running; seen only in third-party code.
    run_state: str | None = None


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
    org_id: str | None = None


# ------------------
# Workspace snapshot
# ------------------


class CoalesceEnvironmentData(CoalesceModel):
    environment: CoalesceEnvironment
    nodes: list[CoalesceNode]
    jobs: list[CoalesceJob]


class CoalesceWorkspaceData(CoalesceModel):
    """What :meth:`CoalesceWorkspace.fetch_workspace_data` read: each environment with its nodes (full
    detail) and its jobs. Round-trips through ``model_dump_json`` / ``model_validate_json``.
    """

    base_url: str
    fetched_at: UtcDatetime
    environments: list[CoalesceEnvironmentData]
