"""The Coalesce API's models: the conventions they all follow, the envelope of a response, and the requests.

The shapes follow Coalesce's published API, as ``docs/coalesce-api.md`` records what this client relies on.
Attributes are snake_case; the wire names are their aliases (``environment_id`` <-> ``environmentID``,
``override_sql`` <-> ``overrideSQL``), used both to read responses and to dump models, so
``model_dump_json()`` writes the API's own shape.

Responses tolerate (and keep) fields their models do not declare, so a newer Coalesce does not break
the client; a response that lacks a declared field or has one of the wrong type is rejected with a
:class:`~dw_dagster.coalesce.errors.CoalesceResponseError` naming the endpoint and the field. Their models
are in :mod:`~dw_dagster.coalesce.workspace_models` (environments, nodes, jobs) and
:mod:`~dw_dagster.coalesce.run_models` (runs and their results). Requests are strict: an unknown field in
one is ours, and refused.
"""

from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    FieldSerializationInfo,
    SecretStr,
    field_serializer,
    model_validator,
)

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
# The envelope of responses
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
