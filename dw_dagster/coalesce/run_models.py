"""The models of Coalesce runs, as the API returns them: a run's type and status, the run listed and in
full, its per-node query results (tests among them), and the scheduler's answers to a start and a status."""

from enum import StrEnum
from typing import Any, Self

from pydantic import ConfigDict

from dw_dagster.coalesce.models import CoalesceErrorInfo, CoalesceModel, UtcDatetime

# queryResults[].type of a test's result (node tests and column tests).
SQL_TEST_TYPE = "sqlTest"


class _OpenEnum(StrEnum):
    """An enum that reads a value it does not know as a member named UNKNOWN holding that value, so that one
    new value from Coalesce does not refuse a whole page of runs. ``is_known`` tells them apart."""

    @classmethod
    def _missing_(cls, value: object) -> Self | None:
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_ = "UNKNOWN"
        member._value_ = value
        return member

    @property
    def is_known(self) -> bool:
        return self.value in type(self)._value2member_map_


class CoalesceRunStatus(_OpenEnum):
    WAITING_TO_RUN = "waitingToRun"
    INITIALIZING = "initializing"
    RENDERING = "rendering"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        """Finished. A status this integration does not know is not: the run is looked at again later."""
        return self in (CoalesceRunStatus.COMPLETED, CoalesceRunStatus.FAILED, CoalesceRunStatus.CANCELED)


class CoalesceRunType(_OpenEnum):
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
