"""The simulated Coalesce service behind the HTTP routes: environments and their deployed nodes, the
workspace's pending edits, runs from start to results, and the clock, the faults and the scheduler.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dw_dagster.coalesce.selectors import Selector, SelectorError, SelectorNode, parse_selector, select_nodes
from dw_local.account_usage import set_clock as set_snowflake_clock
from dw_local.coalesce_sim.api_shapes import environment_to_api, node_detail
from dw_local.coalesce_sim.clock import SimClock, format_time
from dw_local.coalesce_sim.faults import Faults
from dw_local.coalesce_sim.node_checks import check_nodes
from dw_local.coalesce_sim.node_edit import NodeEditError, parse_api_node
from dw_local.coalesce_sim.node_graph import NodeGraph
from dw_local.coalesce_sim.project import Project
from dw_local.coalesce_sim.project_specs import EnvironmentSpec, JobSpec, NodeSpec, ScheduleSpec
from dw_local.coalesce_sim.runner import RunExecutor, SignIn, SnowflakeAddress
from dw_local.coalesce_sim.scheduler import CronScheduler, RunQueue
from dw_local.coalesce_sim.schemas import (
    LOCAL_SNOWFLAKE_ACCOUNT,
    SCHEDULER_SNOWFLAKE_USER,
    RerunRequest,
    StartRunRequest,
    UserCredentials,
)
from dw_local.coalesce_sim.store import RunRecord, RunStore

logger = logging.getLogger(__name__)

WORKSPACE_SCOPE = "workspace"
CLOCK_OFFSET_SETTING = "clock_offset_seconds"
# Locally every valid token is the same user.
API_USER_ID = "local-user"
SCHEDULER_USER_ID = "coalesce-scheduler"
# What a run started by the Scheduler or a deploy reports as its credentials (the environment's own).
ENVIRONMENT_CREDENTIALS = {
    "snowflakeAccount": LOCAL_SNOWFLAKE_ACCOUNT,
    "snowflakeAuthType": "Basic",
    "snowflakeUsername": SCHEDULER_SNOWFLAKE_USER,
    "snowflakeRole": None,
    "snowflakeWarehouse": None,
}


class ApiError(Exception):
    """An error answer: ``{"error": {"errorString": "<status>: <message>", "errorDetail": ...}}``."""

    def __init__(self, status: int, message: str, detail: str | None = None):
        self.status = status
        self.message = message
        self.detail = detail or message
        super().__init__(f"{status}: {message}")

    def body(self) -> dict[str, Any]:
        return {"error": {"errorString": f"{self.status}: {self.message}", "errorDetail": self.detail}}


@dataclass(frozen=True)
class _Plan:
    job_id: str | None
    include: str | None
    exclude: str | None
    nodes: list[str]


class CoalesceSimulator:
    def __init__(
        self,
        project: Project,
        data_dir: Path,
        snowflake: SnowflakeAddress,
        scheduler: bool = False,
        jobs_collection: bool = False,
    ):
        self.project = project
        # `GET /api/v1/environments/{id}/jobs` is in neither Coalesce's OpenAPI description (v6.2) nor its
        # docs, and Coalesce's Transform MCP server lists an environment's jobs by probing `GET .../jobs/1`,
        # `/2`, ... "when the API lacks a collection GET endpoint" (jessemarshall/coalesce-transform-mcp
        # `src/coalesce/api/scan.ts`, `jobs.ts` `listEnvironmentJobs`, from its first commit to 110539a).
        # So it answers 404 unless a world or a test turns it on (`--jobs-collection`, `POST /_sim/api`).
        self.jobs_collection = jobs_collection
        self.store = RunStore(data_dir / "coalesce.sqlite3")
        offset = self.store.get_setting(CLOCK_OFFSET_SETTING)
        self.clock = SimClock(timedelta(seconds=float(offset)) if offset else timedelta(0))
        self.faults = Faults()
        self.executor = RunExecutor(
            self.store, self.clock, snowflake, self.faults, {j.id: j.name for j in project.file.jobs}
        )
        self.queue = RunQueue(self._execute)
        # Each queued API run's credentials, secrets included, until it starts: in memory only, never in the
        # store or an answer (which keep ``UserCredentials.public()``).
        self._credentials: dict[int, UserCredentials] = {}
        self._lock = threading.Lock()
        environments = project.file.environments
        self._workspace_edits = self._load_edits(WORKSPACE_SCOPE)
        self._deployed_edits = {env.id: self._load_edits(self._env_scope(env.id)) for env in environments}
        self._graphs = {env.id: self._graph_with(self._deployed_edits[env.id]) for env in environments}
        self.cron = CronScheduler(project.file.schedules, self.clock, self._scheduled) if scheduler else None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        now = self.now()
        # A run a crash interrupted cannot resume mid-node: it failed. Waiting runs queue again.
        for run_id in self.store.run_ids_with_status("running", "initializing", "rendering"):
            self.store.update_run(
                run_id,
                status="failed",
                end_time=now,
                failure_reason="Interrupted: the local Coalesce simulator stopped during the run.",
            )
        self.queue.start()
        for run_id in self.store.run_ids_with_status("waitingToRun"):
            self.queue.submit(run_id)
        if self.cron is not None:
            self.cron.start()

    def stop(self) -> None:
        # A run in flight is left as it is: the next start fails it as interrupted, as after a crash.
        if self.cron is not None:
            self.cron.stop()
        self.queue.stop()

    def now(self) -> str:
        return format_time(self.clock.now())

    def set_clock(self, now: datetime) -> None:
        # The local Snowflake's query history reads in the same business time, and takes it first: once this
        # clock moves, the Scheduler may start the night's run within 0.2 s, and a statement stamped before
        # the Snowflake's clock moved was counted on the night before (the cost of a night's first node
        # doubled). If the Snowflake does not take it (ClockNotSet), this clock stays where it was.
        set_snowflake_clock(self.executor.snowflake.host, self.executor.snowflake.port, now)
        self.clock.set(now)
        self.store.set_setting(CLOCK_OFFSET_SETTING, str(self.clock.offset.total_seconds()))

    # -- nodes and edits ---------------------------------------------------------------------------

    @staticmethod
    def _env_scope(environment_id: str) -> str:
        return f"environment:{environment_id}"

    def _graph_with(self, edits: dict[str, NodeSpec]) -> NodeGraph:
        return NodeGraph(edits.get(n.id, n) for n in self.project.file.nodes)

    def _load_edits(self, scope: str) -> dict[str, NodeSpec]:
        edits = {
            node_id: NodeSpec.model_validate(node)
            for node_id, node in self.store.node_edits(scope).items()
            if node_id in self.project.graph.nodes
        }
        problems = check_nodes(list(self._graph_with(edits).nodes.values()), self.project.file.environments)
        if problems:
            # The project file changed under stored edits: the file wins.
            logger.warning("ignoring %s edits that no longer fit the project file: %s", scope, problems[0])
            return {}
        return edits

    def environment(self, environment_id: str, field: str = "environmentID") -> EnvironmentSpec:
        env = self.project.environment(environment_id)
        if env is None:
            message = f"Environment {environment_id} was not found."
            raise ApiError(404, message, f"{field}: no such environment")
        return env

    def graph(self, environment_id: str) -> NodeGraph:
        return self._graphs[self.environment(environment_id).id]

    def workspace_graph(self) -> NodeGraph:
        with self._lock:
            return self._graph_with(self._workspace_edits)

    def node(self, environment_id: str, node_id: str) -> dict[str, Any]:
        env, graph = self.environment(environment_id), self.graph(environment_id)
        if node_id not in graph.nodes:
            raise ApiError(404, f"Node {node_id} was not found in environment {environment_id}.")
        return node_detail(graph.nodes[node_id], env)

    def environment_to_api(self, env: EnvironmentSpec, full: bool = False) -> dict[str, Any]:
        latest = self.store.latest_refresh(env.id)
        status = "Waiting"
        if latest is not None and latest.status == "running":
            status = "Refreshing"
        elif latest is not None and latest.status == "failed":
            status = "Failed Refresh"
        return environment_to_api(env, self.project.file.project, status, full)

    def job(self, environment_id: str, job_id: str) -> JobSpec:
        self.environment(environment_id)
        job = self.project.job(job_id)
        if job is None:
            raise ApiError(404, f"Job {job_id} was not found in environment {environment_id}.")
        return job

    def workspace_node(self, node_id: str, environment_id: str | None) -> dict[str, Any]:
        env = self.environment(environment_id or self.project.file.environments[0].id)
        graph = self.workspace_graph()
        if node_id not in graph.nodes:
            raise ApiError(404, f"Node {node_id} was not found in the workspace.")
        return node_detail(graph.nodes[node_id], env)

    def edit_node(self, node_id: str, payload: Any, environment_id: str | None) -> dict[str, Any]:
        """Applies an engineer's edit to the workspace; it reaches an environment at the next deploy."""
        graph = self.workspace_graph()
        if node_id not in graph.nodes:
            raise ApiError(404, f"Node {node_id} was not found in the workspace.")
        try:
            edited = parse_api_node(node_id, payload, graph, self.project.file.environments)
        except NodeEditError as e:
            raise ApiError(400, e.problems[0], "; ".join(e.problems)) from None
        with self._lock:
            if edited == self.project.graph.nodes[node_id]:
                self._workspace_edits.pop(node_id, None)
            else:
                self._workspace_edits[node_id] = edited
            self.store.replace_node_edits(
                WORKSPACE_SCOPE, {i: n.model_dump(mode="json") for i, n in self._workspace_edits.items()}
            )
        logger.info("workspace: node %s edited", edited.label)
        return self.workspace_node(node_id, environment_id)

    def deploy(self, environment_id: str) -> tuple[int, list[str]]:
        """Deploys the workspace to an environment; returns the deploy run's id and the changed node ids."""
        env = self.environment(environment_id)
        with self._lock:
            before, after = self._deployed_edits[env.id], dict(self._workspace_edits)
            changed = [n.id for n in self.project.file.nodes if before.get(n.id) != after.get(n.id)]
            self._deployed_edits[env.id] = after
            self._graphs[env.id] = self._graph_with(after)
            self.store.replace_node_edits(
                self._env_scope(env.id), {i: n.model_dump(mode="json") for i, n in after.items()}
            )
        now = self.now()
        run = self.store.create_run(
            run_type="deploy",
            status="completed",
            environment_id=env.id,
            plan=changed,
            user_credentials=dict(ENVIRONMENT_CREDENTIALS),
            user_id=API_USER_ID,
            start_time=now,
            end_time=now,
        )
        logger.info("deploy run %s: %d changed nodes to environment %s", run.id, len(changed), env.id)
        return run.id, changed

    # -- runs --------------------------------------------------------------------------------------

    def run(self, run_id: int) -> RunRecord:
        run = self.store.get(run_id)
        if run is None:
            raise ApiError(404, f"Run {run_id} was not found.")
        return run

    def run_results(self, run_id: int) -> list[dict[str, Any]]:
        self.run(run_id)
        return [
            {
                "nodeID": r["nodeID"],
                "name": r["name"],
                "isRunning": r["state"] == "running",
                "runState": r["state"],
                "queryResults": r["queryResults"],
            }
            for r in self.store.node_results(run_id)
        ]

    @staticmethod
    def _selector(text: str | None, field: str) -> Selector:
        try:
            return parse_selector(text)
        except SelectorError as e:
            raise ApiError(400, f"{field}: {e}") from None

    def _select(
        self, env: EnvironmentSpec, include: Selector, exclude: Selector, whole_by_default: bool, field: str
    ) -> list[str]:
        """The nodes a run builds, in dependency order: the selected ones that are not Sources."""
        graph = self.graph(env.id)
        nodes = [SelectorNode(i, n.name, n.locationName, n.nodeType) for i, n in graph.nodes.items()]
        if whole_by_default and include.is_empty:
            chosen = set(graph.nodes) - select_nodes(exclude, None, nodes, graph.edges)
        else:
            chosen = select_nodes(include, exclude, nodes, graph.edges)
        plan = [i for i in graph.order if i in chosen and not graph.nodes[i].is_source]
        if not plan:
            raise ApiError(400, f"{field}: selects no node to build in environment {env.id}")
        return plan

    def start_run(self, request: StartRunRequest) -> int:
        details = request.runDetails
        env = self.environment(details.environmentID, "runDetails.environmentID")
        if details.jobID is None:
            include = self._selector(details.includeNodesSelector, "runDetails.includeNodesSelector")
            exclude = self._selector(details.excludeNodesSelector, "runDetails.excludeNodesSelector")
            # Neither a Job nor an include selector: the whole environment.
            nodes = self._select(env, include, exclude, True, "runDetails.includeNodesSelector")
        else:
            if details.includeNodesSelector or details.excludeNodesSelector:
                raise ApiError(400, "runDetails: give jobID or include/exclude selectors, not both")
            job = self.project.job(details.jobID)
            if job is None:
                raise ApiError(404, f"Job {details.jobID} was not found.", "runDetails.jobID: no such job")
            include, exclude = parse_selector(job.includeSelector), parse_selector(job.excludeSelector)
            nodes = self._select(env, include, exclude, False, "runDetails.jobID")
        plan = _Plan(details.jobID, details.includeNodesSelector, details.excludeNodesSelector, nodes)
        return self._submit(
            env,
            plan,
            request.userCredentials,
            API_USER_ID,
            details.parallelism,
            self._run_parameters(env, request.parameters),
        )

    @staticmethod
    def _run_parameters(env: EnvironmentSpec, given: dict[str, str] | None) -> dict[str, Any]:
        """A run's parameters: the request's ``parameters`` when it has them, whole, and the environment's
        defaults only when it has none. "When you include parameters, Coalesce treats it as the complete set
        of runtime parameters for that Run. Keys from environment-level parameters are not merged in
        automatically" (https://docs.coalesce.io/docs/deploy-and-refresh/parameters/rtp-refresh)."""
        return dict(given) if given is not None else dict(env.runTimeParameters)

    def _submit(
        self,
        env: EnvironmentSpec,
        plan: _Plan,
        credentials: UserCredentials | dict[str, Any],
        user_id: str,
        parallelism: int = 16,
        parameters: dict[str, Any] | None = None,
        rerun_of: RunRecord | None = None,
    ) -> int:
        run = self.store.create_run(
            run_type="refresh",
            status="waitingToRun",
            environment_id=env.id,
            job_id=plan.job_id,
            include_selector=plan.include,
            exclude_selector=plan.exclude,
            parallelism=parallelism,
            plan=plan.nodes,
            rerun_of=rerun_of.id if rerun_of else None,
            run_history=[*rerun_of.run_history, rerun_of.id] if rerun_of else [],
            parameters=parameters,
            user_credentials=(
                credentials.public() if isinstance(credentials, UserCredentials) else credentials
            ),
            user_id=user_id,
        )
        if isinstance(credentials, UserCredentials):
            self._credentials[run.id] = credentials
        logger.info("run %s queued: %d nodes in environment %s", run.id, len(plan.nodes), env.id)
        self.queue.submit(run.id)
        return run.id

    def rerun(self, request: RerunRequest) -> int:
        """Retries a finished refresh from its point of failure: the nodes that failed or did not run."""
        original = self.run(int(request.runDetails.runID))
        if original.run_type != "refresh":
            message = f"runDetails.runID: run {original.id} is a {original.run_type}, not a refresh"
            raise ApiError(400, message)
        if not original.is_terminal:
            raise ApiError(400, f"runDetails.runID: run {original.id} is still {original.status}")
        done = {r["nodeID"] for r in self.store.node_results(original.id) if r["state"] == "complete"}
        plan = _Plan(
            original.job_id,
            original.include_selector,
            original.exclude_selector,
            [i for i in original.plan if i not in done],
        )
        env = self.environment(original.environment_id)
        # The same rule as a start: the original run's parameters are not carried over either.
        return self._submit(
            env,
            plan,
            request.userCredentials,
            API_USER_ID,
            original.parallelism,
            self._run_parameters(env, request.parameters),
            rerun_of=original,
        )

    def cancel(self, run_id: int, environment_id: str, org_id: str) -> None:
        if org_id != self.project.file.project.orgID:
            raise ApiError(403, f"orgID: {org_id!r} is not the organization of this token")
        run = self.run(run_id)
        if run.environment_id != environment_id:
            raise ApiError(400, f"environmentID: run {run_id} is in environment {run.environment_id}")
        if run.is_terminal:
            raise ApiError(400, f"runID: run {run_id} already {run.status}")
        if not self.store.cancel_if_waiting(run_id, self.now()):
            self.executor.request_cancel(run_id)
        logger.info("run %s: cancel requested", run_id)

    def _execute(self, run_id: int) -> None:
        given = self._credentials.pop(run_id, None)
        run = self.store.get(run_id)
        if run is None or run.status != "waitingToRun":
            return
        env = self.environment(run.environment_id)
        logger.info("run %s started", run_id)
        user = str(run.user_credentials.get("snowflakeUsername"))
        # The Scheduler's runs sign in with the environment's own credentials; an API run with its own.
        sign_in = SignIn.environment(user) if run.user_id == SCHEDULER_USER_ID else SignIn.of(given, user)
        self.executor.execute(run, env, self._graphs[env.id], sign_in)
        finished = self.store.get(run_id)
        logger.info("run %s %s", run_id, finished.status if finished else "vanished")

    def _scheduled(self, schedule: ScheduleSpec, due: datetime) -> None:
        env = self.environment(schedule.environmentID)
        job = self.project.job(schedule.jobID)
        assert job is not None  # checked when the project file was loaded
        include, exclude = parse_selector(job.includeSelector), parse_selector(job.excludeSelector)
        try:
            nodes = self._select(env, include, exclude, False, "jobID")
        except ApiError as e:
            logger.warning("schedule of job %s at %s: %s", job.id, format_time(due), e.message)
            return
        plan = _Plan(job.id, None, None, nodes)
        run_id = self._submit(
            env,
            plan,
            dict(ENVIRONMENT_CREDENTIALS),
            SCHEDULER_USER_ID,
            parameters=dict(env.runTimeParameters),
        )
        logger.info("schedule of job %s at %s started run %s", job.id, format_time(due), run_id)
