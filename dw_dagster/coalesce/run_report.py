"""One finished Coalesce run as Dagster events: a materialization per node built, an observation per node
that failed or that a cancel cut short."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

import dagster as dg

from dw_dagster.coalesce.asset_index import CoalesceAssetIndex
from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.errors import CoalesceAPIError
from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.coalesce.run_models import (
    CoalesceNodeResult,
    CoalesceQueryResult,
    CoalesceRun,
    CoalesceRunResults,
    CoalesceRunStatus,
)

LAST_UPDATED_KEY = "dagster/last_updated_timestamp"
ROW_COUNT_KEY = "dagster/row_count"

# A query that replaces a table's whole content: the rows inserted from it on are the table's rows.
_FULL_REBUILD_SQL = re.compile(
    r"^\s*(CREATE\s+OR\s+REPLACE\s+(TRANSIENT\s+)?TABLE|TRUNCATE)\b", re.IGNORECASE
)
_FULL_REBUILD_NAME = re.compile(r"(create|recreate).*table|truncate", re.IGNORECASE)

AssetEvent = dg.AssetMaterialization | dg.AssetObservation


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
    """What one finished Coalesce run did, as Dagster events."""

    run: CoalesceRun
    environment_id: str
    job_id: str | None
    job_name: str | None
    run_link: str | None
    materializations: tuple[dg.AssetMaterialization, ...]
    observations: tuple[dg.AssetObservation, ...]
    failures: tuple[NodeFailure, ...]
    unmapped_nodes: tuple[str, ...] = ()
    """Nodes in the results that no asset spec describes (a stale state); they get no events."""
    unmapped_failures: tuple[str, ...] = ()
    superseded: frozenset[dg.AssetKey] = frozenset()
    """Assets this run built that a later build, reported by the same tick, replaced (a tick catching up on
    several runs: after a restart, or two runs between ticks). The warehouse holds that later build."""
    environment_name: str | None = None
    """The environment's name (``PROD``), which a person knows it by."""

    @property
    def asset_events(self) -> list[AssetEvent]:
        """Materializations and failure observations, in the order the nodes ended."""
        return sort_asset_events([*self.materializations, *self.observations])

    @property
    def built_asset_keys(self) -> set[dg.AssetKey]:
        return {m.asset_key for m in self.materializations}

    @property
    def current_asset_keys(self) -> set[dg.AssetKey]:
        """What this run built that the warehouse still holds as this run built it."""
        return self.built_asset_keys - self.superseded

    @property
    def failed(self) -> bool:
        completed = self.run.run_status is CoalesceRunStatus.COMPLETED
        return not completed or bool(self.failures or self.unmapped_failures)

    def describe(self) -> str:
        job = f"job {self.job_name}" if self.job_name else f"job {self.job_id}" if self.job_id else "no job"
        return (
            f"Coalesce run {self.run.id} ({job}, environment {self.environment_name or self.environment_id})"
        )


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
    cut short, an ``AssetObservation`` with the error. Nodes without an asset spec get nothing. A node's
    ``runState``, where Coalesce reports one, decides; otherwise its queries do.
    """
    if not run.run_status.is_terminal:
        raise ValueError(f"Coalesce run {run.id} is {run.run_status.value}, not finished")
    details = run.run_details
    environment_id = (details.environment_id if details else None) or run.environment_id
    if environment_id is None:
        raise ValueError(f"Coalesce run {run.id} names no environment")
    job_id = details.job_id if details else None
    job_name = job_name or assets.job_name(environment_id, job_id)

    common: dict[str, Any] = dict(
        run_id=run.id,
        environment_id=environment_id,
        run_link=dg.MetadataValue.url(run_link) if run_link else None,
        job_id=job_id or None,
        job_name=job_name,
    )
    run_label = f"Coalesce run {run.id}" + (f" (job {job_name})" if job_name else "")

    started = [n for n in results.data if n.query_results]
    last_started = max(
        range(len(started)),
        key=lambda i: (
            min((q.start_time for q in started[i].query_results if q.start_time), default=None)
            or datetime.min.replace(tzinfo=UTC),
            i,
        ),
        default=None,
    )
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
            built = CoalesceRunMetadataSet(
                **common,
                node_id=node.node_id,
                rows_inserted=sum(q.rows_inserted or 0 for q in queries),
                rows_updated=sum(q.rows_updated or 0 for q in queries),
                rows_deleted=sum(q.rows_deleted or 0 for q in queries),
                queries=dg.MetadataValue.json([_query_summary(q) for q in queries]),
                query_start=dg.MetadataValue.timestamp(start.timestamp()) if start is not None else None,
                query_end=dg.MetadataValue.timestamp(end.timestamp()) if end is not None else None,
                duration_seconds=(
                    round((end - start).total_seconds(), 3) if start is not None and end is not None else None
                ),
            )
            metadata: dict[str, Any] = {**built}
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
            )
        )
        failed = CoalesceRunMetadataSet(
            **common,
            node_id=node.node_id,
            status=state,
            run_status=run.run_status.value,
            error=error,
            failed_query=query_name,
            error_detail=(
                dg.MetadataValue.text(error_detail) if error_detail and error_detail != error else None
            ),
            ended_at=dg.MetadataValue.timestamp(ended_at.timestamp()) if ended_at is not None else None,
        )
        observations.append(
            dg.AssetObservation(
                asset_key=asset_key,
                description=f"{run_label}: node {node.name} {state}: {error}",
                metadata={**failed},
            )
        )
    return CoalesceRunReport(
        run=run,
        environment_id=environment_id,
        environment_name=assets.environment_names.get(environment_id),
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


def mark_superseded(reports: Sequence[CoalesceRunReport]) -> list[CoalesceRunReport]:
    """``reports`` with each one's ``superseded``: the assets it built that another of them built after it
    (by the node's end time, as :func:`sort_asset_events` orders them)."""
    latest: dict[dg.AssetKey, float] = {}
    for report in reports:
        for m in report.materializations:
            latest[m.asset_key] = max(latest.get(m.asset_key, float("-inf")), _event_time(m))
    return [
        replace(
            report,
            superseded=frozenset(
                m.asset_key for m in report.materializations if _event_time(m) < latest[m.asset_key]
            ),
        )
        for report in reports
    ]


def _event_time(event: AssetEvent) -> float:
    for key in (LAST_UPDATED_KEY, "coalesce/ended_at"):
        value = event.metadata.get(key)
        if isinstance(value, dg.TimestampMetadataValue):
            return value.value
    return float("inf")


def _query_summary(query: CoalesceQueryResult) -> dict[str, Any]:
    return {
        "name": query.name,
        "type": query.type,
        "status": query.status,
        "queryID": query.query_id,
        "rowsInserted": query.rows_inserted,
        "rowsUpdated": query.rows_updated,
        "rowsDeleted": query.rows_deleted,
    }


def sort_asset_events(events: Iterable[AssetEvent]) -> list[AssetEvent]:
    """Events in the order their nodes ended (stable), so an asset's latest event is its latest build."""
    return sorted(events, key=_event_time)
