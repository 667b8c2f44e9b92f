"""The simulator's HTTP surface: Coalesce's REST API (``/api/v1``) and Scheduler (``/scheduler``) in the
shapes ``docs/coalesce-api.md`` records, plus the simulator's own control endpoints (``/_sim``).

It serves only what public evidence shows, and takes the stricter reading where the evidence is unclear
(``docs/coalesce-contract.md`` lists each rule, its source and the test that holds the simulator to it):

- Every request carries ``Authorization: Bearer <token>``; any other token is a 401 with Coalesce's body
  (OpenAPI v6.2 ``securitySchemes: BearerAuth`` and its 401 example; https://docs.coalesce.io/docs/api/authentication/).
- Every error answers Coalesce's error body ``{"error": {"errorString", "errorDetail"}}`` (v6.2 ``ErrorResponse``).
- Listings page as :mod:`~dw_local.coalesce_sim.paging` says: ``startingFrom`` needs ``orderBy``; ``next``
  is opaque.
- No jobs collection unless turned on (:class:`~dw_local.coalesce_sim.simulator.CoalesceSimulator`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from dw_local.account_usage import ClockNotSet
from dw_local.coalesce_sim.api_shapes import node_detail, node_summary
from dw_local.coalesce_sim.clock import format_time, parse_time
from dw_local.coalesce_sim.faults import HttpFault, NodePageFault, WarehouseFault, error_body, fault_response
from dw_local.coalesce_sim.paging import ORDER_REQUIRED, decode_cursor, encode_cursor, page
from dw_local.coalesce_sim.schemas import (
    ApiFeatures,
    CancelRunRequest,
    ClockRequest,
    DeployRequest,
    RerunRequest,
    StartRunRequest,
    describe_validation_error,
)
from dw_local.coalesce_sim.simulator import ApiError, CoalesceSimulator
from dw_local.coalesce_sim.store import RUN_ORDER_COLUMNS, RUN_STATUSES, RunQuery

UNAUTHENTICATED = "Unable to authenticate, please ensure your token is valid."
ModelT = TypeVar("ModelT", bound=BaseModel)


def _error_response(error: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


class _Guard:
    """Injected faults first (a rate limiter sits in front of everything), then the bearer token."""

    def __init__(self, app: ASGIApp, sim: CoalesceSimulator, token: str):
        self.app = app
        self.sim = sim
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        fault = self.sim.faults.take(scope["path"])
        if fault is not None:
            status, body, headers = fault_response(fault)
            await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)
            return
        given = Headers(scope=scope).get("authorization", "").encode()
        if not hmac.compare_digest(given, self.expected):
            detail = "Missing Authorization header." if not given else "The bearer token does not match."
            await _error_response(ApiError(401, UNAUTHENTICATED, detail))(scope, receive, send)
            return
        await self.app(scope, receive, send)


# ------------------
# Request helpers
# ------------------


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "request body: not valid JSON") from None


async def _body(request: Request, model: type[ModelT]) -> ModelT:
    payload = await _json(request)
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        problems = describe_validation_error(e)
        raise ApiError(400, problems[0], "; ".join(problems)) from None


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name}: expected an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ApiError(400, f"{name}: must be between {low} and {high}, got {value}")
    return value


def _bool_param(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise ApiError(400, f"{name}: expected true or false, got {raw!r}")
    return raw in ("true", "1")


def _choice_param(request: Request, name: str, choices: tuple[str, ...], default: str | None) -> str | None:
    raw = request.query_params.get(name, default)
    if raw is not None and raw not in choices:
        raise ApiError(400, f"{name}: expected one of {', '.join(choices)}, got {raw!r}")
    return raw


def _order(
    request: Request, order_by: tuple[str, ...], default_direction: str = "asc"
) -> tuple[str, bool, str | None]:
    """``orderBy``, whether descending, and ``startingFrom``, which is refused without ``orderBy``."""
    starting_from = request.query_params.get("startingFrom")
    if starting_from is not None and request.query_params.get("orderBy") is None:
        raise ApiError(400, ORDER_REQUIRED)
    order = _choice_param(request, "orderBy", order_by, "id") or "id"
    direction = _choice_param(request, "orderByDirection", ("asc", "desc"), default_direction)
    return order, direction == "desc", starting_from


def _listing(data: list[Any], next_cursor: str | None, limit: int) -> JSONResponse:
    return JSONResponse({"data": data, "next": next_cursor, "limit": limit})


def _sim(request: Request) -> CoalesceSimulator:
    return request.app.state.sim


# ------------------
# REST API
# ------------------


async def list_environments(request: Request) -> Response:
    sim = _sim(request)
    limit = _int_param(request, "limit", 100, 1, 1000)
    order_by, descending, starting_from = _order(request, ("id", "name"))
    project = request.query_params.get("project")
    listed = project in (None, sim.project.file.project.id)
    environments = list(sim.project.file.environments) if listed else []
    environments.sort(
        key=lambda e: (int(e.id), e.id) if order_by == "id" else (e.name, e.id), reverse=descending
    )
    chunk, next_cursor = page(
        "environments", environments, lambda e: e.id, limit, order_by, descending, starting_from
    )
    return _listing([sim.environment_to_api(e) for e in chunk], next_cursor, limit)


async def get_environment(request: Request) -> Response:
    sim = _sim(request)
    env = sim.environment(request.path_params["environmentID"])
    return JSONResponse(sim.environment_to_api(env, full=True))


async def list_nodes(request: Request) -> Response:
    sim = _sim(request)
    env_id = request.path_params["environmentID"]
    env, graph = sim.environment(env_id), sim.graph(env_id)
    detail = _bool_param(request, "detail")
    limit = _int_param(request, "limit", 100, 1, 500)
    order_by, descending, starting_from = _order(request, ("id", "name"))
    key = (lambda n: (n.id,)) if order_by == "id" else (lambda n: (n.name, n.id))
    nodes = sorted(graph.nodes.values(), key=key, reverse=descending)
    listing = f"environments/{env.id}/nodes"
    chunk, next_cursor = page(listing, nodes, lambda n: n.id, limit, order_by, descending, starting_from)
    if detail:
        # Detailed pages are the slow ones on a large project (faults.NodePageFault).
        delay, failure = sim.faults.take_node_page(limit, len(chunk))
        if delay:
            await asyncio.sleep(delay)
        if failure is not None:
            return JSONResponse(error_body(failure), status_code=failure)
    shape = node_detail if detail else node_summary
    return _listing([shape(n, env) for n in chunk], next_cursor, limit)


async def get_node(request: Request) -> Response:
    params = request.path_params
    return JSONResponse(_sim(request).node(params["environmentID"], params["nodeID"]))


async def list_jobs(request: Request) -> Response:
    sim = _sim(request)
    if not sim.jobs_collection:
        # Answered as any path the API does not have (see CoalesceSimulator.jobs_collection).
        raise HTTPException(404)
    env_id = request.path_params["environmentID"]
    sim.environment(env_id)
    limit = _int_param(request, "limit", 100, 1, 500)
    order_by, descending, starting_from = _order(request, ("id", "name"))
    key = (lambda j: (int(j.id), j.id)) if order_by == "id" else (lambda j: (j.name, j.id))
    jobs = sorted(sim.project.file.jobs, key=key, reverse=descending)
    listing = f"environments/{env_id}/jobs"
    chunk, next_cursor = page(listing, jobs, lambda j: j.id, limit, order_by, descending, starting_from)
    # The shape the Transform MCP server's one version that calls it documents: { data, next?, total? }.
    return JSONResponse({"data": [j.to_api() for j in chunk], "next": next_cursor, "total": len(jobs)})


async def get_job(request: Request) -> Response:
    job = _sim(request).job(request.path_params["environmentID"], request.path_params["jobID"])
    return JSONResponse(job.to_api())


async def list_runs(request: Request) -> Response:
    sim = _sim(request)
    limit = _int_param(request, "limit", 25, 1, 1000)
    # Newest first unless asked (OpenAPI v6.2: orderByDirection defaults to desc).
    order_by, descending, starting_from = _order(request, tuple(RUN_ORDER_COLUMNS), "desc")
    from_id = from_time = None
    if starting_from is not None:
        if starting_from.isdigit():
            from_id = int(starting_from)
        elif not _looks_like_time(starting_from):
            from_id = int(decode_cursor(starting_from, "runs", order_by, descending))
        elif order_by == "id":
            raise ApiError(400, f"startingFrom: expected a run id with orderBy=id, got {starting_from!r}")
        else:
            from_time = format_time(parse_time(starting_from))
    project = request.query_params.get("projectID")
    query = RunQuery(
        limit=limit,
        order_by=order_by,
        descending=descending,
        starting_from_id=from_id,
        starting_from_time=from_time,
        run_type=_choice_param(request, "runType", ("deploy", "refresh"), None),
        run_status=_choice_param(request, "runStatus", RUN_STATUSES, None),
        environment_id=request.query_params.get("environmentID"),
    )
    runs, more = sim.store.list_runs(query)
    if project not in (None, sim.project.file.project.id):
        runs, more = [], False
    detail = _bool_param(request, "detail")
    data = [r.detail() if detail else r.summary() for r in runs]
    next_cursor = encode_cursor("runs", order_by, descending, str(runs[-1].id)) if more and runs else None
    return _listing(data, next_cursor, limit)


def _looks_like_time(text: str) -> bool:
    try:
        parse_time(text)
    except ValueError:
        return False
    return True


def _run_id(request: Request) -> int:
    raw = request.path_params["runID"]
    if not raw.isdigit():
        raise ApiError(404, f"Run {raw} was not found.")
    return int(raw)


async def get_run(request: Request) -> Response:
    return JSONResponse(_sim(request).run(_run_id(request)).detail())


async def get_run_results(request: Request) -> Response:
    return JSONResponse({"data": _sim(request).run_results(_run_id(request))})


# ------------------
# Scheduler
# ------------------


async def start_run(request: Request) -> Response:
    body = await _body(request, StartRunRequest)
    return JSONResponse({"runCounter": _sim(request).start_run(body)})


async def run_status(request: Request) -> Response:
    raw = request.query_params.get("runCounter")
    if raw is None or not raw.isdigit():
        raise ApiError(400, f"runCounter: expected a run id, got {raw!r}")
    run = _sim(request).run(int(raw))
    # The run's page in the Coalesce app, not an API path: OpenAPI v6.2's example is
    # "https://app.coalescesoftware.io/runs/1".
    link = f"{str(request.base_url).rstrip('/')}/runs/{run.id}"
    return JSONResponse({"runStatus": run.status, "runType": run.run_type, "runLink": link})


async def rerun(request: Request) -> Response:
    body = await _body(request, RerunRequest)
    return JSONResponse({"runCounter": _sim(request).rerun(body)})


async def cancel_run(request: Request) -> Response:
    body = await _body(request, CancelRunRequest)
    _sim(request).cancel(body.runID, body.environmentID, body.orgID)
    return Response(status_code=204)


# ------------------
# Simulator control
# ------------------


async def health(request: Request) -> Response:
    sim = _sim(request)
    return JSONResponse(
        {
            "status": "ok",
            "project": sim.project.file.project.name,
            "now": sim.now(),
            "scheduler": sim.cron is not None,
            "waitingRuns": len(sim.store.run_ids_with_status("waitingToRun")),
        }
    )


async def clock(request: Request) -> Response:
    sim = _sim(request)
    if request.method == "POST":
        body = await _body(request, ClockRequest)
        try:
            now = parse_time(body.now)
        except ValueError:
            raise ApiError(400, f"now: expected an ISO-8601 time, got {body.now!r}") from None
        try:
            sim.set_clock(now)
        except ClockNotSet as e:
            raise ApiError(502, str(e)) from None
    return JSONResponse({"now": sim.now()})


async def faults(request: Request) -> Response:
    sim = _sim(request)
    if request.method == "POST":
        sim.faults.set_http(await _body(request, HttpFault))
    elif request.method == "DELETE":
        sim.faults.clear()
    return JSONResponse(sim.faults.describe())


async def node_pages(request: Request) -> Response:
    sim = _sim(request)
    sim.faults.set_node_pages(await _body(request, NodePageFault))
    return JSONResponse(sim.faults.describe())


async def api_features(request: Request) -> Response:
    """Turns on (or off) what the real API may not have; today the jobs collection."""
    sim = _sim(request)
    if request.method == "POST":
        sim.jobs_collection = (await _body(request, ApiFeatures)).jobsCollection
    return JSONResponse({"jobsCollection": sim.jobs_collection})


async def warehouse(request: Request) -> Response:
    sim = _sim(request)
    sim.faults.query_delay = (await _body(request, WarehouseFault)).queryDelaySeconds
    return JSONResponse(sim.faults.describe())


async def workspace_node(request: Request) -> Response:
    sim = _sim(request)
    node_id, env_id = request.path_params["nodeID"], request.query_params.get("environmentID")
    if request.method == "PUT":
        return JSONResponse(sim.edit_node(node_id, await _json(request), env_id))
    return JSONResponse(sim.workspace_node(node_id, env_id))


async def deploy(request: Request) -> Response:
    body = await _body(request, DeployRequest)
    run_id, changed = _sim(request).deploy(body.environmentID)
    return JSONResponse({"runCounter": run_id, "deployedNodes": changed})


# ------------------
# The application
# ------------------


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: "Not found.", 405: "Method not allowed."}.get(exc.status_code, exc.detail)
    routed = exc.status_code in (404, 405)
    detail = f"{request.method} {request.url.path}: no such endpoint" if routed else None
    return _error_response(ApiError(exc.status_code, message, detail), headers=exc.headers)


ROUTES = [
    Route("/api/v1/environments", list_environments),
    Route("/api/v1/environments/{environmentID}", get_environment),
    Route("/api/v1/environments/{environmentID}/nodes", list_nodes),
    Route("/api/v1/environments/{environmentID}/nodes/{nodeID}", get_node),
    Route("/api/v1/environments/{environmentID}/jobs", list_jobs),
    Route("/api/v1/environments/{environmentID}/jobs/{jobID}", get_job),
    Route("/api/v1/runs", list_runs),
    Route("/api/v1/runs/{runID}", get_run),
    Route("/api/v1/runs/{runID}/results", get_run_results),
    Route("/scheduler/startRun", start_run, methods=["POST"]),
    Route("/scheduler/runStatus", run_status),
    Route("/scheduler/rerun", rerun, methods=["POST"]),
    Route("/scheduler/cancelRun", cancel_run, methods=["POST"]),
    Route("/_sim/health", health),
    Route("/_sim/clock", clock, methods=["GET", "POST"]),
    Route("/_sim/faults", faults, methods=["GET", "POST", "DELETE"]),
    Route("/_sim/warehouse", warehouse, methods=["POST"]),
    Route("/_sim/nodepages", node_pages, methods=["POST"]),
    Route("/_sim/api", api_features, methods=["GET", "POST"]),
    Route("/_sim/workspace/nodes/{nodeID}", workspace_node, methods=["GET", "PUT"]),
    Route("/_sim/deploy", deploy, methods=["POST"]),
]


def create_app(sim: CoalesceSimulator, token: str) -> Starlette:
    """The ASGI app serving ``sim``; the simulator's worker threads run for the app's lifespan."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sim.start()
        try:
            yield
        finally:
            sim.stop()

    app = Starlette(
        routes=ROUTES,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.sim = sim
    app.add_middleware(_Guard, sim=sim, token=token)
    return app
