"""The Coalesce polling sensor: what each finished Coalesce refresh run built, reported to Dagster.

For every refresh run of the workspace's environments that finished since the last tick, the sensor
reports one ``AssetMaterialization`` per node the run built and one ``AssetObservation`` per node that
failed or that a cancel cut short (:mod:`dw_dagster.coalesce.run_report`), and hands the run's report to
``on_run_finished``: the hook through which an application above the integration receives each finished
run (to record failures, to request the checks of what was built) and returns the run requests it wants.
A tick reads every finished run first and then hands them over, oldest first, each report saying which of
its builds a later run of the same tick replaced (``CoalesceRunReport.superseded``): what a check would
read in the warehouse now is that later build. The tick returns its events as the ``SensorResult``'s
``asset_events`` for the daemon to store, one transaction each; with ``batch_run_events`` it stores them
itself, in a few transactions, on the Dagster storages :mod:`~dw_dagster.coalesce.runless_store` was
verified on (elsewhere it says so, and returns them).

The cursor (:class:`~dw_dagster.coalesce.cursor.CoalesceRunSensorCursor`) is exact: per environment, a
high-water run id and the runs seen but not reported yet. A run whose report or hook fails stays pending and
is tried again on the next tick.

A tick has an overall time budget: every call to Coalesce is held to what is left of it (a call that hangs
ends with the budget, not after its own), no new work starts once it is spent, and what the tick could not
read stays in the cursor for the next tick, named in the skip message.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import dagster as dg

from dw_dagster.coalesce.asset_index import CoalesceAssetIndex
from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.cursor import CoalesceRunSensorCursor, CoalesceRunSensorError, EnvironmentCursor
from dw_dagster.coalesce.dagster_internals import DEFAULT_SENSOR_GRPC_TIMEOUT
from dw_dagster.coalesce.errors import CoalesceAPIError, CoalesceError
from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.coalesce.run_models import CoalesceRun, CoalesceRunType
from dw_dagster.coalesce.run_report import (
    AssetEvent,
    CoalesceRunReport,
    fetch_coalesce_run_report,
    mark_superseded,
    sort_asset_events,
)
from dw_dagster.coalesce.runless_store import store_runless_asset_events

# An idle tick is one ``GET /api/v1/runs`` per environment (never the warehouse), so a short interval is
# cheap; it is most of the time from a Coalesce run's end to its checks. The daemon's sensor loop turns
# every 5 s and stamps a tick a little after its turn: at 5 s the next turn finds less than 5 s passed and
# skips (a tick every 10 s), at 4 s every turn ticks.
DEFAULT_SENSOR_INTERVAL_SECONDS = 4
# The daemon gives a tick DEFAULT_SENSOR_GRPC_TIMEOUT seconds (60 unless set); keep a margin for returning.
DEFAULT_TICK_TIME_BUDGET_SECONDS = float(max(10, DEFAULT_SENSOR_GRPC_TIMEOUT - 20))
DEFAULT_PAGE_SIZE = 100
# The first tick in an environment reads the latest runs in one page (the API's maximum).
BOOTSTRAP_PAGE_SIZE = 1000
# After this many failed calls in a row the tick stops: Coalesce (or what the hook calls) is down.
MAX_CONSECUTIVE_ERRORS = 3
# A call started when (almost) nothing is left of the tick's budget still gets this long.
MIN_CALL_SECONDS = 1.0
# A crash between storing a tick's events and the daemon storing its cursor replays the tick: an event
# already among an asset's latest few records with the same run is not reported again.
DEDUP_LOOKBACK_RECORDS = 25

CoalesceRunHook = Callable[[dg.SensorEvaluationContext, CoalesceRunReport], Iterable[dg.RunRequest] | None]
"""Receives each finished run's report (on every tick that reports it: a tick replayed after a crash hands it
over again, so the hook must be idempotent) and returns the run requests it wants; raising leaves the run
pending for the next tick."""


def unreported_asset_events(
    instance: dg.DagsterInstance, events: Iterable[AssetEvent], lookback: int = DEDUP_LOOKBACK_RECORDS
) -> list[AssetEvent]:
    """The events whose asset has no event of the same kind from the same Coalesce run among its latest
    ``lookback`` records.

    A tick's events are stored in the order ``sort_asset_events`` gives them, all at once
    (:mod:`~dw_dagster.coalesce.runless_store`) or, on other storages, by the daemon one at a time, so a
    crash leaves a prefix of each run's events stored: a binary search for its end looks up about
    log2(n) events, one when none is stored."""
    events = list(events)
    ordered = sort_asset_events(events)
    # bisect over "stored": True for a prefix of ``ordered``, then False.
    lo, hi = 0, len(ordered)
    if hi and not _reported(instance, ordered[0], lookback):
        hi = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if _reported(instance, ordered[mid], lookback):
            lo = mid + 1
        else:
            hi = mid
    stored = {id(event) for event in ordered[:lo]}
    return [event for event in events if id(event) not in stored]


def _reported(instance: dg.DagsterInstance, event: AssetEvent, lookback: int) -> bool:
    ours = CoalesceRunMetadataSet.extract(event.metadata)
    if ours.run_id is None:
        return False
    fetch = (
        instance.fetch_materializations
        if isinstance(event, dg.AssetMaterialization)
        else instance.fetch_observations
    )
    return any(
        r.asset_event is not None
        and (theirs := CoalesceRunMetadataSet.extract(r.asset_event.metadata)).run_id == ours.run_id
        and theirs.environment_id == ours.environment_id
        for r in fetch(event.asset_key, limit=lookback).records
    )


class _TickClient:
    """The tick's client: before each call, its budget (retries and waits included) is cut to what is left
    of the tick's, so that two hanging calls cost the tick's budget once, not their own budget each."""

    def __init__(self, client: CoalesceClient, deadline: float) -> None:
        self._client = client
        self._deadline = deadline
        self._call_budget = client.request_budget

    def bound(self) -> None:
        left = self._deadline - time.monotonic()
        self._client.request_budget = max(MIN_CALL_SECONDS, min(self._call_budget, left))

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self.bound()
            return attribute(*args, **kwargs)

        return bounded


@dataclass
class _EnvState:
    high_water: int
    pending: set[int]

    @classmethod
    def of(cls, cursor: EnvironmentCursor) -> _EnvState:
        return cls(cursor.high_water, set(cursor.pending))

    def freeze(self) -> EnvironmentCursor:
        return EnvironmentCursor(high_water=self.high_water, pending=tuple(sorted(self.pending)))


@dataclass
class _Tick:
    context: dg.SensorEvaluationContext
    client: CoalesceClient
    assets: CoalesceAssetIndex
    on_run_finished: CoalesceRunHook | None
    page_size: int
    budget_seconds: float
    cursor: CoalesceRunSensorCursor
    batch_events: bool = False
    states: dict[str, _EnvState] = field(default_factory=dict)
    finished: list[tuple[_EnvState, CoalesceRunReport, list[AssetEvent]]] = field(default_factory=list)
    """Runs read this tick, not handed over yet: their environment's state, report and unreported events."""
    events: list[AssetEvent] = field(default_factory=list)
    run_requests: list[dg.RunRequest] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    consecutive_errors: int = 0
    stopped: str | None = None
    unread: dict[str, list[str]] = field(default_factory=dict)
    """Per environment, what this tick did not read (failed, or left when it stopped): for the next tick."""

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.budget_seconds
        self.calls = _TickClient(self.client, self.deadline)
        self.client = cast(CoalesceClient, self.calls)
        self.states = {env: _EnvState.of(c) for env, c in self.cursor.environments.items()}

    @property
    def log(self) -> logging.Logger:
        return self.context.log

    def should_stop(self) -> bool:
        if self.stopped is None:
            if self.consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
                self.stopped = f"{self.consecutive_errors} calls failed in a row"
            # Every tick tries at least one run, so that even a tiny budget makes progress.
            elif (self.finished or self.errors) and time.monotonic() >= self.deadline:
                self.stopped = f"the tick's time budget ({self.budget_seconds:g} s) is spent"
        # A page of the listing is fetched lazily, right after this.
        self.calls.bound()
        return self.stopped is not None

    def left(self, env_id: str, what: str) -> None:
        self.unread.setdefault(env_id, []).append(what)

    def error(self, what: str, exc: Exception) -> None:
        self.errors.append(exc)
        self.consecutive_errors += 1
        known = isinstance(exc, CoalesceError | CoalesceRunSensorError)
        self.log.warning(f"{what}: {type(exc).__name__}: {exc}", exc_info=not known)

    def run(self, environment_ids: Sequence[str]) -> None:
        for env_id in environment_ids:
            if self.should_stop():
                self.left(env_id, "not polled")
                continue
            try:
                self.poll(env_id)
            except Exception as e:  # noqa: BLE001 - the listing failed: this environment waits for the next tick
                self.error(f"Listing the Coalesce runs of environment {env_id} failed", e)
        self.hand_over()

    def poll(self, env_id: str) -> None:
        state = self.states.get(env_id)
        if state is None:
            state = self.states[env_id] = self.bootstrap(env_id)
        for run_id in sorted(state.pending):
            if self.should_stop():
                self.left(env_id, f"run {run_id}")
                continue
            try:
                run = self.client.get_run(run_id)
            except CoalesceAPIError as e:
                if e.status == 404:
                    self.log.warning(f"Coalesce run {run_id} no longer exists; it is not reported.")
                    state.pending.discard(run_id)
                    continue
                self.error(f"Reading Coalesce run {run_id} failed", e)
                self.left(env_id, f"run {run_id}")
                continue
            except Exception as e:  # noqa: BLE001 - the run stays pending for the next tick
                self.error(f"Reading Coalesce run {run_id} failed", e)
                self.left(env_id, f"run {run_id}")
                continue
            self.consecutive_errors = 0
            if run.run_status.is_terminal and self.read(env_id, state, run):
                state.pending.discard(run_id)
        if self.should_stop():
            self.left(env_id, f"the runs after {state.high_water}")
            return
        runs = self.client.iter_runs(
            environment_id=env_id,
            run_type=CoalesceRunType.REFRESH,
            starting_from=state.high_water or None,
            order_by="id",
            order_by_direction="asc",
            limit=self.page_size,
        )
        for summary in runs:
            self.consecutive_errors = 0
            if summary.id <= state.high_water:
                continue
            if not (summary.run_status.is_terminal and self.read(env_id, state, summary.id)):
                state.pending.add(summary.id)
            state.high_water = summary.id
            if self.should_stop():
                self.left(env_id, f"the runs after {state.high_water}")
                return

    def bootstrap(self, env_id: str) -> _EnvState:
        """The first tick in an environment starts at the present: runs finished before are not reported;
        runs in flight are reported when they finish."""
        page = self.client.list_runs(
            environment_id=env_id,
            run_type=CoalesceRunType.REFRESH,
            order_by="id",
            order_by_direction="desc",
            limit=BOOTSTRAP_PAGE_SIZE,
        )
        high_water = max((r.id for r in page.data), default=0)
        pending = {r.id for r in page.data if not r.run_status.is_terminal}
        self.log.info(
            f"Watching Coalesce environment {self.assets.environment_name(env_id)} from run {high_water} on"
            + (f"; runs in flight: {sorted(pending)}" if pending else "")
        )
        return _EnvState(high_water, pending)

    def read(self, env_id: str, state: _EnvState, run: int | CoalesceRun) -> bool:
        """Reads one finished run for :meth:`hand_over`; False (and nothing kept) when that fails."""
        run_id = run if isinstance(run, int) else run.id
        try:
            report = fetch_coalesce_run_report(self.client, run, self.assets)
            events = unreported_asset_events(self.context.instance, report.asset_events)
        except Exception as e:  # noqa: BLE001 - the run stays pending for the next tick
            self.error(f"Reading Coalesce run {run_id} failed; it stays pending", e)
            self.left(env_id, f"run {run_id}")
            return False
        self.consecutive_errors = 0
        self.finished.append((state, report, events))
        return True

    def hand_over(self) -> None:
        """Hands each run read to the hook, oldest first, and keeps its events and run requests. A run whose
        hook fails, or that the tick stops before, goes back to pending with nothing kept."""
        reports = mark_superseded([report for _, report, _ in self.finished])
        self.consecutive_errors = 0
        for i, ((state, _, events), report) in enumerate(zip(self.finished, reports, strict=True)):
            # The first run is always handed over, so that even a tiny budget makes progress.
            if i and (self.consecutive_errors >= MAX_CONSECUTIVE_ERRORS or time.monotonic() >= self.deadline):
                self.stopped = self.stopped or (
                    f"{self.consecutive_errors} calls failed in a row"
                    if self.consecutive_errors >= MAX_CONSECUTIVE_ERRORS
                    else f"the tick's time budget ({self.budget_seconds:g} s) is spent"
                )
                state.pending.add(report.run.id)
                self.left(report.environment_id, f"run {report.run.id}")
                continue
            try:
                requested = (
                    list(self.on_run_finished(self.context, report) or []) if self.on_run_finished else []
                )
            except Exception as e:  # noqa: BLE001 - the run stays pending for the next tick
                self.error(f"Reporting Coalesce run {report.run.id} failed; it stays pending", e)
                state.pending.add(report.run.id)
                continue
            self.consecutive_errors = 0
            self.events.extend(events)
            self.run_requests.extend(requested)
            self.log_reported(report, events)
            self.reported.append(f"{report.environment_id}:{report.run.id}")
        self.finished = []

    def log_reported(self, report: CoalesceRunReport, events: list[AssetEvent]) -> None:
        line = (
            f"{report.describe()} {report.run.run_status.value}: {len(report.materializations)} built, "
            f"{len(report.failures)} failed or canceled"
        )
        if len(events) < len(report.asset_events):
            line += f"; {len(report.asset_events) - len(events)} events already reported"
        if report.superseded:
            line += f"; {len(report.superseded)} of its builds replaced by a later run this tick"
        if report.unmapped_nodes:
            line += f"; nodes without an asset: {list(report.unmapped_nodes)}"
        (self.log.warning if report.failed else self.log.info)(line)

    @property
    def out_of_time(self) -> bool:
        return self.stopped is not None and self.stopped.startswith("the tick's time budget")

    def leftover(self) -> str:
        """What the tick stopped before or could not read, for the next tick; empty when nothing."""
        if not (self.stopped or self.unread):
            return ""
        parts = [f"environment {env}: {', '.join(dict.fromkeys(what))}" for env, what in self.unread.items()]
        text = f"Stopped early: {self.stopped}. " if self.stopped else ""
        if parts:
            text += f"Left for the next tick: {'; '.join(parts)}."
        if self.errors:
            text += (
                f" {len(self.errors)} calls failed, the last: {type(self.errors[-1]).__name__}: "
                f"{self.errors[-1]}"
            )
        return text.strip()

    def result(self) -> dg.SensorResult:
        environments = dict(self.cursor.environments)
        environments.update({env: s.freeze() for env, s in self.states.items()})
        new_cursor = CoalesceRunSensorCursor(environments=environments)
        # Out of time is not a failure of the tick: what it could not read waits for the next one.
        if self.errors and not self.reported and new_cursor == self.cursor and not self.out_of_time:
            raise CoalesceRunSensorError(
                f"No progress this tick ({len(self.errors)} errors); the cursor is unchanged. Last error: "
                f"{type(self.errors[-1]).__name__}: {self.errors[-1]}"
            ) from self.errors[-1]
        leftover = self.leftover()
        if leftover:
            (self.log.warning if self.errors else self.log.info)(leftover)
        events = sort_asset_events(self.events)
        # Stored here, before the daemon saves the cursor, when configured and the storage allows it, in a few
        # transactions (the daemon stores asset_events one at a time: 22 s for 2,000); a replay skips what is
        # stored.
        started = time.monotonic()
        if events and self.batch_events and store_runless_asset_events(self.context.instance, events):
            self.log.info(f"Stored {len(events)} asset events in {time.monotonic() - started:.2f} s")
            events = []
        if not (events or self.run_requests):
            reason = (
                f"Reported Coalesce runs {self.reported}"
                + (f" ({len(self.events)} events stored)" if self.events else " (no new events)")
                if self.reported
                else "No Coalesce refresh run read this tick."
                if leftover
                else "No Coalesce refresh run finished since the last tick."
            )
            reason += f" {leftover}" if leftover else ""
            return dg.SensorResult(skip_reason=reason, cursor=new_cursor.serialize())
        return dg.SensorResult(
            asset_events=events, run_requests=self.run_requests, cursor=new_cursor.serialize()
        )


