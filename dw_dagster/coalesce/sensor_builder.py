"""The Coalesce run sensor: what each finished Coalesce refresh run built, reported to Dagster.

For every refresh run of the workspace's environments that finished since the last tick, the sensor

- reports one ``AssetMaterialization`` per node the run built (rows, query times, the run and its link,
  ``dagster/last_updated_timestamp`` for freshness, ``dagster/row_count`` when the node was rebuilt whole);
- reports each node that failed, or was cut short by a cancel, as an ``AssetObservation`` carrying the error,
  and opens an incident for a failed or canceled run (one per cause: the job and the business date);
- requests one checks-only run per Coalesce run, for the checks of the assets that run built.

The cursor (:class:`CoalesceRunSensorCursor`) is exact: per environment, a high-water run id and the runs
seen but not reported yet. :func:`build_coalesce_run_report` turns one finished run into its events; the
sensor, the tests and the import of past runs share it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal

import dagster as dg
from dagster._grpc.client import DEFAULT_SENSOR_GRPC_TIMEOUT
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dw_dagster import tags
from dw_dagster.checks.metrics import BusinessDay
from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.models import (
    CoalesceAPIError,
    CoalesceError,
    CoalesceNodeResult,
    CoalesceQueryResult,
    CoalesceRun,
    CoalesceRunResults,
    CoalesceRunStatus,
    CoalesceRunType,
)
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.governance.hook import review_run
from dw_dagster.incidents.models import Finding
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

DEFAULT_SENSOR_INTERVAL_SECONDS = 30
# The daemon gives a tick DEFAULT_SENSOR_GRPC_TIMEOUT seconds (60 unless set); keep a margin for returning.
DEFAULT_TICK_TIME_BUDGET_SECONDS = float(max(10, DEFAULT_SENSOR_GRPC_TIMEOUT - 20))
DEFAULT_PAGE_SIZE = 100
# The first tick in an environment reads the latest runs in one page (the API's maximum).
BOOTSTRAP_PAGE_SIZE = 1000
# After this many failed calls in a row the tick stops: Coalesce or the warehouse is down.
MAX_CONSECUTIVE_ERRORS = 3
# A crash between the daemon storing a tick's events and storing its cursor replays the tick: an event
# already among an asset's latest few records with the same run is not reported again.
DEDUP_LOOKBACK_RECORDS = 25

CHECK_NAME = "coalesce_run"

# Metadata keys of the events.
RUN_ID_KEY = "coalesce/run_id"
RUN_LINK_KEY = "coalesce/run_link"
ENVIRONMENT_ID_KEY = "coalesce/environment_id"
JOB_ID_KEY = "coalesce/job_id"
JOB_NAME_KEY = "coalesce/job_name"
NODE_ID_KEY = "coalesce/node_id"
ROWS_INSERTED_KEY = "coalesce/rows_inserted"
ROWS_UPDATED_KEY = "coalesce/rows_updated"
ROWS_DELETED_KEY = "coalesce/rows_deleted"
QUERY_START_KEY = "coalesce/query_start"
QUERY_END_KEY = "coalesce/query_end"
DURATION_KEY = "coalesce/duration_seconds"
QUERIES_KEY = "coalesce/queries"
STATUS_KEY = "coalesce/status"
RUN_STATUS_KEY = "coalesce/run_status"
FAILED_QUERY_KEY = "coalesce/failed_query"
ERROR_KEY = "coalesce/error"
ERROR_DETAIL_KEY = "coalesce/error_detail"
ENDED_AT_KEY = "coalesce/ended_at"
LAST_UPDATED_KEY = "dagster/last_updated_timestamp"
ROW_COUNT_KEY = "dagster/row_count"

# A query that replaces a table's whole content: the rows inserted from it on are the table's rows.
_FULL_REBUILD_SQL = re.compile(
    r"^\s*(CREATE\s+OR\s+REPLACE\s+(TRANSIENT\s+)?TABLE|TRUNCATE)\b", re.IGNORECASE
)
_FULL_REBUILD_NAME = re.compile(r"(create|recreate).*table|truncate", re.IGNORECASE)

AssetEvent = dg.AssetMaterialization | dg.AssetObservation


class CoalesceRunSensorError(Exception):
    """A tick could not make any progress (Coalesce or the warehouse unreachable, a run that cannot be
    read); its cursor is unchanged, so the next tick retries the same work."""


# ------------------
# The cursor
# ------------------


class EnvironmentCursor(BaseModel):
    """Where the sensor stands in one environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    high_water: int = Field(
        ge=0,
        description="Every refresh run of the environment with an id up to this one has been seen: it was "
        "reported, or it is in `pending`. Runs are listed ordered by id, from this one (exclusive).",
    )
    pending: tuple[int, ...] = Field(
        default=(),
        description="Runs seen but not reported: unfinished when last looked at, or whose report failed. "
        "Each tick looks at them again; a run leaves this list only once reported.",
    )


