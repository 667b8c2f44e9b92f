"""Pages of detailed nodes, sized and timed like Coalesce's own Catalog extractor: the real client against
httpx's mock transport, a slow stretch of the project made to time out. No server."""

from __future__ import annotations

import json

import httpx
import pytest

from dw_dagster.coalesce import CoalesceAPIError, CoalesceClient
from dw_dagster.coalesce.client import CoalesceNodePaging
from dw_dagster.coalesce.errors import CoalesceConfigError, CoalesceTimeoutError

NODES = [{"id": f"n{i:04d}", "name": f"NODE_{i}", "nodeType": "Stage"} for i in range(450)]


class SlowProject:
    """A page asking for more than ``fast_limit`` nodes that reaches into ``slow`` times out (or answers
    ``status``); every page asked is kept as (position, limit)."""

    def __init__(self, slow: range, fast_limit: int = 20, status: int | None = None):
        self.slow, self.fast_limit, self.status = slow, fast_limit, status
        self.pages: list[tuple[int, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        params = request.url.params
        assert params["detail"] == "true" and params["orderBy"] == "id"
        limit = int(params["limit"])
        start = int(params["startingFrom"].removeprefix("after-")) + 1 if "startingFrom" in params else 0
        self.pages.append((start, limit))
        if limit > self.fast_limit and start < self.slow.stop and start + limit > self.slow.start:
            if self.status is not None:
                error = {"error": {"errorString": f"{self.status}: Gateway timeout."}}
                return httpx.Response(self.status, content=json.dumps(error))
            raise httpx.ReadTimeout("timed out", request=request)
        chunk = NODES[start : start + limit]
        more = start + limit < len(NODES)
        return httpx.Response(
            200, json={"data": chunk, "next": f"after-{start + len(chunk) - 1}" if more else None}
        )


def client(project: SlowProject, page_size: int = 200) -> CoalesceClient:
    paging = CoalesceNodePaging(page_size=page_size, timeout=5, retry_wait=0)
    transport = httpx.MockTransport(project)
    return CoalesceClient("token", "https://coalesce.example", request_max_retries=1, transport=transport,
                          request_retry_delay=0, node_paging=paging)  # fmt: skip


@pytest.mark.parametrize("status", [None, 504])
def test_a_slow_stretch_is_read_in_tenths_then_at_full_size_again(status: int | None) -> None:
    project = SlowProject(range(100, 250), status=status)
    nodes = client(project).list_nodes("2", detail=True)
    assert [n.id for n in nodes] == [n["id"] for n in NODES]
    limits = [limit for _, limit in project.pages]
    # 200 times out; ten pages of 20 read the stretch's first 200 nodes; 200 again reaches into it and times
    # out; ten more of 20; then the rest at 200.
    assert limits == [200, *[20] * 10, 200, *[20] * 10, 200]


def test_a_page_that_times_out_at_one_node_fails_the_call() -> None:
    project = SlowProject(range(0, 450), fast_limit=0)
    with pytest.raises(CoalesceTimeoutError, match=r"GET /api/v1/environments/2/nodes failed: no answer"):
        client(project).list_nodes("2", detail=True)
    assert [limit for _, limit in project.pages] == [200, 20, 2, 1]


def test_a_server_error_is_not_taken_for_a_slow_page() -> None:
    project = SlowProject(range(0, 450), status=500)
    with pytest.raises(CoalesceAPIError) as info:
        client(project).list_nodes("2", detail=True)
    assert info.value.status == 500 and [limit for _, limit in project.pages] == [200, 200]  # one retry


def test_summaries_keep_their_own_page_size_and_timeout() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.url.params))
        return httpx.Response(200, json={"data": NODES[:3], "next": None})

    c = CoalesceClient("token", "https://coalesce.example", transport=httpx.MockTransport(handler))
    assert len(c.list_nodes("2")) == 3 and seen == [{"detail": "false", "limit": "100", "orderBy": "id"}]


@pytest.mark.parametrize(
    ("paging", "field"),
    [({"page_size": 501}, "node_page_size"), ({"timeout": 0}, "node_page_timeout"),
     ({"retry_wait": -1}, "node_page_retry_wait")],
)  # fmt: skip
def test_a_paging_setting_out_of_range_is_refused_naming_it(paging: dict, field: str) -> None:
    with pytest.raises(CoalesceConfigError, match=field):
        CoalesceNodePaging(**paging)