def build_coalesce_polling_sensor(
    *,
    workspace: CoalesceWorkspace,
    asset_specs: Sequence[dg.AssetSpec],
    on_run_finished: CoalesceRunHook | None = None,
    name: str = "coalesce_run_sensor",
    minimum_interval_seconds: int = DEFAULT_SENSOR_INTERVAL_SECONDS,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    tick_time_budget_seconds: float = DEFAULT_TICK_TIME_BUDGET_SECONDS,
    page_size: int = DEFAULT_PAGE_SIZE,
    target: dg.JobDefinition | dg.UnresolvedAssetJobDefinition | dg.AssetSelection | None = None,
    batch_run_events: bool = False,
) -> dg.SensorDefinition:
    """A sensor that reports the Coalesce refresh runs of ``workspace.environment_ids`` as they finish.

    Args:
        workspace (CoalesceWorkspace): The Coalesce host, token and environments to watch.
        asset_specs (Sequence[AssetSpec]): The Coalesce assets (``load_coalesce_asset_specs``): which asset
            each node is, and the job names.
        on_run_finished (Optional[CoalesceRunHook]): Receives each finished run's report and returns the
            run requests it wants (for example a checks-only run of the assets built).
        name (str): The sensor's name.
        minimum_interval_seconds (int): Seconds between ticks (at least 1; Dagster's sensor daemon
            evaluates sensors every 5 s at most).
        default_status (DefaultSensorStatus): Whether the sensor runs once deployed.
        tick_time_budget_seconds (float): A tick stops starting new work after this many seconds (and
            after at least one run reported); the next tick resumes from its cursor.
        page_size (int): Runs per page of ``GET /api/v1/runs`` (at most 1000).
        target (Optional[JobDefinition | UnresolvedAssetJobDefinition | AssetSelection]): What the hook's
            run requests target, as ``@sensor``'s ``target``. For checks-only runs, a job of the checks
            (``define_asset_job(name, selection=AssetSelection.all_asset_checks())``) rather than the
            selection itself: the UI then names that job as the sensor's target and the runs', where it shows
            a check-only selection as a Python repr and its runs with no target.
        batch_run_events (bool): Store a tick's events in the tick, in a few transactions, rather than
            return them for the daemon to store one at a time (2,000 events: about 1 s instead of 20-50 s).
            It writes Dagster's storage rows through Dagster's internals, so it runs only on the storages
            and the dagster release it was verified on; elsewhere a warning says it is off
            (:mod:`~dw_dagster.coalesce.runless_store`).

    Examples:
        .. code-block:: python

            specs = load_coalesce_asset_specs(coalesce.fetch_workspace_data())
            sensor = build_coalesce_polling_sensor(workspace=coalesce, asset_specs=specs)
            defs = dg.Definitions(assets=specs, sensors=[sensor])
    """
    if not 1 <= page_size <= 1000:
        raise ValueError(f"page_size must be between 1 and 1000, got {page_size}")
    if minimum_interval_seconds < 1:
        raise ValueError(f"minimum_interval_seconds must be at least 1, got {minimum_interval_seconds}")
    if tick_time_budget_seconds < 0:
        raise ValueError(f"tick_time_budget_seconds must not be negative, got {tick_time_budget_seconds}")
    assets = CoalesceAssetIndex.when_needed(asset_specs)
    environments = ", ".join(workspace.environment_ids)

    @dg.sensor(
        name=name,
        description=(
            f"Reports the Coalesce refresh runs of environments {environments} as they finish: a "
            "materialization per node built, an observation per node that failed or was canceled."
        ),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        target=target,
    )
    def _coalesce_run_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        cursor = CoalesceRunSensorCursor.parse(context.cursor)
        # A client per tick: its connections do not outlive the tick. A hook that lists detailed nodes (the
        # governance review) gets pages that fit a call's ordinary budget, not the minutes a refresh allows.
        with workspace.new_client(in_sensor_tick=True) as client:
            tick = _Tick(
                context=context,
                client=client,
                assets=assets(),
                on_run_finished=on_run_finished,
                page_size=page_size,
                budget_seconds=tick_time_budget_seconds,
                cursor=cursor,
                batch_events=batch_run_events,
            )
            tick.run(workspace.environment_ids)
        return tick.result()

    return _coalesce_run_sensor