class CoalesceRunSensorCursor(BaseModel):
    """The sensor's cursor: JSON in ``SensorResult(cursor=...)``, stored by the daemon with the tick.

    A tick's result carries the cursor of exactly the work it reported, and nothing is stored when a tick
    fails or is killed, so the next tick resumes from the last stored cursor.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    environments: dict[str, EnvironmentCursor] = Field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | None) -> CoalesceRunSensorCursor:
        if not raw:
            return cls()
        try:
            return cls.model_validate_json(raw)
        except ValidationError as e:
            # Starting over would silently skip every run since: refuse, and say how to start over.
            raise CoalesceRunSensorError(
                f"Cannot read the Coalesce run sensor's cursor {raw[:200]!r}: {e}. Clear the cursor in the "
                "Dagster UI to start from the present (runs finished meanwhile are not reported), or set it "
                'to {"environments": {"<environment id>": {"high_water": <last reported run id>}}}.'
            ) from None

    def serialize(self) -> str:
        return self.model_dump_json()


# ------------------
# Asset specs -> lookups
# ------------------


def _raw(value: Any) -> Any:
    return value.value if isinstance(value, dg.MetadataValue) else value


@dataclass(frozen=True)
class CoalesceAssetIndex:
    """Which asset each Coalesce node is, and the job names, read from the specs' ``coalesce/*`` metadata
    (see :mod:`dw_dagster.coalesce.translator`)."""

    asset_keys: Mapping[tuple[str, str], dg.AssetKey]
    """(environment id, node id) -> asset key."""
    materialization_types: Mapping[dg.AssetKey, str | None]
    job_names: Mapping[tuple[str, str], str]
    """(environment id, job id) -> job name."""

    @classmethod
    def from_specs(cls, specs: Iterable[dg.AssetSpec]) -> CoalesceAssetIndex:
        asset_keys: dict[tuple[str, str], dg.AssetKey] = {}
        materialization_types: dict[dg.AssetKey, str | None] = {}
        job_names: dict[tuple[str, str], str] = {}
        for spec in specs:
            node_id = _raw(spec.metadata.get("coalesce/node_id"))
            environment = _raw(spec.metadata.get("coalesce/environment")) or {}
            if not node_id or not isinstance(environment, Mapping) or "id" not in environment:
                continue
            env_id = str(environment["id"])
            asset_keys[(env_id, str(node_id))] = spec.key
            materialization_types[spec.key] = _raw(spec.metadata.get("coalesce/materialization"))
            for job in _raw(spec.metadata.get("coalesce/jobs")) or []:
                job_names[(env_id, str(job["id"]))] = job["name"]
        return cls(asset_keys=asset_keys, materialization_types=materialization_types, job_names=job_names)

    def asset_key(self, environment_id: str, node_id: str) -> dg.AssetKey | None:
        return self.asset_keys.get((environment_id, node_id))

    def job_name(self, environment_id: str, job_id: str | None) -> str | None:
        return None if job_id is None else self.job_names.get((environment_id, job_id))


# ------------------
# One finished run -> events, findings, checks
# ------------------


@dataclass(frozen=True)
class NodeFailure:
    """A node that a run did not build: a query failed, or the run ended while the node was building."""

    asset_key: dg.AssetKey
    node_id: str
    node_name: str
    state: Literal["failed", "canceled"]
    query_name: str | None
    error: str
    error_detail: str | None
    ended_at: datetime | None


@dataclass(frozen=True)
class CoalesceRunReport:
    """What one finished Coalesce run did, as Dagster events, and the findings its failures make."""

    run: CoalesceRun
    environment_id: str
    job_id: str | None
    job_name: str | None
    run_link: str | None
    materializations: tuple[dg.AssetMaterialization, ...]
    observations: tuple[dg.AssetObservation, ...]
    failures: tuple[NodeFailure, ...]
    unmapped_nodes: tuple[str, ...] = ()
    """Nodes in the results that no asset spec describes (a stale state file); they get no events."""
    unmapped_failures: tuple[str, ...] = ()

    @property
    def asset_events(self) -> list[AssetEvent]:
        """Materializations and failure observations, in the order the nodes ended."""
        return sort_asset_events([*self.materializations, *self.observations])

    @property
    def built_asset_keys(self) -> set[dg.AssetKey]:
        return {m.asset_key for m in self.materializations}

    @property
    def failed(self) -> bool:
        completed = self.run.run_status is CoalesceRunStatus.COMPLETED
        return not completed or bool(self.failures or self.unmapped_failures)

    @property
    def cause_scope(self) -> str:
        if self.job_name:
            return f"job:{self.job_name}"
        # A run without a job (a selector run) is its own cause.
        return f"coalesce_run:{self.environment_id}:{self.run.id}"

    def business_date(self, business_day: BusinessDay) -> date:
        # A rerun dw-dagster started to fix an incident rebuilds that incident's business date.
        given = self.run.run_time_parameters.get(tags.COALESCE_PARAM_BUSINESS_DATE)
        if given:
            try:
                return date.fromisoformat(str(given))
            except ValueError:
                pass
        moment = self.run.run_start_time or self.run.run_end_time or datetime.now(UTC)
        return business_day.of(moment)

    def _describe_run(self) -> str:
        job = f"job {self.job_name}" if self.job_name else f"job {self.job_id}" if self.job_id else "no job"
        return f"Coalesce run {self.run.id} ({job}, environment {self.environment_id})"

    def findings(self, business_day: BusinessDay) -> list[Finding]:
        """One finding per failed or canceled node; one for the run when it failed or was canceled and no
        node of an asset explains it. They share the cause: the job and the business date."""
        business_date = self.business_date(business_day)
        evidence = {
            "coalesce_run_id": self.run.id,
            "run_link": self.run_link,
            "environment_id": self.environment_id,
            "job_id": self.job_id,
            "job_name": self.job_name,
            "run_status": self.run.run_status.value,
            "run_failure_reason": self.run.run_failure_reason,
            "run_start_time": self.run.run_start_time,
            "run_end_time": self.run.run_end_time,
        }
        common = dict(check_name=CHECK_NAME, business_date=business_date, cause_scope=self.cause_scope,
                      coalesce_run_id=str(self.run.id))  # fmt: skip
        findings = [
            Finding(
                asset_key=f.asset_key.to_user_string(),
                summary=f"{self._describe_run()}: node {f.node_name} {f.state}: {f.error}",
                severity="ERROR" if f.state == "failed" else "WARN",
                evidence={
                    **evidence,
                    "node_id": f.node_id,
                    "node_name": f.node_name,
                    "node_state": f.state,
                    "failed_query": f.query_name,
                    "error": f.error,
                    "error_detail": f.error_detail,
                },
                **common,
            )  # fmt: skip
            for f in self.failures
        ]
        status = self.run.run_status
        if not findings and (status is not CoalesceRunStatus.COMPLETED or self.unmapped_failures):
            canceled = status is CoalesceRunStatus.CANCELED
            reason = self.run.run_failure_reason or "no reason given"
            what = "was canceled" if canceled else f"failed: {reason}"
            findings.append(
                Finding(
                    asset_key=(
                        f"coalesce_job/{self.job_name}" if self.job_name else f"coalesce_run/{self.run.id}"
                    ),
                    summary=f"{self._describe_run()} {what}",
                    severity="WARN" if canceled else "ERROR",
                    evidence={**evidence, "unmapped_failed_nodes": list(self.unmapped_failures)},
                    **common,
                )
            )
        return findings

    def run_request_tags(self, business_day: BusinessDay) -> dict[str, str]:
        run_tags = {
            **tags.CHECKS_RUN_RETRIES,
            tags.COALESCE_RUN_ID: str(self.run.id),
            tags.COALESCE_ENVIRONMENT_ID: self.environment_id,
            tags.BUSINESS_DATE: self.business_date(business_day).isoformat(),
        }
        if self.job_name:
            run_tags[tags.COALESCE_JOB] = self.job_name
        return run_tags


def _is_full_rebuild(query: CoalesceQueryResult) -> bool:
    if query.sql:
        return bool(_FULL_REBUILD_SQL.match(query.sql))
    return bool(_FULL_REBUILD_NAME.search(query.name))


def _row_count(queries: Sequence[CoalesceQueryResult], materialization_type: str | None) -> int | None:
    """The table's rows after the node ran, when the queries say it: a full rebuild (create or replace,
    truncate) followed only by inserts. Unknown for views and incremental loads."""
    if materialization_type == "view":
        return None
    starts = [i for i, q in enumerate(queries) if _is_full_rebuild(q)]
    if not starts:
        return None
    after = queries[starts[-1] :]
    if any(q.rows_updated or q.rows_deleted for q in after):
        return None
    return sum(q.rows_inserted or 0 for q in after)


def _node_state(
    node: CoalesceNodeResult, run: CoalesceRun, last_started: bool
) -> Literal["built", "failed", "canceled", "not_run"]:
    queries = node.query_results
    if node.run_state == "failed" or any(not q.success and not q.is_running for q in queries):
        return "failed"
    canceled_run = run.run_status is CoalesceRunStatus.CANCELED
    interrupted = (
        node.is_running or any(q.is_running for q in queries) or node.run_state in ("canceled", "running")
    )
    if interrupted:
        return "canceled" if canceled_run else "failed"
    if not queries:
        return "not_run"
    # The results do not say whether the node a cancel came during had finished (its queries so far all
    # succeeded): without a per-node state, the last node a canceled run started is not counted as built.
    if canceled_run and last_started and node.run_state != "complete":
        return "canceled"
    return "built"


def _failure_of(
    node: CoalesceNodeResult, state: Literal["failed", "canceled"], run: CoalesceRun
) -> tuple[str | None, str, str | None]:
    """The failing query's name, the error and its detail."""
    failed = next((q for q in node.query_results if not q.success and not q.is_running and q.error), None)
    if failed is not None and failed.error is not None:
        return failed.name, failed.error.error_string, failed.error.error_detail
    running = next((q for q in node.query_results if q.is_running), None)
    query_name = running.name if running else None
    if state == "canceled":
        return query_name, "the run was canceled while this node was building", None
    return query_name, run.run_failure_reason or "the run ended while this node was building", None


