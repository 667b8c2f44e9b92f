"""Contract tests: a response of every endpoint the client calls, in the shapes of Coalesce's published API
(``docs/coalesce-api.md``; ``tests/fixtures/coalesce_api/recorded.json``), replayed through the real client
with httpx's mock transport. No server: the whole module runs in well under a second.

The replay is strict: a request the recording does not hold (another path, other query parameters, another
body) fails the test, so the requests the client sends are checked as much as the responses it reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from dw_dagster.coalesce import CoalesceAPIError, CoalesceClient, CoalesceUserCredentials
from dw_dagster.coalesce.asset_index import CoalesceAssetIndex
from dw_dagster.coalesce.run_models import CoalesceRunStatus
from dw_dagster.coalesce.run_report import build_coalesce_run_report
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData

RECORDED = json.loads((Path(__file__).parents[1] / "fixtures" / "coalesce_api" / "recorded.json").read_text())
BASE_URL = "https://app.coalescesoftware.io"
TOKEN = "recorded-token"


class Replay:
    """Answers each request with the recorded response of the same method, path, query and body."""

    def __init__(self, exchanges: list[dict[str, Any]]):
        self.exchanges = exchanges
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        params = dict(request.url.params)
        body = json.loads(request.content) if request.content else None
        for exchange in self.exchanges:
            want = exchange["request"]
            if (want["method"], want["path"], want["params"]) == (request.method, request.url.path, params):
                assert body == want["body"], f"{exchange['name']}: sent {body}"
                self.seen.append(exchange["name"])
                response = exchange["response"]
                content = b"" if response["body"] is None else json.dumps(response["body"]).encode()
                return httpx.Response(response["status"], headers=response["headers"], content=content)
        raise AssertionError(f"no recorded response for {request.method} {request.url.path} {params} {body}")


@pytest.fixture
def replay() -> Replay:
    return Replay(RECORDED["exchanges"])


@pytest.fixture
def client(replay: Replay) -> CoalesceClient:
    return CoalesceClient(TOKEN, BASE_URL, request_max_retries=0, transport=httpx.MockTransport(replay))


def credentials(**extra: Any) -> CoalesceUserCredentials:
    return CoalesceUserCredentials(snowflake_username="TRANSFORM", snowflake_password="pw-from-env", **extra)


def test_every_recorded_endpoint_is_replayed(client: CoalesceClient, replay: Replay) -> None:
    environments = client.list_environments()
    prod = client.get_environment("2")
    assert [e.name for e in environments] == ["PROD"] and prod == environments[0].model_copy(
        update={"run_time_parameters": {"dw_region": "EU", "full_refresh": "false"}}
    )
    # Unknown fields are kept, not refused.
    assert environments[0].model_extra == {"description": "Production", "gitBranch": "main"}

    summaries = client.list_nodes("2", limit=2)
    assert [n.name for n in summaries] == ["ORDERS", "STG_ORDERS", "FCT_ORDERS"]  # both pages
    nodes = client.list_nodes("2", detail=True)
    fct = client.get_node("2", nodes[2].id)
    assert fct == nodes[2] and fct.node_type == "fact_custom_pkg"  # a package node type is just a string
    (test,) = fct.metadata.applied_node_tests
    assert (test.name, test.continue_on_failure, test.run_order) == ("NO_NEGATIVE_AMOUNT", False, "After")
    assert test.template_string.startswith("SELECT * FROM {{ ref('MART', 'FCT_ORDERS') }}")
    stg = nodes[1]
    order_id = stg.metadata.columns[0]
    assert order_id.applied_column_tests == {"notNull": True, "unique": False}
    assert stg.metadata.enabled_column_test_ids == ["notNull"]
    assert stg.metadata.column_tests(order_id) == {"notNull"}
    assert "columnReference" in order_id.model_extra and fct.model_extra["deployEnabled"] is True

    jobs = client.list_jobs("2", limit=1)
    assert [(j.id, j.name) for j in jobs] == [("1", "orders_nightly"), ("4", "marts_only")]
    assert client.get_job("2", 4) == jobs[1]

    (summary,) = client.list_runs(
        environment_id="2",
        run_type="refresh",
        order_by="id",
        order_by_direction="asc",
        starting_from=30,
        limit=25,
    ).data
    assert summary.run_status is CoalesceRunStatus.FAILED and summary.model_extra == {"projectID": "1"}
    run = client.get_run(31)
    assert run.run_details is not None and run.run_details.job_id == "1"
    assert run.run_time_parameters == {"dw_business_date": "2025-06-16"}
    # A password the server echoes is dropped on reading, never kept or printed.
    assert run.user_credentials is not None and "echoed-secret" not in repr(run) + run.model_dump_json()
    results = client.get_run_results(31)
    assert [n.run_state for n in results.data] == ["complete", "failed"]
    assert [q.name for q in results.data[1].test_results] == ["ORDER_ID: Unique", "NO_NEGATIVE_AMOUNT"]
    assert client.get_run_status(31).run_link == "https://app.coalescesoftware.io/runs/31"

    # The recording holds the bodies: the environment's parameters under the run's own.
    started = client.start_run(
        "2",
        job_id=1,
        user_credentials=credentials(snowflake_warehouse="TRANSFORM_WH", snowflake_role="TRANSFORMER"),
        parameters={"dw_business_date": "2025-06-16"},
    )
    assert started == 32
    assert client.rerun(31, credentials()) == 33
    client.cancel_run(33, environment_id="2", org_id="acme-org")

    with pytest.raises(CoalesceAPIError) as missing:
        client.get_run(999)
    assert (missing.value.status, missing.value.error_string) == (404, "404: Run 999 was not found.")
    with pytest.raises(CoalesceAPIError) as refused:
        client.get_environment("7")
    assert refused.value.status == 401 and "GET /api/v1/environments/7" in str(refused.value)
    assert TOKEN not in str(refused.value)

    assert set(replay.seen) == {e["name"] for e in RECORDED["exchanges"]}


def test_a_recorded_run_becomes_its_events(client: CoalesceClient) -> None:
    """The recorded results through the sensor's report: runState decides, tests fail their node."""
    nodes, jobs = client.list_nodes("2", detail=True), client.list_jobs("2", limit=1)
    data = CoalesceWorkspaceData(
        base_url=BASE_URL,
        fetched_at=client.get_run(31).run_end_time,
        environments=[
            CoalesceEnvironmentData(environment=client.get_environment("2"), nodes=nodes, jobs=jobs)
        ],
    )
    specs = load_coalesce_asset_specs(data)
    report = build_coalesce_run_report(
        client.get_run(31), client.get_run_results(31), CoalesceAssetIndex.from_specs(specs), run_link="link"
    )
    stg, fct = dg.AssetKey(["stage", "stg_orders"]), dg.AssetKey(["mart", "fct_orders"])
    assert report.built_asset_keys == {stg} and report.job_name == "orders_nightly"
    # Named as a person knows the run's environment: by its name, not its id.
    environment = client.get_environment("2").name
    assert report.describe() == f"Coalesce run 31 (job orders_nightly, environment {environment})"
    (built,) = report.materializations
    assert (
        built.metadata["dagster/row_count"].value == 1250
    )  # create or replace, then insert: the whole table
    assert [q["type"] for q in built.metadata["coalesce/queries"].data] == [None, None, "sqlTest"]
    (failure,) = report.failures
    assert (failure.asset_key, failure.query_name) == (fct, "NO_NEGATIVE_AMOUNT")
    assert failure.error == "Test failed: 3 failing rows"
    # The column schema reads the column tests the node enabled.
    schema = {s.key: s for s in specs}[stg].metadata["dagster/column_schema"]
    assert not schema.columns[0].constraints.nullable and not schema.columns[0].constraints.unique


def test_a_response_missing_a_field_is_refused_naming_it() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"id": 31, "runType": "refresh"}], "next": None})

    client = CoalesceClient(TOKEN, BASE_URL, request_max_retries=0, transport=httpx.MockTransport(handler))
    with pytest.raises(Exception, match=r"GET /api/v1/runs: data\[0\]\.runStatus: field required"):
        client.list_runs()
