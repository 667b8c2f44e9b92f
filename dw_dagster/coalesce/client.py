"""A client for Coalesce's REST API (``/api/v1``) and scheduler (``/scheduler``): its endpoints.

What it relies on is written down in ``docs/coalesce-api.md``. Every response is validated into the models of
:mod:`dw_dagster.coalesce.models`; every failure is a :class:`~dw_dagster.coalesce.errors.CoalesceError`
that names the endpoint. The calls are sent, retried and checked by
:class:`~dw_dagster.coalesce.http_client.CoalesceHTTPClient`.
"""

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, overload
from urllib.parse import quote

import dagster as dg

from dw_dagster.coalesce.errors import (
    CoalesceAPIError,
    CoalesceConfigError,
    CoalesceError,
    CoalesceResponseError,
    CoalesceRunTimeoutError,
    CoalesceTimeoutError,
)
from dw_dagster.coalesce.http_client import GATEWAY_TIMEOUT, CoalesceHTTPClient
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
# The list-jobs page size, and the list-nodes one for summaries: the API accepts 1-500.
DEFAULT_NODES_PAGE_SIZE = 100
DEFAULT_JOBS_PAGE_SIZE = 100
# How long a cancel may take once the Dagster run waiting on a Coalesce run is stopped.
CANCEL_BUDGET_SECONDS = 20.0


@dataclass(frozen=True)
class CoalesceNodePaging:
    """How pages of detailed nodes are read, sized and timed like Coalesce's own Catalog extractor
    (castor-extractor 0.26.131, ``castor_extractor/transformation/coalesce/client/client.py``): 200 nodes a
    page, a 4-minute timeout ("raising this value might end up in remote server disconnection"), and on a
    timeout the page size divided by ten (200, 20, 2, 1) after a 5-minute wait, back to the full size once
    the slow stretch has been read (``utils/client/api/smart_pagination.py``). A gateway's 504 counts as a
    timeout. A page that times out at one node fails the call.

    Args:
        page_size (int): Nodes a page (1-500).
        timeout (float): Seconds one page may take.
        retry_wait (float): Seconds to wait after a timeout before asking for a smaller page.
    """

    page_size: int = 200
    timeout: float = 240.0
    retry_wait: float = 300.0

    def __post_init__(self) -> None:
        if not 1 <= self.page_size <= 500:
            raise CoalesceConfigError(f"node_page_size: {self.page_size!r}; expected 1-500 (the API's limit)")
        if not self.timeout > 0:
            raise CoalesceConfigError(f"node_page_timeout: {self.timeout!r}; expected seconds above 0")
        if not self.retry_wait >= 0:
            raise CoalesceConfigError(
                f"node_page_retry_wait: {self.retry_wait!r}; expected seconds, 0 or more"
            )