def build_coalesce_run_report(
    run: CoalesceRun,
    results: CoalesceRunResults,
    assets: CoalesceAssetIndex,
    *,
    run_link: str | None = None,
    job_name: str | None = None,
) -> CoalesceRunReport:
    """Turns one finished Coalesce run and its results into Dagster events.

    A node is built when every one of its queries succeeded (a failed node test fails the node: its new
    rows are not vouched for). Built nodes get an ``AssetMaterialization``; failed nodes, and nodes a cancel
    cut short, an ``AssetObservation`` with the error. Nodes without an asset spec get nothing.
    """
    if not run.run_status.is_terminal:
        raise ValueError(f"Coalesce run {run.id} is {run.run_status.value}, not finished")
    details = run.run_details
    environment_id = (details.environment_id if details else None) or run.environment_id
    if environment_id is None:
        raise ValueError(f"Coalesce run {run.id} names no environment")
    job_id = details.job_id if details else None
    job_name = job_name or assets.job_name(environment_id, job_id)

    common: dict[str, Any] = {RUN_ID_KEY: run.id, ENVIRONMENT_ID_KEY: environment_id}
    if run_link:
        common[RUN_LINK_KEY] = dg.MetadataValue.url(run_link)
    if job_id:
        common[JOB_ID_KEY] = job_id
    if job_name:
        common[JOB_NAME_KEY] = job_name
    run_label = f"Coalesce run {run.id}" + (f" (job {job_name})" if job_name else "")

    started = [n for n in results.data if n.query_results]
    last_started = max(
        range(len(started)),
        key=lambda i: (min((q.start_time for q in started[i].query_results if q.start_time), default=None)
                       or datetime.min.replace(tzinfo=UTC), i),
        default=None,
    )  # fmt: skip
    last_started_id = started[last_started].node_id if last_started is not None else None

    materializations: list[dg.AssetMaterialization] = []
    observations: list[dg.AssetObservation] = []
    failures: list[NodeFailure] = []
    unmapped: list[str] = []
    unmapped_failures: list[str] = []
    for node in results.data:
        state = _node_state(node, run, node.node_id == last_started_id)
        if state == "not_run":
            continue
        asset_key = assets.asset_key(environment_id, node.node_id)
        if asset_key is None:
            unmapped.append(node.name)
            if state != "built":
                unmapped_failures.append(node.name)
            continue
        queries = node.query_results
        start = min((q.start_time for q in queries if q.start_time), default=None)
        end = max((q.end_time for q in queries if q.end_time), default=None)
        ended_at = end or run.run_end_time
        if state == "built":
            metadata: dict[str, Any] = {
                **common,
                NODE_ID_KEY: node.node_id,
                ROWS_INSERTED_KEY: sum(q.rows_inserted or 0 for q in queries),
                ROWS_UPDATED_KEY: sum(q.rows_updated or 0 for q in queries),
                ROWS_DELETED_KEY: sum(q.rows_deleted or 0 for q in queries),
                QUERIES_KEY: dg.MetadataValue.json(
                    [
                        {
                            "name": q.name,
                            "status": q.status,
                            "queryID": q.query_id,
                            "rowsInserted": q.rows_inserted,
                            "rowsUpdated": q.rows_updated,
                            "rowsDeleted": q.rows_deleted,
                        }  # fmt: skip
                        for q in queries
                    ]
                ),
            }
            if start is not None:
                metadata[QUERY_START_KEY] = dg.MetadataValue.timestamp(start.timestamp())
            if end is not None:
                metadata[QUERY_END_KEY] = dg.MetadataValue.timestamp(end.timestamp())
            if start is not None and end is not None:
                metadata[DURATION_KEY] = round((end - start).total_seconds(), 3)
            if ended_at is not None:
                metadata[LAST_UPDATED_KEY] = dg.MetadataValue.timestamp(ended_at.timestamp())
            row_count = _row_count(queries, assets.materialization_types.get(asset_key))
            if row_count is not None:
                metadata[ROW_COUNT_KEY] = row_count
            materializations.append(
                dg.AssetMaterialization(
                    asset_key=asset_key, description=f"Built by {run_label}.", metadata=metadata
                )
            )
            continue
        query_name, error, error_detail = _failure_of(node, state, run)
        failures.append(
            NodeFailure(
                asset_key=asset_key,
                node_id=node.node_id,
                node_name=node.name,
                state=state,
                query_name=query_name,
                error=error,
                error_detail=error_detail,
                ended_at=ended_at,
            )  # fmt: skip
        )
        metadata = {
            **common,
            NODE_ID_KEY: node.node_id,
            STATUS_KEY: state,
            RUN_STATUS_KEY: run.run_status.value,
            ERROR_KEY: error,
        }
        if query_name:
            metadata[FAILED_QUERY_KEY] = query_name
        if error_detail and error_detail != error:
            metadata[ERROR_DETAIL_KEY] = dg.MetadataValue.text(error_detail)
        if ended_at is not None:
            metadata[ENDED_AT_KEY] = dg.MetadataValue.timestamp(ended_at.timestamp())
        observations.append(
            dg.AssetObservation(
                asset_key=asset_key,
                description=f"{run_label}: node {node.name} {state}: {error}",
                metadata=metadata,
            )
        )
    return CoalesceRunReport(
        run=run,
        environment_id=environment_id,
        job_id=job_id,
        job_name=job_name,
        run_link=run_link,
        materializations=tuple(materializations),
        observations=tuple(observations),
        failures=tuple(failures),
        unmapped_nodes=tuple(unmapped),
        unmapped_failures=tuple(unmapped_failures),
    )


