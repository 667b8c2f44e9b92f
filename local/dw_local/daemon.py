"""Does for the local world what ``dagster-daemon`` does in production, in this process and on demand.

One :meth:`LocalDaemon.tick` evaluates the code location's Coalesce run sensor, stores the asset events it
returns (as the daemon stores a tick's events) and executes the checks runs it requests. Seeding, tests and
headless replays use it to play many nights in minutes; ``world up`` runs the real daemon instead.

Each sensor evaluation is recorded as the sensor daemon records a tick, and each run it requests is created
as that daemon creates it: of the sensor's job, from the code location ``dagster dev`` loads, tagged with the
sensor, the tick and the run key. The UI then shows a seeded run as it shows a run the daemon launched: its
job as the target, the sensor and its tick as what launched it.

A tick can run on the night's business time (``at``): every event it stores (materializations, check
evaluations, runs) then carries that night's time, so a seeded history reads night by night in the UI rather
than as minutes of one afternoon, and Dagster's freshness policies are then evaluated as its freshness daemon
does, at the end of that night's day.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
import time
import unittest.mock
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.repository_definition import SINGLETON_REPOSITORY_NAME
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.execution.api import create_execution_plan, execute_run, execute_run_iterator
from dagster._core.execution.resources_init import get_transitive_required_resource_keys
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.run_coordinator import SubmitRunContext
from dagster._core.scheduler.instigation import (
    InstigatorState,
    InstigatorStatus,
    InstigatorTick,
    SensorInstigatorData,
    TickData,
    TickStatus,
)
from dagster._core.snap import ExecutionPlanSnapshot, JobSnap, snapshot_from_execution_plan
from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG, TICK_ID_TAG
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._time import get_current_timestamp
from dagster._utils.error import serializable_error_info_from_exc_info
from dagster._utils.tags import TagConcurrencyLimitsCounter

from dw_dagster.app.commands.ops import migrate_deployment
from dw_dagster.app.definitions import load_definitions
from dw_dagster.app.project import refresh_coalesce_state
from dw_dagster.app.remediation import REMEDIATION_RUN_CONFIG_ENV
from dw_dagster.app.settings import Settings
from dw_local import resource_schemas
from dw_local.instance_storage import EVENT_BATCH_SIZE, deployment_instance
from dw_local.world import LocalWorld

SENSOR_NAME = "coalesce_run_sensor"
INCIDENT_SENSOR = "incident_sensor"
REMEDIATION_SENSOR = "remediation_proposals"
EXPIRY_SENSOR = "approval_expiry"
# execute_in_process logs every event to the console at DEBUG; keep warnings and worse.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# The local world answers in seconds, not hours: poll it often. The proposals sensor requests this run config
# for every remediation run (DW_REMEDIATION_RUN_CONFIG, as a deployment sets its own) and binds a plan only
# to a run of exactly that configuration.
REMEDIATION_RUN_CONFIG = {
    **QUIET,
    "ops": {op: {"config": {"poll_seconds": 0.2}} for op in ("await_node_deploy", "scoped_rerun")},
}
REPO_DAGSTER_YAML = Path(__file__).resolve().parents[2] / "dagster.yaml"
# The freshness daemon evaluates every 30 s; the local one looks once, at the end of the night's day (before
# the next night's job), when every deadline of the night has passed.
FRESHNESS_LOOK = timedelta(days=1, minutes=-2)


@contextmanager
def business_clock(at: datetime) -> Iterator[None]:
    """Dagster's clock (``dagster._time``, and the log records events are made from) runs from ``at``
    instead of now, ticking at the real pace; nothing else in the process is affected."""
    from dagster._core.test_utils import get_freezable_log_manager

    offset = at.timestamp() - time.time()

    def timestamp() -> float:
        return time.time() + offset

    with (
        unittest.mock.patch("dagster._time._mockable_get_current_timestamp", new=timestamp),
        unittest.mock.patch(
            "dagster._time._mockable_get_current_datetime",
            new=lambda: datetime.fromtimestamp(timestamp(), UTC),
        ),
        unittest.mock.patch("dagster._core.log_manager.DagsterLogManager", new=get_freezable_log_manager()),
    ):
        yield


@dataclass
class CheckOutcome:
    check: str
    asset: str
    passed: bool | None
    """None: the check could not run (errored)."""
    severity: str | None
    description: str | None
    metadata: dict[str, object]


@dataclass
class TickOutcome:
    events: int = 0
    runs_requested: int = 0
    checks: list[CheckOutcome] = field(default_factory=list)
    skip_reason: str | None = None
    diagnoses: list[dg.JobExecutionResult] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    """Remediation runs submitted to the queue (held until approved)."""
    launched: list[dg.DagsterRunStatus] = field(default_factory=list)
    """End states of the runs the queue released and this tick executed."""
    freshness: dict[str, str] = field(default_factory=dict)
    """Asset key path -> its freshness state (PASS, WARN, FAIL, UNKNOWN) as Dagster's freshness daemon
    evaluates the policies at the end of the night's day (a tick with ``at`` only)."""

    def stale(self) -> list[str]:
        """Assets whose freshness policy failed: not built in the window their schedule promises."""
        return sorted(k for k, state in self.freshness.items() if state == "FAIL")

    def failed(self, severity: str = "ERROR") -> list[CheckOutcome]:
        return [c for c in self.checks if c.passed is False and c.severity == severity]

    def errored(self) -> list[CheckOutcome]:
        return [c for c in self.checks if c.passed is None]


