"""A client for Coalesce's REST API (``/api/v1``) and scheduler (``/scheduler``): its endpoints.

What it relies on is written down in ``docs/coalesce-api.md``. Every response is validated into the models of
:mod:`dw_dagster.coalesce.models`; every failure is a :class:`~dw_dagster.coalesce.errors.CoalesceError`
that names the endpoint. The calls are sent, retried and checked by
:class:`~dw_dagster.coalesce.http_client.CoalesceHTTPClient`.
"""

import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Literal, overload
from urllib.parse import quote

from dw_dagster.coalesce.errors import CoalesceRunTimeoutError
from dw_dagster.coalesce.http_client import CoalesceHTTPClient
from dw_dagster.coalesce.models import (
    CoalesceCancelRunRequest,
    CoalescePage,
    CoalesceRerunDetails,
    CoalesceRerunRequest,
    CoalesceStartRunDetails,
    CoalesceStartRunRequest,
    CoalesceUserCredentials,
)
from dw_dagster.coalesce.run_models import (
    CoalesceRun,
    CoalesceRunResults,
    CoalesceRunStatus,
    CoalesceRunStatusResponse,
    CoalesceRunSummary,
    CoalesceRunType,
    CoalesceStartRunResponse,
)
from dw_dagster.coalesce.workspace_models import (
    CoalesceEnvironment,
    CoalesceJob,
    CoalesceNode,
    CoalesceNodeSummary,
)

DEFAULT_POLL_INTERVAL = 5.0
DEFAULT_POLL_TIMEOUT = 3600.0
# The list-nodes and list-jobs page size: the API accepts 1-500.
DEFAULT_NODES_PAGE_SIZE = 100
DEFAULT_JOBS_PAGE_SIZE = 100


def _segment(value: str | int) -> str:
    return quote(str(value), safe="")