def fetch_coalesce_run_report(
    client: CoalesceClient, run: int | CoalesceRun, assets: CoalesceAssetIndex
) -> CoalesceRunReport:
    """Reads a finished run (its detail, results and link; its job's name when the specs do not know it)
    and builds its report with :func:`build_coalesce_run_report`."""
    if isinstance(run, int):
        run = client.get_run(run)
    results = client.get_run_results(run.id)
    run_link = client.get_run_status(run.id).run_link
    details = run.run_details
    environment_id = (details.environment_id if details else None) or run.environment_id
    job_id = details.job_id if details else None
    job_name = assets.job_name(environment_id or "", job_id)
    if job_name is None and job_id is not None and environment_id is not None:
        try:
            job_name = client.get_job(environment_id, job_id).name
        except CoalesceAPIError as e:
            if e.status != 404:
                raise
    return build_coalesce_run_report(run, results, assets, run_link=run_link, job_name=job_name)


def _event_time(event: AssetEvent) -> float:
    for key in (LAST_UPDATED_KEY, ENDED_AT_KEY):
        value = event.metadata.get(key)
        if isinstance(value, dg.TimestampMetadataValue):
            return value.value
    return float("inf")


def sort_asset_events(events: Iterable[AssetEvent]) -> list[AssetEvent]:
    """Events in the order their nodes ended (stable), so an asset's latest event is its latest build."""
    return sorted(events, key=_event_time)