def _repository_origin() -> RemoteRepositoryOrigin:
    """The code location ``dagster dev`` loads from ``workspace.yaml`` (location ``dw_dagster``), as the
    daemons record it: runs this process queues can be launched by that queue, and sensor state written
    here is the state its sensor daemon reads (both find it by location, repository and name)."""
    target = LoadableTargetOrigin(
        executable_path=sys.executable,
        module_name="dw_dagster.definitions",
        working_directory=str(REPO_DAGSTER_YAML.parent),
    )
    location = ManagedGrpcPythonEnvCodeLocationOrigin(target, location_name="dw_dagster")
    return RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME)


def _job_origin(job_name: str) -> RemoteJobOrigin:
    return RemoteJobOrigin(_repository_origin(), job_name)


@dataclass(frozen=True)
class _Planned:
    """What a run is created with besides its tags (:meth:`LocalDaemon._plan`)."""

    plan: ExecutionPlanSnapshot
    job: JobSnap
    parent: JobSnap | None


@dataclass
class SensorTick:
    """A sensor evaluation being recorded as a tick (:meth:`LocalDaemon._sensor_tick`)."""

    tick: InstigatorTick
    skip_reason: str | None = None
    cursor: str | None = None

    def launched(self, run: dg.DagsterRun) -> None:
        self.tick = self.tick.with_run_info(run.run_id, run.tags.get(RUN_KEY_TAG))


def dagster_home(root: Path) -> Path:
    home = root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(REPO_DAGSTER_YAML, home / "dagster.yaml")
    return home