class CoalesceClient(CoalesceHTTPClient):
    """Talks to one Coalesce host with one access token.

    Args:
        api_token (str): The Coalesce access token (Deploy tab; ``token=`` in ``~/.coa/config``).
        base_url (str): The Coalesce host, e.g. ``https://app.eu.coalescesoftware.io``.
        request_timeout (float): Seconds before a connect, read or write is declared timed out.
        request_max_retries (int): How many times a failed request is retried: connection failures,
            timeouts, 429 (after its ``Retry-After`` seconds), 500, 502, 503 and 504.
        request_retry_delay (float): Seconds before the first retry.
        request_backoff_factor (float): Multiplier of the delay at each further retry.
        request_budget (float): Seconds one call may take, its retries and their waits included. Each wait
            is ``min(Retry-After or the backoff, max_retry_wait, the time left)``; a call whose budget has no
            room for the next wait gives up, and its error says so.
        max_retry_wait (float): The longest single wait before a retry, whatever ``Retry-After`` asks.
        transport (Optional[httpx.BaseTransport]): Replaces the network, e.g. ``httpx.MockTransport``
            replaying recorded responses in tests. By default httpx's own, which honours proxy variables.
    """

    def __repr__(self) -> str:
        return f"CoalesceClient(base_url={self.base_url!r})"

    # ------------------
    # Environments, nodes, jobs
    # ------------------

    def list_environments(self) -> list[CoalesceEnvironment]:
        """All the environments the token can see."""
        return list(self._paginate(CoalesceEnvironment, "/api/v1/environments", {}))

    def get_environment(self, environment_id: str) -> CoalesceEnvironment:
        return self._call(CoalesceEnvironment, "GET", f"/api/v1/environments/{_segment(environment_id)}")

    @overload
    def list_nodes(
        self,
        environment_id: str,
        detail: Literal[False] = ...,
        limit: int = ...,
        order_by: str = ...,
    ) -> list[CoalesceNodeSummary]: ...

    @overload
    def list_nodes(
        self,
        environment_id: str,
        detail: Literal[True],
        limit: int = ...,
        order_by: str = ...,
    ) -> list[CoalesceNode]: ...

    def list_nodes(
        self,
        environment_id: str,
        detail: bool = False,
        limit: int = DEFAULT_NODES_PAGE_SIZE,
        order_by: str = "id",
    ) -> list[CoalesceNodeSummary] | list[CoalesceNode]:
        """All the nodes deployed to an environment, every page followed.

        Args:
            environment_id (str): The Coalesce environment ID.
            detail (bool): Return full nodes (columns, lineage, source mapping, tests) instead of
                summaries.
            limit (int): Nodes per page (1-500).
            order_by (str): The field pages are ordered by; kept the same across pages.
        """
        model = CoalesceNode if detail else CoalesceNodeSummary
        return list(
            self._paginate(
                model,
                f"/api/v1/environments/{_segment(environment_id)}/nodes",
                {"detail": detail, "limit": limit, "orderBy": order_by},
            )
        )

    def get_node(self, environment_id: str, node_id: str) -> CoalesceNode:
        return self._call(
            CoalesceNode,
            "GET",
            f"/api/v1/environments/{_segment(environment_id)}/nodes/{_segment(node_id)}",
        )

    def get_job(self, environment_id: str, job_id: str | int) -> CoalesceJob:
        return self._call(
            CoalesceJob,
            "GET",
            f"/api/v1/environments/{_segment(environment_id)}/jobs/{_segment(job_id)}",
        )

    def list_jobs(
        self, environment_id: str, limit: int = DEFAULT_JOBS_PAGE_SIZE, order_by: str = "id"
    ) -> list[CoalesceJob]:
        """The jobs of an environment (``GET /api/v1/environments/{id}/jobs``), every page followed.

        Args:
            environment_id (str): The Coalesce environment ID.
            limit (int): Jobs per page (1-500).
            order_by (str): The field pages are ordered by; kept the same across pages.
        """
        return list(
            self._paginate(
                CoalesceJob,
                f"/api/v1/environments/{_segment(environment_id)}/jobs",
                {"limit": limit, "orderBy": order_by},
            )
        )

    # ------------------
    # Runs
    # ------------------

    def list_runs(
        self,
        environment_id: str | None = None,
        run_type: CoalesceRunType | str | None = None,
        run_status: CoalesceRunStatus | str | None = None,
        starting_from: int | datetime | str | None = None,
        order_by: str | None = None,
        order_by_direction: Literal["asc", "desc"] | None = None,
        limit: int | None = None,
    ) -> CoalescePage[CoalesceRunSummary]:
        """One page of runs; see :meth:`iter_runs` to follow every page.

        Args:
            environment_id (Optional[str]): Only runs of this environment.
            run_type (Optional[str]): ``deploy`` or ``refresh``.
            run_status (Optional[str]): Only runs in this status.
            starting_from (Optional[Union[int, datetime, str]]): Exclusive cursor: a run id, a datetime,
                or the previous page's ``next``.
            order_by (Optional[str]): ``id``, ``runStartTime`` or ``runEndTime``.
            order_by_direction (Optional[str]): ``asc`` or ``desc`` (Coalesce's default).
            limit (Optional[int]): Runs per page, at most 1000 (Coalesce's default is 25).
        """
        return self._call(
            CoalescePage[CoalesceRunSummary],
            "GET",
            "/api/v1/runs",
            params=_run_filters(
                environment_id, run_type, run_status, starting_from, order_by, order_by_direction, limit
            ),
        )

    def iter_runs(
        self,
        environment_id: str | None = None,
        run_type: CoalesceRunType | str | None = None,
        run_status: CoalesceRunStatus | str | None = None,
        starting_from: int | datetime | str | None = None,
        order_by: str | None = None,
        order_by_direction: Literal["asc", "desc"] | None = None,
        limit: int | None = None,
    ) -> Iterator[CoalesceRunSummary]:
        """Every run matching the filters of :meth:`list_runs`, page after page, fetched lazily."""
        return self._paginate(
            CoalesceRunSummary,
            "/api/v1/runs",
            _run_filters(
                environment_id, run_type, run_status, starting_from, order_by, order_by_direction, limit
            ),
        )

    def get_run(self, run_id: int) -> CoalesceRun:
        return self._call(CoalesceRun, "GET", f"/api/v1/runs/{_segment(run_id)}")

    def get_run_results(self, run_id: int) -> CoalesceRunResults:
        """The per-node query results of a run."""
        return self._call(CoalesceRunResults, "GET", f"/api/v1/runs/{_segment(run_id)}/results")

    def start_run(
        self,
        environment_id: str,
        *,
        job_id: str | int | None = None,
        include_selector: str | None = None,
        exclude_selector: str | None = None,
        user_credentials: CoalesceUserCredentials,
        parameters: Mapping[str, str] | None = None,
        parallelism: int = 16,
        confirm_run_all_nodes: bool = False,
    ) -> int:
        """Starts a refresh run and returns its run counter (the run's id).

        Args:
            environment_id (str): The environment to refresh.
            job_id (Optional[Union[str, int]]): The job to run.
            include_selector (Optional[str]): Nodes to run, e.g. ``{FCT_DAILY_TOTALS}+``.
            exclude_selector (Optional[str]): Nodes to leave out.
            user_credentials (CoalesceUserCredentials): The Snowflake credentials the run uses.
            parameters (Optional[Mapping[str, str]]): Run-time parameters.
            parallelism (int): How many nodes Coalesce builds at once.
            confirm_run_all_nodes (bool): Needed to start a run with neither a job nor an include
                selector, which rebuilds every node of the environment.
        """
        if job_id is None and not include_selector and not confirm_run_all_nodes:
            raise ValueError(
                f"Refusing to refresh every node of Coalesce environment {environment_id}: pass job_id "
                "or include_selector, or confirm_run_all_nodes=True."
            )
        request = CoalesceStartRunRequest(
            run_details=CoalesceStartRunDetails(
                environment_id=environment_id,
                job_id=None if job_id is None else str(job_id),
                include_nodes_selector=include_selector,
                exclude_nodes_selector=exclude_selector,
                parallelism=parallelism,
            ),
            user_credentials=user_credentials,
            parameters=dict(parameters) if parameters is not None else None,
        )
        run_counter = self._call(
            CoalesceStartRunResponse,
            "POST",
            "/scheduler/startRun",
            body=request.to_request_body(),
            starts_work=True,
        ).run_counter
        self._log.info(f"Started Coalesce run {run_counter} in environment {environment_id}.")
        return run_counter

    def get_run_status(self, run_counter: int) -> CoalesceRunStatusResponse:
        return self._call(
            CoalesceRunStatusResponse, "GET", "/scheduler/runStatus", params={"runCounter": run_counter}
        )

    def rerun(
        self,
        run_id: int,
        user_credentials: CoalesceUserCredentials,
        parameters: Mapping[str, str] | None = None,
    ) -> int:
        """Reruns a failed run from its point of failure; returns the new run counter."""
        request = CoalesceRerunRequest(
            run_details=CoalesceRerunDetails(run_id=str(run_id)),
            user_credentials=user_credentials,
            parameters=dict(parameters) if parameters is not None else None,
        )
        run_counter = self._call(
            CoalesceStartRunResponse,
            "POST",
            "/scheduler/rerun",
            body=request.to_request_body(),
            starts_work=True,
        ).run_counter
        self._log.info(f"Started Coalesce run {run_counter}, a rerun of run {run_id}.")
        return run_counter

    def cancel_run(self, run_id: int, environment_id: str, org_id: str) -> None:
        """Cancels a run that has not finished. Coalesce wants the organization's id (``orgID``) too:
        it is in the Coalesce app's settings and in ``~/.coa/config``."""
        if not org_id or not str(org_id).strip():
            raise ValueError(
                f"Cancelling Coalesce run {run_id} needs the organization id (orgID): set org_id on the "
                "workspace (for example from COALESCE_ORG_ID)."
            )
        request = CoalesceCancelRunRequest(run_id=run_id, environment_id=environment_id, org_id=org_id)
        self._request("POST", "/scheduler/cancelRun", body=request.to_request_body())
        self._log.info(f"Canceled Coalesce run {run_id}.")

    def wait_for_run(
        self,
        run_counter: int,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        timeout: float = DEFAULT_POLL_TIMEOUT,
    ) -> CoalesceRun:
        """Polls a run's status until it is terminal (completed, failed or canceled), then returns the
        run. Raises :class:`CoalesceRunTimeoutError` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        last_status: CoalesceRunStatus | None = None
        while True:
            status = self.get_run_status(run_counter).run_status
            if status != last_status:
                self._log.info(f"Coalesce run {run_counter} is {status.value}.")
                last_status = status
            if status.is_terminal:
                return self.get_run(run_counter)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CoalesceRunTimeoutError(run_counter, timeout, last_status)
            time.sleep(min(poll_interval, remaining))


def _run_filters(
    environment_id: str | None,
    run_type: CoalesceRunType | str | None,
    run_status: CoalesceRunStatus | str | None,
    starting_from: int | datetime | str | None,
    order_by: str | None,
    order_by_direction: str | None,
    limit: int | None,
) -> dict[str, Any]:
    params = {
        "environmentID": environment_id,
        "runType": run_type,
        "runStatus": run_status,
        "startingFrom": starting_from.isoformat() if isinstance(starting_from, datetime) else starting_from,
        "orderBy": order_by,
        "orderByDirection": order_by_direction,
        "limit": limit,
    }
    return {key: value for key, value in params.items() if value is not None}