def unreported_asset_events(
    instance: dg.DagsterInstance, events: Iterable[AssetEvent], lookback: int = DEDUP_LOOKBACK_RECORDS
) -> list[AssetEvent]:
    """The events whose asset has no event of the same kind from the same Coalesce run among its latest
    ``lookback`` records."""
    out = []
    for event in events:
        run_id, env_id = event.metadata.get(RUN_ID_KEY), event.metadata.get(ENVIRONMENT_ID_KEY)
        fetch = (
            instance.fetch_materializations
            if isinstance(event, dg.AssetMaterialization)
            else instance.fetch_observations
        )
        records = fetch(event.asset_key, limit=lookback).records
        if run_id is not None and any(
            r.asset_event is not None
            and r.asset_event.metadata.get(RUN_ID_KEY) == run_id
            and r.asset_event.metadata.get(ENVIRONMENT_ID_KEY) == env_id
            for r in records
        ):
            continue
        out.append(event)
    return out


def source_inputs(asset_graph: Any, built: Iterable[dg.AssetKey]) -> set[dg.AssetKey]:
    """The Coalesce Source nodes (read, never built) that the built assets read directly."""
    out = set()
    for key in built:
        for parent in asset_graph.get(key).parent_keys:
            if (
                asset_graph.has(parent)
                and asset_graph.get(parent).metadata.get("coalesce/node_type") == "Source"
            ):
                out.add(parent)
    return out