class LocalDaemon:
    def __init__(self, lw: LocalWorld, env: dict[str, str] | None = None):
        self.lw = lw
        # This process is the product's deployment now: the variables a deployment sets (the event batch
        # size where runs are created: here, as in its daemon).
        os.environ.update({**lw.env(), "DAGSTER_EVENT_BATCH_SIZE": EVENT_BATCH_SIZE,
                           REMEDIATION_RUN_CONFIG_ENV: json.dumps(REMEDIATION_RUN_CONFIG), **(env or {})})  # fmt: skip
        # execute_in_process logs every event at DEBUG to the console; keep warnings and worse.
        logging.getLogger("dagster").setLevel(logging.WARNING)
        resource_schemas.install()  # every run and tick of this process makes the resources again
        self.settings = Settings.from_env()
        migrate_deployment()  # a deployment creates or migrates the ops schema before anything runs
        self.instance = deployment_instance(dagster_home(lw.root))
        # The Coalesce state lives in the instance, as `dw-dagster coalesce refresh` keeps it.
        refresh_coalesce_state(self.instance)
        # Loading reads the "current" defs-state storage, which an instance entered and disposed earlier in
        # this process may have left behind: load against this instance's, as a code server would.
        self.defs = load_definitions(self.instance)
        self.repo = self.defs.get_repository_def()
        self._planned: dict[str, _Planned] = {}

    # -- sensor state, kept where the sensor daemon of `dagster dev` keeps it -----------------------

    def _sensor_state(self, name: str) -> InstigatorState | None:
        origin = RemoteInstigatorOrigin(_repository_origin(), name)
        return self.instance.get_instigator_state(origin.get_id(), origin.get_selector().get_id())

    @property
    def cursor(self) -> str | None:
        state = self._sensor_state(SENSOR_NAME)
        data = state.instigator_data if state is not None else None
        return data.cursor if isinstance(data, SensorInstigatorData) else None

    def _store_cursor(self, name: str, cursor: str) -> None:
        """Keeps a sensor's cursor in the instance, in the row the sensor daemon reads and writes: a
        restart, or `dagster dev` taking over from this process, resumes from it."""
        state = self._sensor_state(name)
        sensor = self.repo.get_sensor_def(name)
        data = state.instigator_data if state is not None else None
        previous = data if isinstance(data, SensorInstigatorData) else SensorInstigatorData()
        updated = SensorInstigatorData(
            last_tick_timestamp=previous.last_tick_timestamp,
            last_run_key=previous.last_run_key,
            min_interval=sensor.minimum_interval_seconds,
            cursor=cursor,
            last_tick_start_timestamp=previous.last_tick_start_timestamp,
            sensor_type=sensor.sensor_type,
            last_sensor_start_timestamp=previous.last_sensor_start_timestamp,
            last_tick_success_timestamp=previous.last_tick_success_timestamp,
        )
        if state is None:
            origin = RemoteInstigatorOrigin(_repository_origin(), name)
            self.instance.add_instigator_state(
                InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.DECLARED_IN_CODE, updated)
            )
        else:
            self.instance.update_instigator_state(state.with_data(updated))

    @contextmanager
    def _sensor_tick(self, name: str) -> Iterator[SensorTick]:
        """One evaluation of sensor ``name``, recorded where and as the sensor daemon records a tick (the
        sensor's tick history in the UI, and the "Launched by" of the runs it launched, read it): started
        at Dagster's current time, ended SUCCESS with the runs it launched, SKIPPED with its reason, or
        FAILURE with the error."""
        origin = RemoteInstigatorOrigin(_repository_origin(), name)
        data = TickData(
            instigator_origin_id=origin.get_id(),
            instigator_name=name,
            instigator_type=InstigatorType.SENSOR,
            status=TickStatus.STARTED,
            timestamp=get_current_timestamp(),
            selector_id=origin.get_selector().get_id(),
        )
        record = SensorTick(self.instance.create_tick(data))
        try:
            yield record
        except Exception:
            error = serializable_error_info_from_exc_info(sys.exc_info())
            self.instance.update_tick(record.tick.with_status(TickStatus.FAILURE, error=error))
            raise
        if record.tick.run_ids:
            ended = record.tick.with_status(TickStatus.SUCCESS)
        else:
            ended = record.tick.with_status(TickStatus.SKIPPED).with_reason(record.skip_reason)
        self.instance.update_tick(ended.with_cursor(record.cursor))

    def _plan(self, job: dg.JobDefinition, assets, checks, run_config: dict) -> _Planned:
        """The subset's snapshots and execution plan a run of ``job`` selecting ``assets`` and ``checks`` is
        created with: the same every night for the same selection and config, so made once a daemon (a
        subset, its plan and its snapshots are seconds of CPU a run; the nightly checks run asks for the
        same each night of a seeding)."""
        key = repr((job.name, sorted(map(str, assets or ())), assets is None,
                    sorted(map(str, checks or ())), checks is None, sorted(run_config.items(), key=str)))  # fmt: skip
        if key not in self._planned:
            subset = job.get_subset(asset_selection=assets, asset_check_selection=checks)
            plan = create_execution_plan(subset, run_config=run_config, instance_ref=self.instance.get_ref())
            self._planned[key] = _Planned(
                snapshot_from_execution_plan(plan, subset.get_job_snapshot_id()),
                subset.get_job_snapshot(),
                subset.get_parent_job_snapshot(),
            )
        return self._planned[key]

    def _create_run(
        self, sensor: dg.SensorDefinition, tick: SensorTick, request: dg.RunRequest, run_config: dict
    ) -> tuple[dg.DagsterRun, dg.JobDefinition]:
        """The run of ``request`` as the sensor daemon creates it (``dagster._daemon.sensor._create_sensor_run``):
        of the request's job or the sensor's, the subset it selects, tagged with the sensor, the tick and the
        run key, from the code location ``dagster dev`` loads (which the UI links the run to). Returns the
        run, NOT_STARTED, and the job to execute it with."""
        job = self.repo.get_job(request.job_name or sensor.job_name)
        assets = None if request.asset_selection is None else set(request.asset_selection)
        checks = None if request.asset_check_keys is None else set(request.asset_check_keys)
        planned = self._plan(job, assets, checks, run_config)
        tags = {**job.run_tags, **request.tags, TICK_ID_TAG: str(tick.tick.tick_id)}
        tags.update(
            {SENSOR_NAME_TAG: sensor.name, **({RUN_KEY_TAG: request.run_key} if request.run_key else {})}
        )
        run = self.instance.create_run(
            job_name=job.name,
            run_id=None,
            run_config=run_config,
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags=tags,
            root_run_id=None,
            parent_run_id=None,
            step_keys_to_execute=None,
            execution_plan_snapshot=planned.plan,
            job_snapshot=planned.job,
            parent_job_snapshot=planned.parent,
            asset_selection=None if assets is None else frozenset(assets),
            asset_check_selection=None if checks is None else frozenset(checks),
            resolved_op_selection=None,
            op_selection=None,
            remote_job_origin=_job_origin(job.name),
            job_code_origin=None,
            asset_graph=self.repo.asset_graph,
        )
        tick.launched(run)
        return run, job

    def _launch(
        self, sensor: dg.SensorDefinition, tick: SensorTick, request: dg.RunRequest
    ) -> dg.JobExecutionResult:
        """Creates the run of ``request`` and executes it here, as a run worker would (quietly)."""
        run, job = self._create_run(sensor, tick, request, {**request.run_config, **QUIET})
        return execute_run(InMemoryJob(job), run, self.instance)

    def _already_requested(self, sensor: str, request: dg.RunRequest) -> bool:
        """As the sensor daemon: a run request whose run key already has a run launches nothing."""
        if request.run_key is None:
            return False
        runs_filter = dg.RunsFilter(tags={SENSOR_NAME_TAG: sensor, RUN_KEY_TAG: request.run_key})
        return bool(self.instance.get_runs(runs_filter, limit=1))

    def tick(self, at: datetime | None = None) -> TickOutcome:
        """One tick of the run sensor (and its checks runs), then one of the incident sensor (and its
        diagnosis runs), then of the remediation sensors (runs submitted to the queue, expiries), then one
        iteration of the run queue, as the daemon would run them one after the other.

        ``at`` (aware): the business time of the tick, e.g. a minute after the night's job started: the
        events it stores carry that time, and the freshness policies are then evaluated as Dagster's
        freshness daemon does, at ``at + FRESHNESS_LOOK`` (``TickOutcome.freshness``). None: now, and no
        freshness evaluation."""
        if at is None:
            return self._tick()
        with business_clock(at):
            outcome = self._tick()
        with business_clock(at + FRESHNESS_LOOK):
            outcome.freshness = self.evaluate_freshness()
            # The incident sensor's next ticks read the freshness states: a skipped night, then its diagnosis.
            outcome.diagnoses += self._tick_incident_sensor() + self._tick_incident_sensor()
        return outcome

    def _tick(self) -> TickOutcome:
        outcome = self._tick_run_sensor()
        outcome.diagnoses = self._tick_incident_sensor()
        if self.repo.has_sensor_def(REMEDIATION_SENSOR):
            outcome.submitted = self._tick_remediation_sensors()
            outcome.launched = self.dequeue()
        return outcome

    def evaluate_freshness(self) -> dict[str, str]:
        """One iteration of Dagster's freshness daemon on this code location, at Dagster's current time:
        each asset's freshness policy evaluated by Dagster's own evaluator and a changed state stored as a
        ``FreshnessStateChange`` event, as the daemon stores it. Returns each policed asset's state."""
        from dagster._core.loader import LoadingContextForTest
        from dagster._daemon.freshness import FreshnessDaemon

        nodes = [n for n in self.repo.asset_graph.asset_nodes if n.freshness_policy_or_from_metadata]
        daemon, context = FreshnessDaemon(), LoadingContextForTest(self.instance)

        async def evaluate() -> None:
            await asyncio.gather(*(daemon._evaluate_asset(context, node) for node in nodes))

        asyncio.run(evaluate())
        records = self.instance.get_freshness_state_records([n.key for n in nodes])
        return {key.to_user_string(): record.freshness_state.value for key, record in records.items()}

    def _sensor_context(self, sensor: dg.SensorDefinition, **kwargs):
        """A sensor's evaluation context with the resources it needs, and only those, as the code server
        builds it (``dagster._grpc.impl``: the sensor's transitive required resources): a sensor that needs no
        warehouse builds none."""
        top_level = self.repo.get_top_level_resources()
        required = get_transitive_required_resource_keys(sensor.required_resource_keys, top_level)
        resources = {k: v for k, v in top_level.items() if k in required}
        return dg.build_sensor_context(
            instance=self.instance, repository_def=self.repo, resources=resources, **kwargs
        )

    def _run_requests(self, sensor: dg.SensorDefinition, tick: SensorTick) -> list[dg.RunRequest]:
        with self._sensor_context(sensor) as context:
            result = sensor(context)
            # A skip (e.g. the org-wide stop) requests nothing.
            if result is None or isinstance(result, dg.SkipReason):
                tick.skip_reason = result.skip_message if result is not None else None
                return []
            # Consumed while the tick's resources are up, as Dagster's evaluation does (``evaluate_tick``
            # lists a generator inside the context): after the teardown, a generator sensor's every store
            # call signed in to the warehouse on its own, three logins a tick instead of one.
            items = list(result)
        skips = [r.skip_message for r in items if isinstance(r, dg.SkipReason)]
        tick.skip_reason = skips[0] if skips else None
        return [r for r in items if isinstance(r, dg.RunRequest)]

    def _tick_remediation_sensors(self) -> list[str]:
        """Runs the remediation sensors; each run request is created and submitted to the instance's run
        coordinator (QUEUED), as the sensor daemon does."""
        submitted = []
        sensor = self.repo.get_sensor_def(REMEDIATION_SENSOR)
        with self._sensor_tick(REMEDIATION_SENSOR) as tick:
            for request in self._run_requests(sensor, tick):
                if self._already_requested(REMEDIATION_SENSOR, request):
                    continue
                # The run config as the request gives it: a plan binds only a run of exactly that one.
                run, _ = self._create_run(sensor, tick, request, dict(request.run_config))
                self.instance.run_coordinator.submit_run(SubmitRunContext(run, workspace=None))  # type: ignore[arg-type]
                submitted.append(run.run_id)
        expiry = self.repo.get_sensor_def(EXPIRY_SENSOR)
        with self._sensor_context(expiry) as context:
            expiry(context)
        return submitted

    def dequeue(self) -> list[dg.DagsterRunStatus]:
        """One iteration of the run queue: each QUEUED run that the instance's tag concurrency limits
        (dagster.yaml: ``dw/approval=pending`` at 0) do not block is started and executed in this process,
        one after the other (so ``max_concurrent_runs`` never binds here); returns the runs' end states."""
        limits = self.instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        in_progress = self.instance.get_runs(dg.RunsFilter(statuses=IN_PROGRESS_RUN_STATUSES))
        counter = TagConcurrencyLimitsCounter(list(limits), list(in_progress))
        ended = []
        for run in reversed(self.instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]))):
            if counter.is_blocked(run):
                continue
            counter.update_counters_with_launched_item(run)
            self.instance.report_dagster_event(
                DagsterEvent(event_type_value=DagsterEventType.RUN_STARTING.value, job_name=run.job_name),
                run.run_id,
            )
            job = self.repo.get_job(run.job_name)
            for _ in execute_run_iterator(
                InMemoryJob(job), self.instance.get_run_by_id(run.run_id), self.instance
            ):
                pass
            ended.append(self.instance.get_run_by_id(run.run_id).status)
        return ended

    def _tick_incident_sensor(self) -> list[dg.JobExecutionResult]:
        sensor = self.repo.get_sensor_def(INCIDENT_SENSOR)
        with self._sensor_tick(INCIDENT_SENSOR) as tick:
            return [
                self._launch(sensor, tick, r)
                for r in self._run_requests(sensor, tick)
                if not self._already_requested(INCIDENT_SENSOR, r)
            ]

    def _tick_run_sensor(self) -> TickOutcome:
        sensor = self.repo.get_sensor_def(SENSOR_NAME)
        outcome = TickOutcome()
        with self._sensor_tick(SENSOR_NAME) as tick:
            before = self.instance.event_log_storage.get_maximum_record_id() or 0
            with self._sensor_context(sensor, cursor=self.cursor) as context:
                result = sensor(context)
            if not isinstance(result, dg.SensorResult):
                return outcome
            for event in result.asset_events or []:
                self.instance.report_runless_asset_event(event)
            # The sensor stores its events itself where the storage allows (runless_store), else returns
            # them: what the log gained during the evaluation counts either way (nothing else writes then).
            outcome.events = (self.instance.event_log_storage.get_maximum_record_id() or 0) - before
            if result.cursor is not None:
                self._store_cursor(SENSOR_NAME, result.cursor)
                tick.cursor = result.cursor
            if result.skip_reason is not None:
                outcome.skip_reason = tick.skip_reason = result.skip_reason.skip_message
            for request in result.run_requests or []:
                if self._already_requested(SENSOR_NAME, request):
                    continue
                outcome.runs_requested += 1
                outcome.checks.extend(self._execute_checks(sensor, tick, request))
        return outcome

    def _execute_checks(
        self, sensor: dg.SensorDefinition, tick: SensorTick, request: dg.RunRequest
    ) -> list[CheckOutcome]:
        result = self._launch(sensor, tick, request)
        evaluations = {
            e.asset_check_evaluation_data.asset_check_key: e.asset_check_evaluation_data
            for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"
        }
        out = []
        for key in request.asset_check_keys or []:
            ev = evaluations.get(key)
            out.append(
                CheckOutcome(
                    check=key.name,
                    asset=key.asset_key.to_user_string(),
                    passed=None if ev is None else ev.passed,
                    severity=None if ev is None else ev.severity.value,
                    description=None if ev is None else ev.description,
                    metadata={} if ev is None else {k: v.value for k, v in ev.metadata.items()},
                )
            )
        return out
