"""Finding an environment's jobs where Coalesce has no jobs listing: the real client against httpx's mock
transport, counting every request. No server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

import httpx
import pytest

from dw_dagster.coalesce import CoalesceAPIError, CoalesceClient
from dw_dagster.coalesce.job_discovery import find_jobs

BASE_URL = "https://app.coalescesoftware.io"
TOKEN = "token"
JOBS_PATH = "/api/v1/environments/2/jobs"
LOG = logging.getLogger("test_job_discovery")


class Coalesce:
    """Jobs by id under environment 2; the listing answers only when ``listing`` is set; the latest refresh
    runs ran the jobs ``ran``."""

    def __init__(
        self,
        job_ids: Iterable[int],
        listing: bool = False,
        broken: int | None = None,
        ran: Iterable[int] = (),
    ):
        self.jobs = {
            str(i): {"id": str(i), "name": f"job_{i}", "includeSelector": "{location: MART}"} for i in job_ids
        }
        self.listing = listing
        self.broken = broken
        self.ran = list(ran)
        self.asked: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.asked.append(path)
        if path == "/api/v1/runs":
            assert dict(request.url.params) == {
                "environmentID": "2", "runType": "refresh", "orderBy": "id", "orderByDirection": "desc",
                "limit": "100", "detail": "true",
            }  # fmt: skip
            runs = [
                {"id": 90 - n, "runType": "refresh", "runStatus": "completed",
                 "runDetails": {"environmentID": "2", "jobID": str(job)}}
                for n, job in enumerate(self.ran)
            ]  # fmt: skip
            return httpx.Response(200, json={"data": runs, "limit": 100})
        if path == JOBS_PATH:
            if not self.listing:
                return _error(404, "Not found.")
            data = sorted(self.jobs.values(), key=lambda j: int(j["id"]))
            return httpx.Response(200, json={"data": data, "next": None, "total": len(data)})
        job_id = path.removeprefix(JOBS_PATH + "/")
        if self.broken is not None and job_id == str(self.broken):
            return _error(401, "Unable to authenticate, please ensure your token is valid.")
        if job_id in self.jobs:
            return httpx.Response(200, json=self.jobs[job_id])
        return _error(404, f"Job {job_id} was not found.")

    def client(self) -> CoalesceClient:
        return CoalesceClient(TOKEN, BASE_URL, request_max_retries=0, transport=httpx.MockTransport(self))

    def probed(self) -> list[int]:
        return sorted(int(p.rsplit("/", 1)[1]) for p in self.asked if p.startswith(JOBS_PATH + "/"))


def _error(status: int, message: str) -> httpx.Response:
    return httpx.Response(status, content=json.dumps({"error": {"errorString": f"{status}: {message}"}}))


def test_the_listing_is_used_when_it_answers() -> None:
    coalesce = Coalesce([1, 2, 7], listing=True)
    jobs, found_by = find_jobs(coalesce.client(), "2", [], [], LOG)
    assert ([j.name for j in jobs], found_by) == (["job_1", "job_2", "job_7"], "collection")
    assert coalesce.asked == [JOBS_PATH]


def test_a_job_a_probe_would_not_reach_is_found_once_it_has_run() -> None:
    coalesce = Coalesce([2, 120], ran=[120, 2, 120])
    jobs, found_by = find_jobs(coalesce.client(), "2", [], [], LOG)
    assert ([j.id for j in jobs], found_by) == (["2", "120"], "probe")
    assert coalesce.probed() == [*range(1, 51), 120]


def test_without_a_listing_ids_are_probed_as_the_mcp_server_does() -> None:
    # 48 is among the first batch's last ten ids, so ids 51-100 are asked too; 60 is not among theirs.
    coalesce = Coalesce([1, 2, 5, 48, 60])
    jobs, found_by = find_jobs(coalesce.client(), "2", [], [], LOG)
    assert ([j.id for j in jobs], found_by) == (["1", "2", "5", "48", "60"], "probe")
    assert coalesce.asked[0] == JOBS_PATH and coalesce.probed() == list(range(1, 101))


def test_the_next_refresh_reads_what_it_found_and_only_looks_just_past_it() -> None:
    coalesce = Coalesce([1, 2, 5, 48, 60, 63, 64], ran=[64])  # 63 and 64 are new since the last refresh
    jobs, found_by = find_jobs(coalesce.client(), "2", [], ["1", "2", "5", "48", "60", "9"], LOG)
    assert ([j.id for j in jobs], found_by) == (["1", "2", "5", "48", "60", "63", "64"], "probe")
    # Each known id (9 is gone), then 61-70 (63 and 64), then 71-80 (nothing): 26 reads, not 100.
    assert coalesce.probed() == [1, 2, 5, 9, 48, 60, *range(61, 81)]


def test_configured_job_ids_are_read_by_id_and_a_missing_one_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coalesce = Coalesce([3, 9, 11])
    with caplog.at_level(logging.WARNING):
        jobs, found_by = find_jobs(coalesce.client(), "2", ["9", "4", "3"], ["11"], LOG)
    assert ([j.id for j in jobs], found_by) == (["9", "3"], "job_ids")
    assert coalesce.probed() == [3, 4, 9]
    assert "these configured job ids are not found there (404): ['4']" in caplog.text


def test_a_probe_never_takes_an_error_for_a_missing_job() -> None:
    coalesce = Coalesce([1, 2, 3], broken=2)
    with pytest.raises(CoalesceAPIError) as info:
        find_jobs(coalesce.client(), "2", [], [], LOG)
    assert info.value.status == 401 and info.value.endpoint == f"GET {JOBS_PATH}/2"


def test_an_environment_with_no_job_says_how_to_name_them(caplog: pytest.LogCaptureFixture) -> None:
    coalesce = Coalesce([])
    with caplog.at_level(logging.WARNING):
        assert find_jobs(coalesce.client(), "2", [], [], LOG) == ([], "probe")
    assert coalesce.probed() == list(range(1, 51)) and "COALESCE_JOB_IDS" in caplog.text