def check_keys_for_assets(asset_graph: Any, asset_keys: Iterable[dg.AssetKey]) -> list[dg.AssetCheckKey]:
    """The checks of these assets that a checks-only run can execute, with the checks that must run with
    them (a ``@multi_asset_check`` that cannot be subset runs whole)."""
    keys: set[dg.AssetCheckKey] = set()
    for check_key in asset_graph.get_check_keys_for_assets(set(asset_keys)):
        execution_set = asset_graph.get_execution_set_asset_and_check_keys(check_key)
        if any(isinstance(k, dg.AssetKey) for k in execution_set):
            continue  # runs only with an asset materialization: not a checks-only run
        keys.update(k for k in execution_set if isinstance(k, dg.AssetCheckKey))
    return sorted(keys, key=lambda k: k.to_user_string())


# ------------------
# A tick
# ------------------


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
    business_day: BusinessDay
    incidents: IncidentStore
    page_size: int
    budget_seconds: float
    cursor: CoalesceRunSensorCursor
    states: dict[str, _EnvState] = field(default_factory=dict)
    events: list[AssetEvent] = field(default_factory=list)
    run_requests: list[dg.RunRequest] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    consecutive_errors: int = 0
    stopped: str | None = None

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.budget_seconds
        self.states = {env: _EnvState.of(c) for env, c in self.cursor.environments.items()}

    @property
    def log(self):
        return self.context.log

    def should_stop(self) -> bool:
        if self.stopped is None:
            if self.consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
                self.stopped = f"{self.consecutive_errors} calls failed in a row"
            # Every tick reports at least one run, so that even a tiny budget makes progress.
            elif self.reported and time.monotonic() >= self.deadline:
                self.stopped = f"the tick's time budget ({self.budget_seconds:g} s) is spent"
        return self.stopped is not None

    def error(self, what: str, exc: Exception) -> None:
        self.errors.append(exc)
        self.consecutive_errors += 1
        known = isinstance(exc, CoalesceError | CoalesceRunSensorError)
        self.log.warning(f"{what}: {type(exc).__name__}: {exc}", exc_info=not known)

    def run(self, environment_ids: Sequence[str]) -> None:
        for env_id in environment_ids:
            if self.should_stop():
                break
            try:
                self.poll(env_id)
            except Exception as e:  # noqa: BLE001 - the listing failed: this environment waits for the next tick
                self.error(f"Listing the Coalesce runs of environment {env_id} failed", e)

    def poll(self, env_id: str) -> None:
        state = self.states.get(env_id)
        if state is None:
            state = self.states[env_id] = self.bootstrap(env_id)
        for run_id in sorted(state.pending):
            if self.should_stop():
                return
            try:
                run = self.client.get_run(run_id)
            except CoalesceAPIError as e:
                if e.status == 404:
                    self.log.warning(f"Coalesce run {run_id} no longer exists; it is not reported.")
                    state.pending.discard(run_id)
                    continue
                self.error(f"Reading Coalesce run {run_id} failed", e)
                continue
            except Exception as e:  # noqa: BLE001 - the run stays pending for the next tick
                self.error(f"Reading Coalesce run {run_id} failed", e)
                continue
            self.consecutive_errors = 0
            if run.run_status.is_terminal and self.report(run):
                state.pending.discard(run_id)
        if self.should_stop():
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
            if not (summary.run_status.is_terminal and self.report(summary.id)):
                state.pending.add(summary.id)
            state.high_water = summary.id
            if self.should_stop():
                return

    def bootstrap(self, env_id: str) -> _EnvState:
        """The first tick in an environment starts at the present: runs finished before are left to the
        import of past runs; runs in flight are reported when they finish."""
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
            f"Watching Coalesce environment {env_id} from run {high_water} on"
            + (f"; runs in flight: {sorted(pending)}" if pending else "")
        )
        return _EnvState(high_water, pending)

    def report(self, run: int | CoalesceRun) -> bool:
        """Reads one finished run, records its findings and keeps its events and checks run; False (and
        nothing kept) when any of that fails."""
        run_id = run if isinstance(run, int) else run.id
        try:
            report = fetch_coalesce_run_report(self.client, run, self.assets)
            events = unreported_asset_events(self.context.instance, report.asset_events)
            outcomes = [self.incidents.record_finding(f) for f in report.findings(self.business_day)]
            asset_graph = self.context.repository_def.asset_graph
            # The Source nodes the run read are checked with what it built: the run just consumed them.
            touched = [*report.built_asset_keys, *source_inputs(asset_graph, report.built_asset_keys)]
            check_keys = check_keys_for_assets(asset_graph, touched)
            outcomes += review_run(
                self.context,
                self.client,
                self.incidents,
                environment_id=report.environment_id,
                touched=touched,
                business_date=report.business_date(self.business_day),
                coalesce_run_id=str(report.run.id),
            )
        except Exception as e:  # noqa: BLE001 - the run stays pending for the next tick
            self.error(f"Reporting Coalesce run {run_id} failed; it stays pending", e)
            return False
        self.consecutive_errors = 0
        self.events.extend(events)
        if check_keys:
            self.run_requests.append(
                dg.RunRequest(
                    run_key=f"{report.environment_id}:{report.run.id}",
                    asset_check_keys=check_keys,
                    tags=report.run_request_tags(self.business_day),
                )
            )
        line = (
            f"Coalesce run {report.run.id} (environment {report.environment_id}, job "
            f"{report.job_name or report.job_id or '-'}) {report.run.run_status.value}: "
            f"{len(report.materializations)} built, {len(report.failures)} failed or canceled"
        )
        if len(events) < len(report.asset_events):
            line += f"; {len(report.asset_events) - len(events)} events already reported"
        if report.unmapped_nodes:
            line += f"; nodes without an asset: {list(report.unmapped_nodes)}"
        for outcome in outcomes:
            if outcome.new_incident:
                line += f"; opened incident {outcome.incident.incident_id}"
            elif outcome.new_finding:
                line += f"; added to incident {outcome.incident.incident_id}"
        (self.log.warning if report.failed else self.log.info)(line)
        self.reported.append(f"{report.environment_id}:{report.run.id}")
        return True

    def result(self) -> dg.SensorResult:
        environments = dict(self.cursor.environments)
        environments.update({env: s.freeze() for env, s in self.states.items()})
        new_cursor = CoalesceRunSensorCursor(environments=environments)
        if self.errors and not self.reported and new_cursor == self.cursor:
            raise CoalesceRunSensorError(
                f"No progress this tick ({len(self.errors)} errors); the cursor is unchanged. Last error: "
                f"{type(self.errors[-1]).__name__}: {self.errors[-1]}"
            ) from self.errors[-1]
        if self.stopped:
            self.log.info(f"Stopped early: {self.stopped}; the next tick resumes where this one ended.")
        if self.errors:
            self.log.warning(f"{len(self.errors)} errors this tick; the runs concerned stay pending.")
        if not (self.events or self.run_requests):
            reason = (
                f"Reported Coalesce runs {self.reported} (no new events)"
                if self.reported
                else "No Coalesce refresh run finished since the last tick."
            )
            return dg.SensorResult(skip_reason=reason, cursor=new_cursor.serialize())
        return dg.SensorResult(
            asset_events=sort_asset_events(self.events),
            run_requests=self.run_requests,
            cursor=new_cursor.serialize(),
        )


