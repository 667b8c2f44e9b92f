"""Finding an environment's jobs without relying on a jobs collection.

``GET /api/v1/environments/{id}/jobs`` is in neither Coalesce's OpenAPI description (v6.2) nor its docs.
Coalesce's Transform MCP server finds an environment's jobs by asking for ``GET .../jobs/1``, ``/2``, ...
"when the API lacks a collection GET endpoint" (jessemarshall/coalesce-transform-mcp
``src/coalesce/api/scan.ts`` ``scanResourcesByID``, called by ``jobs.ts`` ``listEnvironmentJobs``); one other
version of that file calls the collection. So, in order:

1. the collection, when it answers;
2. on a 404 (or 405), the job ids the workspace is configured with (``job_ids``), each read by id;
3. otherwise the ids the last refresh found (kept in the state), each read again, then the ids just past
   the highest one, ten at a time, while they find jobs;
4. with no last refresh, a probe as the MCP server's: ids 1-50, then the next 50 while a job turns up among a
   batch's last ten ids, up to id 10,000;

and, after 3 or 4, the jobs of the environment's latest refresh runs that these did not reach (one
``GET /api/v1/runs?detail=true``, ``runDetails.jobID``): a job with an id far past the others is found once
it has run.

The state records which way the jobs were found (``CoalesceEnvironmentData.jobs_found_by``), so the next
refresh starts from them instead of probing from 1, and the run sensor reads job names from the loaded
specs (a job it does not know it reads by id, never by listing).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.errors import CoalesceAPIError
from dw_dagster.coalesce.workspace_models import CoalesceJob

JobsFoundBy = Literal["collection", "job_ids", "probe"]

# Coalesce's Transform MCP server's scan (src/coalesce/api/scan.ts): SCAN_BATCH_SIZE, SCAN_TAIL_THRESHOLD,
# SCAN_MAX_ID. It asks 20 at a time; fewer here, to stay clear of rate limits.
PROBE_BATCH = 50
PROBE_TAIL = 10
PROBE_MAX_ID = 10_000
PROBE_CONCURRENCY = 8
# The latest refresh runs whose jobs are read too: a job whose id a probe would not reach is found once it ran.
RECENT_RUNS = 100
# A collection that is not there.
ABSENT_STATUSES = frozenset({404, 405})


def find_jobs(
    client: CoalesceClient,
    environment_id: str,
    job_ids: Sequence[str],
    known_ids: Sequence[str],
    log: logging.Logger,
) -> tuple[list[CoalesceJob], JobsFoundBy]:
    """The environment's jobs and how they were found (see the module's docstring for the order).

    Args:
        job_ids: The ids the workspace is configured with; used only when the collection is absent.
        known_ids: The ids the last refresh found in this environment.
    """
    try:
        return client.list_jobs(environment_id), "collection"
    except CoalesceAPIError as e:
        if e.status not in ABSENT_STATUSES:
            raise
    if job_ids:
        jobs = _read(client, environment_id, job_ids)
        missing = sorted(set(job_ids) - {j.id for j in jobs}, key=_id_order)
        if missing:
            log.warning(
                f"Coalesce environment {environment_id}: these configured job ids are not found there (404): {missing}"
            )
        return jobs, "job_ids"
    return probe_jobs(client, environment_id, known_ids, log), "probe"


def probe_jobs(
    client: CoalesceClient, environment_id: str, known_ids: Sequence[str], log: logging.Logger
) -> list[CoalesceJob]:
    """Jobs found by reading ids: the known ones, then ten past the highest while that finds jobs (with none
    known, batches of 50 from id 1 while a job turns up in a batch's last ten ids), then the latest runs' jobs
    these did not reach."""
    ran = _ran_job_ids(client, environment_id)
    numeric = sorted({int(i) for i in known_ids if str(i).isdigit()})
    if numeric:
        jobs = _read(client, environment_id, [str(i) for i in numeric])
        asked, start, batch = len(numeric), numeric[-1] + 1, PROBE_TAIL
    else:
        jobs, asked, start, batch = [], 0, 1, PROBE_BATCH
    scanned_to = start - 1
    while start <= PROBE_MAX_ID:
        end = min(start + batch - 1, PROBE_MAX_ID)
        found = _read(client, environment_id, [str(i) for i in range(start, end + 1)])
        asked, scanned_to = asked + end - start + 1, end
        jobs += found
        highest = max((int(j.id) for j in found if j.id.isdigit()), default=0)
        if highest < end - PROBE_TAIL + 1:
            break
        start = end + 1
    beyond = [str(i) for i in ran if i > scanned_to and i not in numeric]
    jobs += _read(client, environment_id, beyond)
    asked += len(beyond)
    jobs.sort(key=lambda j: _id_order(j.id))
    log.info(
        f"Coalesce environment {environment_id} has no jobs listing (404): found {len(jobs)} "
        f"{'job' if len(jobs) == 1 else 'jobs'} by reading {asked} job {'id' if asked == 1 else 'ids'}"
        + ("" if numeric else " from 1")
    )
    if not jobs:
        log.warning(
            f"Coalesce environment {environment_id}: no job found by id; if it has jobs, set the workspace's "
            "job_ids (COALESCE_JOB_IDS)"
        )
    return jobs


def _ran_job_ids(client: CoalesceClient, environment_id: str) -> list[int]:
    """The ids of the jobs the environment's latest refresh runs ran."""
    runs = client.list_run_details(
        environment_id, run_type="refresh", order_by="id", order_by_direction="desc", limit=RECENT_RUNS
    ).data
    ids = {r.run_details.job_id for r in runs if r.run_details is not None and r.run_details.job_id}
    return sorted(int(i) for i in ids if i.isdigit())


def _read(client: CoalesceClient, environment_id: str, ids: Iterable[str]) -> list[CoalesceJob]:
    """The jobs with these ids, in their order; a 404 is a job that is not there."""

    def one(job_id: str) -> CoalesceJob | None:
        try:
            return client.get_job(environment_id, job_id)
        except CoalesceAPIError as e:
            if e.status == 404:
                return None
            raise

    ids = list(ids)
    if len(ids) <= 1:
        found = [one(i) for i in ids]
    else:
        with ThreadPoolExecutor(max_workers=min(PROBE_CONCURRENCY, len(ids))) as pool:
            found = list(pool.map(one, ids))
    return [j for j in found if j is not None]


def _id_order(job_id: str) -> tuple[int, str]:
    return (int(job_id), job_id) if job_id.isdigit() else (PROBE_MAX_ID + 1, job_id)
