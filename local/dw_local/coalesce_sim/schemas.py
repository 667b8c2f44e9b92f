"""Request bodies the simulator accepts, validated strictly: a field Coalesce would not accept (an id sent
as a number, a misspelt key, Basic auth without a password) is a 400 naming the field, so a client bug
shows up locally rather than in production.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
    model_validator,
)

# Coalesce ids travel as strings of digits.
StringId = Annotated[StrictStr, StringConstraints(pattern=r"^\d+$")]
LOCAL_SNOWFLAKE_ACCOUNT = "fakesnow"
# The environment's own Snowflake user (its "User Credentials" in Coalesce), which the Scheduler's runs sign
# in as.
SCHEDULER_SNOWFLAKE_USER = "COALESCE_SCHEDULER"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserCredentials(_Request):
    snowflakeUsername: Annotated[StrictStr, StringConstraints(min_length=1)]
    snowflakePassword: SecretStr | None = None
    snowflakeKeyPairKey: SecretStr | None = None
    snowflakeKeyPairPass: SecretStr | None = None
    snowflakeWarehouse: StrictStr | None = None
    snowflakeRole: StrictStr | None = None
    snowflakeAuthType: Literal["Basic", "KeyPair", "OAuth"]

    @model_validator(mode="after")
    def _secret_for_auth_type(self) -> UserCredentials:
        if self.snowflakeAuthType == "Basic" and self.snowflakePassword is None:
            raise ValueError("snowflakeAuthType Basic needs snowflakePassword")
        if self.snowflakeAuthType == "KeyPair" and self.snowflakeKeyPairKey is None:
            raise ValueError("snowflakeAuthType KeyPair needs snowflakeKeyPairKey")
        return self

    def public(self) -> dict[str, Any]:
        """What a run records and reports: never the password or key."""
        return {
            "snowflakeAccount": LOCAL_SNOWFLAKE_ACCOUNT,
            "snowflakeAuthType": self.snowflakeAuthType,
            "snowflakeUsername": self.snowflakeUsername,
            "snowflakeRole": self.snowflakeRole,
            "snowflakeWarehouse": self.snowflakeWarehouse,
        }


class StartRunDetails(_Request):
    environmentID: StringId
    jobID: StringId | None = None
    includeNodesSelector: StrictStr | None = None
    excludeNodesSelector: StrictStr | None = None
    parallelism: StrictInt = Field(default=16, ge=1)
    forceIgnoreWorkspaceStatus: bool | None = None


class StartRunRequest(_Request):
    runDetails: StartRunDetails
    userCredentials: UserCredentials
    parameters: dict[str, StrictStr] | None = None


class RerunDetails(_Request):
    runID: StringId


class RerunRequest(_Request):
    runDetails: RerunDetails
    userCredentials: UserCredentials
    parameters: dict[str, StrictStr] | None = None


class CancelRunRequest(_Request):
    runID: StrictInt
    environmentID: StringId
    orgID: StrictStr


class ApiFeatures(_Request):
    """Body of ``POST /_sim/api``."""

    jobsCollection: bool


class ClockRequest(_Request):
    now: StrictStr


class DeployRequest(_Request):
    environmentID: StringId


def describe_validation_error(error: ValidationError) -> list[str]:
    """``field.path: message`` for each problem of a request body."""
    problems = []
    for e in error.errors(include_url=False):
        path = ""
        for part in e["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = "field required" if e["type"] == "missing" else e["msg"]
        if e["type"] == "extra_forbidden":
            message = "unknown field"
        problems.append(f"{path or '<body>'}: {message}")
    return problems