def build_coalesce_run_sensor(
    *,
    workspace: CoalesceWorkspace,
    asset_specs: Sequence[dg.AssetSpec],
    business_day: BusinessDay,
    name: str = "coalesce_run_sensor",
    minimum_interval_seconds: int = DEFAULT_SENSOR_INTERVAL_SECONDS,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    tick_time_budget_seconds: float = DEFAULT_TICK_TIME_BUDGET_SECONDS,
    page_size: int = DEFAULT_PAGE_SIZE,
    ops_schema: OpsSchema | None = None,
) -> dg.SensorDefinition:
    """A sensor that reports the Coalesce refresh runs of ``workspace.environment_ids`` as they finish.

    It needs the ``snowflake`` resource (:class:`~dw_dagster.warehouse.resources.WarehouseResource`) to
    record incidents, and requests checks-only runs (its asset selection is every asset check).

    Args:
        workspace (CoalesceWorkspace): The Coalesce host, token and environments to watch.
        asset_specs (Sequence[AssetSpec]): The Coalesce assets (``load_coalesce_asset_specs``): which asset
            each node is, and the job names.
        business_day (BusinessDay): Which business date a run counts for (from its start time).
        name (str): The sensor's name.
        minimum_interval_seconds (int): Seconds between ticks.
        default_status (DefaultSensorStatus): Whether the sensor runs once deployed.
        tick_time_budget_seconds (float): A tick stops starting new work after this many seconds (and
            after at least one run reported); the next tick resumes from its cursor.
        page_size (int): Runs per page of ``GET /api/v1/runs`` (at most 1000).
        ops_schema (Optional[OpsSchema]): Where incidents live; by default ``DW_OPS`` in the
            ``snowflake`` resource's database.

    Examples:
        .. code-block:: python

            sensor = build_coalesce_run_sensor(
                workspace=coalesce,
                asset_specs=load_coalesce_asset_specs(coalesce.fetch_workspace_data()),
                business_day=BusinessDay(timezone="America/Chicago", cutoff_hour=6),
            )
            defs = dg.Definitions(assets=specs, sensors=[sensor], resources={"snowflake": warehouse})
    """
    if not 1 <= page_size <= 1000:
        raise ValueError(f"page_size must be between 1 and 1000, got {page_size}")
    if tick_time_budget_seconds < 0:
        raise ValueError(f"tick_time_budget_seconds must not be negative, got {tick_time_budget_seconds}")
    assets = CoalesceAssetIndex.from_specs(asset_specs)
    environments = ", ".join(workspace.environment_ids)

    @dg.sensor(
        name=name,
        description=(
            f"Reports the Coalesce refresh runs of environments {environments} as they finish: a "
            "materialization per node built, an observation and an incident per failure, and a checks-only "
            "run for the checks of the assets built."
        ),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        asset_selection=dg.AssetSelection.all_asset_checks(),
    )
    def _coalesce_run_sensor(
        context: dg.SensorEvaluationContext, snowflake: WarehouseResource
    ) -> dg.SensorResult:
        cursor = CoalesceRunSensorCursor.parse(context.cursor)
        ops = ops_schema
        if ops is None:
            if not snowflake.database:
                raise CoalesceRunSensorError(
                    "The snowflake resource names no database for the ops schema: set its database or pass "
                    "ops_schema to build_coalesce_run_sensor."
                )
            ops = OpsSchema(database=snowflake.database)
        with workspace.process_config_and_initialize_cm() as configured:
            client = configured.get_client()
            try:
                tick = _Tick(
                    context=context,
                    client=client,
                    assets=assets,
                    business_day=business_day,
                    incidents=IncidentStore(snowflake, ops),
                    page_size=page_size,
                    budget_seconds=tick_time_budget_seconds,
                    cursor=cursor,
                )
                tick.run(configured.environment_ids)
            finally:
                client.close()
        return tick.result()

    return _coalesce_run_sensor