class _ShrinkingPages:
    """The page size of :class:`CoalesceNodePaging`: a tenth after each timeout, the full size again once as
    many nodes as a full page have been read at the smaller sizes."""

    def __init__(self, size: int):
        self.full = size
        self.size = size
        self._read_small = 0

    def shrink(self) -> bool:
        """False when the page is one node already."""
        if self.size <= 1:
            return False
        self.size = math.ceil(self.size / 10)
        return True

    def read(self, count: int) -> None:
        if self.size == self.full:
            return
        self._read_small += max(count, self.size)
        if self._read_small >= self.full:
            self.size, self._read_small = self.full, 0


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
        node_paging (Optional[CoalesceNodePaging]): How detailed nodes are paged and timed.
        org_id (Optional[str]): The organization id, which cancelling a run needs.
    """

    def __init__(
        self,
        *args: Any,
        node_paging: CoalesceNodePaging | None = None,
        org_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.node_paging = node_paging or CoalesceNodePaging()
        self.org_id = (org_id or "").strip() or None

    def __repr__(self) -> str:
        return f"CoalesceClient(base_url={self.base_url!r})"

    # ------------------
    # Environments, nodes, jobs
    # ------------------

    def list_environments(self) -> list[CoalesceEnvironment]:
        """All the environments the token can see. Ordered by id: a next page's ``startingFrom`` needs an
        ``orderBy`` (https://docs.coalesce.io/docs/api/query-parameters)."""
        return list(self._paginate(CoalesceEnvironment, "/api/v1/environments", {"orderBy": "id"}))

    def get_environment(self, environment_id: str) -> CoalesceEnvironment:
        return self._call(CoalesceEnvironment, "GET", f"/api/v1/environments/{_segment(environment_id)}")

    @overload
    def list_nodes(
        self,
        environment_id: str,
        detail: Literal[False] = ...,
        limit: int | None = ...,
        order_by: str = ...,
    ) -> list[CoalesceNodeSummary]: ...

    @overload
    def list_nodes(
        self,
        environment_id: str,
        detail: Literal[True],
        limit: int | None = ...,
        order_by: str = ...,
    ) -> list[CoalesceNode]: ...

    def list_nodes(
        self,
        environment_id: str,
        detail: bool = False,
        limit: int | None = None,
        order_by: str = "id",
    ) -> list[CoalesceNodeSummary] | list[CoalesceNode]:
        """All the nodes deployed to an environment, every page followed.

        Args:
            environment_id (str): The Coalesce environment ID.
            detail (bool): Return full nodes (columns, lineage, source mapping, tests) instead of
                summaries. Detailed pages are sized, timed and shrunk as ``node_paging`` says.
            limit (Optional[int]): Nodes per page (1-500); by default ``node_paging.page_size`` for
                detailed nodes, 100 for summaries.
            order_by (str): The field pages are ordered by; kept the same across pages.
        """
        path = f"/api/v1/environments/{_segment(environment_id)}/nodes"
        if detail:
            return list(self._detailed_nodes(path, limit or self.node_paging.page_size, order_by))
        params = {"detail": False, "limit": limit or DEFAULT_NODES_PAGE_SIZE, "orderBy": order_by}
        return list(self._paginate(CoalesceNodeSummary, path, params))

    def _detailed_nodes(self, path: str, limit: int, order_by: str) -> Iterator[CoalesceNode]:
        """Pages of detailed nodes, each with ``node_paging.timeout``; a page that times out is asked again,
        after ``node_paging.retry_wait``, a tenth the size (:class:`CoalesceNodePaging`)."""
        paging, pages = self.node_paging, _ShrinkingPages(limit)
        endpoint = f"GET {path}"
        starting_from: str | None = None
        while True:
            params: dict[str, Any] = {"detail": True, "limit": pages.size, "orderBy": order_by}
            if starting_from is not None:
                params["startingFrom"] = starting_from
            try:
                page = self._call(
                    CoalescePage[CoalesceNode],
                    "GET",
                    path,
                    params=params,
                    timeout=paging.timeout,
                    # The page itself, then the ordinary allowance for retrying a 429 or a 5xx.
                    budget=paging.timeout + self.request_budget,
                    retry_timeouts=False,
                )
            except (CoalesceTimeoutError, CoalesceAPIError) as e:
                if isinstance(e, CoalesceAPIError) and e.status != GATEWAY_TIMEOUT:
                    raise
                was = pages.size
                if not pages.shrink():
                    raise
                self._log.warning(
                    f"Coalesce {endpoint}: a page of {was} detailed nodes took too long ({e}); asking for "
                    f"{pages.size} at a time in {paging.retry_wait:g}s"
                )
                time.sleep(paging.retry_wait)
                continue
            yield from page.data
            pages.read(len(page.data))
            if not page.next:
                return
            if page.next == starting_from:
                raise CoalesceResponseError(endpoint, [f"next: the cursor {page.next!r} did not advance"])
            starting_from = page.next

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
        """The jobs of an environment (``GET /api/v1/environments/{id}/jobs``), every page followed. No public
        description lists this endpoint and a Coalesce may answer 404:
        :func:`~dw_dagster.coalesce.job_discovery.find_jobs` falls back to reading jobs by id.

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

    def list_run_details(
        self,
        environment_id: str | None = None,
        run_type: CoalesceRunType | str | None = None,
        order_by: str | None = None,
        order_by_direction: Literal["asc", "desc"] | None = None,
        limit: int | None = None,
    ) -> CoalescePage[CoalesceRun]:
        """One page of runs in full (``detail=true``, OpenAPI v6.2 ``Runs_listInformation``): each with its
        ``runDetails`` (the job it ran) and its parameters. Arguments as :meth:`list_runs`'."""
        params = _run_filters(environment_id, run_type, None, None, order_by, order_by_direction, limit)
        return self._call(CoalescePage[CoalesceRun], "GET", "/api/v1/runs", params={**params, "detail": True})

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
        keep_environment_parameters: bool = True,
    ) -> int:
        """Starts a refresh run and returns its run counter (the run's id).

        Args:
            environment_id (str): The environment to refresh.
            job_id (Optional[Union[str, int]]): The job to run.
            include_selector (Optional[str]): Nodes to run, e.g. ``{FCT_DAILY_TOTALS}+``.
            exclude_selector (Optional[str]): Nodes to leave out.
            user_credentials (CoalesceUserCredentials): The Snowflake credentials the run uses.
            parameters (Optional[Mapping[str, str]]): Run-time parameters, set over the environment's own
                (see ``keep_environment_parameters``). Without any, the run has the environment's.
            parallelism (int): How many nodes Coalesce builds at once.
            confirm_run_all_nodes (bool): Needed to start a run with neither a job nor an include
                selector, which rebuilds every node of the environment.
            keep_environment_parameters (bool): A run started with ``parameters`` gets those alone: "Keys
                from environment-level parameters are not merged in automatically"
                (https://docs.coalesce.io/docs/deploy-and-refresh/parameters/rtp-refresh). So by default the
                environment's parameters (``GET /api/v1/environments/{id}``) are sent too, ``parameters``
                over them; False sends ``parameters`` alone.
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
            parameters=self._run_parameters(environment_id, parameters, keep_environment_parameters),
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

    def _run_parameters(
        self, environment_id: str, parameters: Mapping[str, Any] | None, keep_environment: bool
    ) -> dict[str, str] | None:
        """The ``parameters`` to send: ``parameters`` over the environment's own (when ``keep_environment``).
        Coalesce takes string values here (its Transform MCP server's ``StartRunParams``: a record of
        strings), so a value that is not a string is refused, naming it, rather than sent changed."""
        if parameters is None:
            return None
        merged = dict(parameters)
        if keep_environment:
            defaults = self.get_environment(environment_id).run_time_parameters
            merged = {**defaults, **merged}
        wrong = sorted(key for key, value in merged.items() if not isinstance(value, str))
        if wrong:
            raise CoalesceConfigError(
                f"Coalesce environment {environment_id}: these run-time parameters are not strings: {wrong}; a run's "
                "parameters are strings, and a run started with parameters gets those alone. Pass them as "
                "strings in parameters, or start the run with keep_environment_parameters=False."
            )
        return merged

    def get_run_status(self, run_counter: int) -> CoalesceRunStatusResponse:
        return self._call(
            CoalesceRunStatusResponse, "GET", "/scheduler/runStatus", params={"runCounter": run_counter}
        )

    def rerun(
        self,
        run_id: int,
        user_credentials: CoalesceUserCredentials,
        parameters: Mapping[str, str] | None = None,
        keep_environment_parameters: bool = True,
    ) -> int:
        """Reruns a failed run from its point of failure; returns the new run counter.

        A rerun, like a start, gets the ``parameters`` it is sent and no others. By default it is sent the
        environment's parameters, then the ones the failed run had, then ``parameters``, each over the
        last, so that it builds with what its run had; ``keep_environment_parameters=False`` sends
        ``parameters`` alone.
        """
        merged: dict[str, str] | None = dict(parameters) if parameters is not None else None
        if keep_environment_parameters:
            run = self.get_run(run_id)
            details = run.run_details
            environment_id = (details.environment_id if details else None) or run.environment_id
            if environment_id is None:
                raise CoalesceResponseError(
                    f"GET /api/v1/runs/{run_id}", ["environmentID: the run names no environment"]
                )
            merged = self._run_parameters(
                environment_id, {**run.run_time_parameters, **(parameters or {})}, True
            )
        request = CoalesceRerunRequest(
            run_details=CoalesceRerunDetails(run_id=str(run_id)),
            user_credentials=user_credentials,
            parameters=merged or None,
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

    def cancel_run(self, run_id: int, environment_id: str, org_id: str, budget: float | None = None) -> None:
        """Cancels a run that has not finished. Coalesce wants the organization's id (``orgID``) too:
        it is in the Coalesce app's settings and in ``~/.coa/config``."""
        if not org_id or not str(org_id).strip():
            raise ValueError(
                f"Cancelling Coalesce run {run_id} needs the organization id (orgID): set org_id on the "
                "workspace (for example from COALESCE_ORG_ID)."
            )
        request = CoalesceCancelRunRequest(run_id=run_id, environment_id=environment_id, org_id=org_id)
        self._request("POST", "/scheduler/cancelRun", body=request.to_request_body(), budget=budget)
        self._log.info(f"Canceled Coalesce run {run_id}.")

    def wait_for_run(
        self,
        run_counter: int,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        timeout: float = DEFAULT_POLL_TIMEOUT,
        cancel_on_stop: bool = True,
        environment_id: str | None = None,
    ) -> CoalesceRun:
        """Polls a run's status until it is terminal (completed, failed or canceled), then returns the
        run. Raises :class:`CoalesceRunTimeoutError` after ``timeout`` seconds.

        With ``cancel_on_stop``, a wait that ends before the run does (the timeout, or the Dagster run
        terminated: Dagster interrupts its step) cancels the Coalesce run (``POST /scheduler/cancelRun``,
        which needs ``org_id``) before raising, and says so in the log; where it cannot, the log says at
        ERROR level that the Coalesce run was left going, and why. ``environment_id`` saves a call to
        read the run's.
        """
        deadline = time.monotonic() + timeout
        last_status: CoalesceRunStatus | None = None
        try:
            while True:
                status = self.get_run_status(run_counter).run_status
                if status != last_status:
                    known = (
                        "" if status.is_known else " (a status this integration does not know: waiting on)"
                    )
                    self._log.info(f"Coalesce run {run_counter} is {status.value}{known}.")
                    last_status = status
                if status.is_terminal:
                    return self.get_run(run_counter)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CoalesceRunTimeoutError(run_counter, timeout, last_status)
                time.sleep(min(poll_interval, remaining))
        except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError, CoalesceRunTimeoutError) as stop:
            if cancel_on_stop:
                self._cancel_stopped(run_counter, environment_id, stop)
            raise

    def _cancel_stopped(self, run_id: int, environment_id: str | None, stop: BaseException) -> None:
        """Cancels the Coalesce run a stopped wait was following, or logs why it goes on. Never raises: the
        stop itself is what the caller sees."""
        why = (
            "the wait timed out"
            if isinstance(stop, CoalesceRunTimeoutError)
            else "the Dagster run was stopped"
        )
        if self.org_id is None:
            self._log.error(
                f"Coalesce run {run_id} was left going ({why}): cancelling it needs the organization id; set "
                "the workspace's org_id (COALESCE_ORG_ID), and cancel the run in Coalesce"
            )
            return
        try:
            if environment_id is None:
                run = self.get_run(run_id)
                environment_id = (
                    run.run_details.environment_id if run.run_details else None
                ) or run.environment_id
            if environment_id is None:
                raise CoalesceResponseError(f"GET /api/v1/runs/{run_id}", ["environmentID: missing"])
            self.cancel_run(run_id, environment_id, self.org_id, budget=CANCEL_BUDGET_SECONDS)
        except (CoalesceError, ValueError) as e:
            try:
                finished = self.get_run_status(run_id).run_status.is_terminal
            except CoalesceError:
                finished = False
            if finished:
                self._log.info(f"Coalesce run {run_id} had already finished ({why}).")
            else:
                self._log.error(f"Coalesce run {run_id} was left going ({why}): cancelling it failed: {e}")
            return
        self._log.warning(f"Canceled Coalesce run {run_id}: {why}.")


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
