"""A client for Coalesce's REST API (``/api/v1``) and scheduler (``/scheduler``).

What it relies on is written down in ``docs/coalesce-api.md``. Every response is validated into the models of
:mod:`dw_dagster.coalesce.models`; every failure is a :class:`~dw_dagster.coalesce.errors.CoalesceError`
that names the endpoint.
"""

import logging
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar, overload
from urllib.parse import quote

import httpx
from dagster import get_dagster_logger
from pydantic import BaseModel

from dw_dagster.coalesce.errors import (
    CoalesceAPIError,
    CoalesceConnectionError,
    CoalesceResponseError,
    CoalesceRunTimeoutError,
    parse_response,
)
from dw_dagster.coalesce.models import (
    COALESCE_DEFAULT_BASE_URL,
    CoalesceCancelRunRequest,
    CoalesceEnvironment,
    CoalesceErrorBody,
    CoalesceJob,
    CoalesceNode,
    CoalesceNodeSummary,
    CoalescePage,
    CoalesceRerunDetails,
    CoalesceRerunRequest,
    CoalesceRun,
    CoalesceRunResults,
    CoalesceRunStatus,
    CoalesceRunStatusResponse,
    CoalesceRunSummary,
    CoalesceRunType,
    CoalesceStartRunDetails,
    CoalesceStartRunRequest,
    CoalesceStartRunResponse,
    CoalesceUserCredentials,
)

ModelT = TypeVar("ModelT", bound=BaseModel)

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
# A request that starts a run is repeated only when the server surely did not act on it: a 500, 502 or
# 504 (or a lost answer) may come after the run was started, and a second start would build twice.
NOT_PROCESSED_STATUSES = frozenset({429, 503})

# A 429's Retry-After is honoured up to this many seconds: Coalesce has asked for 25 s, and three such waits
# took one sensor tick past the daemon's 60 s limit.
MAX_RETRY_WAIT = 10.0
DEFAULT_REQUEST_BUDGET = 30.0
DEFAULT_POLL_INTERVAL = 5.0
DEFAULT_POLL_TIMEOUT = 3600.0
# The list-nodes and list-jobs page size: the API accepts 1-500.
DEFAULT_NODES_PAGE_SIZE = 100
DEFAULT_JOBS_PAGE_SIZE = 100


def _segment(value: str | int) -> str:
    return quote(str(value), safe="")


class CoalesceClient:
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

    def __init__(
        self,
        api_token: str,
        base_url: str = COALESCE_DEFAULT_BASE_URL,
        request_timeout: float = 30.0,
        request_max_retries: int = 3,
        request_retry_delay: float = 0.25,
        request_backoff_factor: float = 2.0,
        transport: httpx.BaseTransport | None = None,
        request_budget: float = DEFAULT_REQUEST_BUDGET,
        max_retry_wait: float = MAX_RETRY_WAIT,
    ):
        token = api_token.strip()
        if not token:
            raise ValueError("The Coalesce API token is empty.")
        for name, seconds in (("request_budget", request_budget), ("max_retry_wait", max_retry_wait)):
            if not seconds > 0:
                raise ValueError(f"Coalesce client {name}: {seconds!r}; expected a number of seconds above 0")
        self._token = token
        self.base_url = base_url.rstrip("/")
        self.request_max_retries = request_max_retries
        self.request_retry_delay = request_retry_delay
        self.request_backoff_factor = request_backoff_factor
        self.request_timeout = request_timeout
        self.request_budget = request_budget
        self.max_retry_wait = max_retry_wait
        # httpx masks the Authorization header in its reprs. Connection failures are retried by _request
        # rather than by a retrying transport, because httpx ignores HTTP(S)_PROXY and NO_PROXY when it
        # is given a transport.
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
                "User-Agent": "dw-dagster",
            },
            timeout=httpx.Timeout(request_timeout),
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"CoalesceClient(base_url={self.base_url!r})"

    @property
    def _log(self) -> logging.Logger:
        return get_dagster_logger()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "CoalesceClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------
    # Transport
    # ------------------

    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        starts_work: bool = False,
    ) -> httpx.Response:
        """Sends one call, retrying what is safe to retry, and returns its successful response.

        ``starts_work`` marks a call that must not run twice (startRun, rerun): it is retried only when
        the request never reached Coalesce (a failed connect) or on a status saying it was not processed.
        """
        endpoint = f"{method} {path}"
        retryable = NOT_PROCESSED_STATUSES if starts_work else RETRYABLE_STATUSES
        attempt = 0
        deadline = time.monotonic() + self.request_budget
        capped: float | None = None  # the longest Retry-After cut to max_retry_wait, said in the error
        while True:
            # No single request outlives the call's budget either.
            timeout = max(0.1, min(self.request_timeout, deadline - time.monotonic()))
            try:
                response = self._http.request(method, path, params=params, json=body, timeout=timeout)
            except httpx.TransportError as e:
                # A failed connect never reached Coalesce: safe to repeat, even a run start.
                never_sent = isinstance(e, httpx.ConnectError | httpx.ConnectTimeout)
                reason = (
                    f"cannot connect to {self.base_url}: {e}" if never_sent else f"{type(e).__name__}: {e}"
                )
                if starts_work and not never_sent:
                    raise CoalesceConnectionError(
                        endpoint, f"{reason}; the run may have started, check list_runs before retrying"
                    ) from e
                if attempt >= self.request_max_retries:
                    raise CoalesceConnectionError(endpoint, reason, retries=attempt) from e
                asked = self._backoff(attempt)
                delay = self._wait(asked, deadline)
                if delay is None:
                    raise CoalesceConnectionError(endpoint, reason, attempt, self._no_time(asked)) from e
            else:
                self._log.debug(f"Coalesce {endpoint} -> {response.status_code}")
                if response.is_success:
                    return response
                retry_after = _retry_after_seconds(response)
                if response.status_code not in retryable or attempt >= self.request_max_retries:
                    why = self._capped(capped) if capped is not None else None
                    raise self._api_error(response, endpoint, attempt, why)
                asked = retry_after if retry_after is not None else self._backoff(attempt)
                delay = self._wait(asked, deadline)
                if delay is None:
                    raise self._api_error(response, endpoint, attempt, self._no_time(asked, retry_after))
                if retry_after is not None and retry_after > delay:
                    capped = max(capped or 0.0, retry_after)
                reason = str(self._api_error(response, endpoint, retries=0))
            attempt += 1
            self._log.info(
                f"Retrying Coalesce {endpoint} in {delay:.2f}s "
                f"(attempt {attempt}/{self.request_max_retries}): {reason}"
            )
            time.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        return self.request_retry_delay * self.request_backoff_factor**attempt

    def _wait(self, asked: float, deadline: float) -> float | None:
        """The wait before the next retry, ``min(asked, max_retry_wait)``; None when that wait would spend
        what is left of the call's budget (no time for the retry itself)."""
        wait = min(asked, self.max_retry_wait)
        return None if wait >= deadline - time.monotonic() else wait

    def _capped(self, retry_after: float) -> str:
        return f"Coalesce asked to wait up to {retry_after:g}s (Retry-After), each wait was capped at {self.max_retry_wait:g}s"

    def _no_time(self, asked: float, retry_after: float | None = None) -> str:
        wanted = (
            f"Retry-After asked {retry_after:g}s"
            if retry_after is not None
            else f"the next wait is {asked:g}s"
        )
        return (
            f"no time left in the call's {self.request_budget:g}s budget for another wait ({wanted}, "
            f"each wait capped at {self.max_retry_wait:g}s)"
        )

    def _api_error(
        self, response: httpx.Response, endpoint: str, retries: int, gave_up: str | None = None
    ) -> CoalesceAPIError:
        try:
            info = CoalesceErrorBody.model_validate(response.json()).error
            error_string, error_detail = info.error_string, info.error_detail
        except ValueError:
            # Not Coalesce's error body, e.g. a proxy's HTML page.
            error_string, error_detail = (response.text[:200] or response.reason_phrase), None
        return CoalesceAPIError(
            status=response.status_code,
            error_string=self._scrub(error_string),
            error_detail=self._scrub(error_detail) if error_detail else error_detail,
            endpoint=endpoint,
            retries=retries,
            gave_up=gave_up,
        )

    def _scrub(self, text: str) -> str:
        # An error message quoting the token must not carry it into logs or tracebacks.
        return text.replace(self._token, "***")

    def _call(
        self,
        model: type[ModelT],
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        starts_work: bool = False,
    ) -> ModelT:
        endpoint = f"{method} {path}"
        response = self._request(method, path, params=params, body=body, starts_work=starts_work)
        try:
            payload = response.json()
        except ValueError:
            raise CoalesceResponseError(
                endpoint, [f"<body>: expected JSON, got {response.text[:80]!r}"]
            ) from None
        return parse_response(model, payload, endpoint)

    def _paginate(self, model: type[ModelT], path: str, params: Mapping[str, Any]) -> Iterator[ModelT]:
        """Follows a list endpoint to its end: each page's ``next`` becomes the following request's
        ``startingFrom``, the other parameters (``orderBy`` included) unchanged.
        """
        params = dict(params)
        while True:
            page = self._call(CoalescePage[model], "GET", path, params=params)
            yield from page.data
            if page.next is None:
                return
            if page.next == params.get("startingFrom"):
                raise CoalesceResponseError(
                    f"GET {path}", [f"next: the cursor {page.next!r} did not advance"]
                )
            params["startingFrom"] = page.next

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


def _retry_after_seconds(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers["Retry-After"]))
    except (KeyError, ValueError):
        # Absent, or an HTTP date: fall back to the backoff.
        return None


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
