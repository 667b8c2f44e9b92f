"""The local Coalesce simulator over real sockets: a fakesnow server and the simulator as subprocesses,
talked to with plain httpx, checked against Snowflake's tables. Nothing is mocked.

Tests share one world and run in file order; each leaves it as it found it.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from dw_local.coalesce_sim.project import ProjectFileError, load_project
from dw_local.world import LOCAL_COALESCE_ORG_ID as ORG_ID
from dw_local.world import LOCAL_COALESCE_TOKEN, LocalWorld, WorldPorts

pytestmark = pytest.mark.world

FIXTURE_PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "sim_project.yaml"
PASSWORD = "do-not-store-this-password"
ORDERS = [(1, 1, 10.00), (2, 2, 20.50), (3, 3, 5.25), (4, 9, 99.00)]  # customer 9 is unknown
BUILT_BY_JOB_2 = ["STG_CUSTOMERS", "STG_ORDERS", "DIM_CUSTOMER", "FCT_SALES", "V_REGION_TOTALS"]


# ------------------
# Fixtures and helpers
# ------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorld]:
    root = tmp_path_factory.mktemp("coalesce-sim") / "local"
    with LocalWorld(root, project_file=FIXTURE_PROJECT, services=("snowflake", "coalesce")) as lw:
        yield lw


@pytest.fixture(scope="module")
def api(world: LocalWorld) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
    with httpx.Client(base_url=world.coalesce_url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def sf(world: LocalWorld) -> Iterator[Any]:
    """A cursor on the local Snowflake, with the Source table RAW.ORDERS seeded."""
    conn = world.snowflake.connect(database="SIM_PROD")
    cursor = conn.cursor()
    cursor.execute('CREATE SCHEMA IF NOT EXISTS "SIM_PROD"."RAW"')
    cursor.execute(
        'CREATE OR REPLACE TABLE "SIM_PROD"."RAW"."ORDERS" '
        '("ORDER_ID" NUMBER(38,0), "CUSTOMER_ID" NUMBER(38,0), "AMOUNT" NUMBER(12,2))'
    )
    values = ", ".join(f"({o}, {c}, {a})" for o, c, a in ORDERS)
    cursor.execute(f'INSERT INTO "SIM_PROD"."RAW"."ORDERS" VALUES {values}')
    yield cursor
    conn.close()


def scalar(sf: Any, sql: str) -> Any:
    sf.execute(sql)
    return sf.fetchone()[0]


def credentials(**overrides: Any) -> dict[str, Any]:
    return {
        "snowflakeUsername": "TRANSFORM",  # Coalesce's own user: dw-dagster's signs in by key pair only
        "snowflakePassword": PASSWORD,
        "snowflakeWarehouse": "LOCAL_WH",
        "snowflakeRole": "TRANSFORMER",
        "snowflakeAuthType": "Basic",
        **overrides,
    }


def start(api: httpx.Client, **details: Any) -> int:
    body = {"runDetails": {"environmentID": "2", **details}, "userCredentials": credentials()}
    response = api.post("/scheduler/startRun", json=body)
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"runCounter"}
    return response.json()["runCounter"]


def wait(api: httpx.Client, run_id: int, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = api.get("/scheduler/runStatus", params={"runCounter": run_id}).json()["runStatus"]
        if status in ("completed", "failed", "canceled"):
            return api.get(f"/api/v1/runs/{run_id}").json()
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish within {timeout} s")


def results(api: httpx.Client, run_id: int) -> dict[str, dict[str, Any]]:
    response = api.get(f"/api/v1/runs/{run_id}/results")
    assert response.status_code == 200 and set(response.json()) == {"data"}
    return {node["name"]: node for node in response.json()["data"]}


def node_ids(api: httpx.Client) -> dict[str, str]:
    nodes = api.get("/api/v1/environments/2/nodes", params={"limit": 500}).json()["data"]
    return {n["name"]: n["id"] for n in nodes}


def assert_error(response: httpx.Response, status: int, *fragments: str) -> dict[str, str]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"errorString", "errorDetail"}
    assert body["error"]["errorString"].startswith(f"{status}: ")
    text = json.dumps(body)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text}"
    return body["error"]


def follow(api: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of a list endpoint, page after page, with the same orderBy on every page (Coalesce
    requires one with startingFrom)."""
    params.setdefault("orderBy", "id")
    items, cursor = [], None
    for _ in range(1000):
        page = api.get(path, params={**params, **({"startingFrom": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        body = page.json()
        assert set(body) == {"data", "next", "limit"} and body["limit"] == params.get("limit", body["limit"])
        assert len(body["data"]) <= body["limit"]
        items += body["data"]
        cursor = body["next"]
        if cursor is None:
            return items
        # Opaque: not the last item's id.
        assert isinstance(cursor, str) and cursor not in {str(item.get("id")) for item in body["data"]}
    raise AssertionError("the cursor never ended")


ISO_Z = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"


# ------------------
# Auth and reads
# ------------------


def test_every_endpoint_wants_the_token(world: LocalWorld) -> None:
    paths = ["/api/v1/environments", "/api/v1/runs/1", "/scheduler/runStatus?runCounter=1", "/_sim/health"]
    wrong = [{}, {"Authorization": "Bearer not-the-token"}, {"Authorization": LOCAL_COALESCE_TOKEN}]
    for path in paths:
        for headers in wrong:
            response = httpx.get(world.coalesce_url + path, headers=headers)
            error = assert_error(response, 401)
            assert error["errorString"] == "401: Unable to authenticate, please ensure your token is valid."
    response = httpx.post(world.coalesce_url + "/scheduler/startRun", json={})
    assert response.status_code == 401


def test_environments(api: httpx.Client) -> None:
    (env,) = follow(api, "/api/v1/environments", limit=1)
    assert env == {
        "id": "2",
        "name": "PROD",
        "project": "1",
        "createdAt": env["createdAt"],
        "createdBy": {"id": "1", "firstName": "Local", "lastName": "Simulator"},
        "status": env["status"],
    }
    assert env["status"] in ("Waiting", "Refreshing", "Failed Refresh")
    # One environment in full also has its default run-time parameters (none in this project).
    assert api.get("/api/v1/environments/2").json() == {**env, "runTimeParameters": {}}
    assert api.get("/api/v1/environments", params={"project": "7"}).json()["data"] == []
    assert_error(api.get("/api/v1/environments/9"), 404, "Environment 9")
    assert_error(api.get("/api/v1/environments", params={"limit": 0}), 400, "limit")


def test_nodes_are_paged_to_the_end(api: httpx.Client) -> None:
    everything = api.get("/api/v1/environments/2/nodes").json()
    assert everything["next"] is None and everything["limit"] == 100
    summaries = everything["data"]
    assert len(summaries) == 7
    assert [n["id"] for n in summaries] == sorted(n["id"] for n in summaries)
    assert all(set(n) == {"id", "name", "nodeType", "database", "schema", "locationName"} for n in summaries)
    assert follow(api, "/api/v1/environments/2/nodes", limit=2) == summaries
    detailed = follow(api, "/api/v1/environments/2/nodes", limit=3, detail="true")
    assert [n["id"] for n in detailed] == [n["id"] for n in summaries]
    assert detailed == [api.get(f"/api/v1/environments/2/nodes/{n['id']}").json() for n in summaries]
    by_name = follow(api, "/api/v1/environments/2/nodes", limit=2, orderBy="name", orderByDirection="desc")
    assert [n["name"] for n in by_name] == sorted((n["name"] for n in summaries), reverse=True)
    for params in [{"limit": 501}, {"startingFrom": "nope"}, {"orderByDirection": "up"}, {"orderBy": "size"}]:
        assert_error(api.get("/api/v1/environments/2/nodes", params=params), 400, *params)
    assert_error(api.get("/api/v1/environments/9/nodes"), 404)


def test_a_cursor_needs_the_order_it_was_given_for(api: httpx.Client) -> None:
    path = "/api/v1/environments/2/nodes"
    first = api.get(path, params={"limit": 2, "orderBy": "id"}).json()
    cursor = first["next"]
    # https://docs.coalesce.io/docs/api/query-parameters: startingFrom requires orderBy.
    assert_error(api.get(path, params={"limit": 2, "startingFrom": cursor}), 400, "orderBy is required")
    for other in [{"orderBy": "name"}, {"orderBy": "id", "orderByDirection": "desc"}]:
        assert_error(api.get(path, params={"startingFrom": cursor, **other}), 400, "keep the orderBy")
    # The node id the cursor stands for is no cursor, nor is another listing's cursor.
    last = first["data"][-1]["id"]
    assert_error(api.get(path, params={"startingFrom": last, "orderBy": "id"}), 400, "not a cursor")
    by_name = api.get(path, params={"limit": 1, "orderBy": "name"}).json()["next"]
    other = api.get("/api/v1/environments/9/nodes", params={"startingFrom": by_name, "orderBy": "name"})
    assert_error(other, 404, "Environment 9")
    second = api.get(path, params={"limit": 2, "orderBy": "id", "startingFrom": cursor}).json()
    assert second["data"][0]["id"] > last


def test_a_full_node(api: httpx.Client) -> None:
    ids = node_ids(api)
    fct = api.get(f"/api/v1/environments/2/nodes/{ids['FCT_SALES']}").json()
    keys = ("name", "nodeType", "database", "schema", "locationName", "materializationType")
    assert {k: fct[k] for k in keys} == {
        "name": "FCT_SALES",
        "nodeType": "Fact",
        "database": "SIM_PROD",
        "schema": "MART",
        "locationName": "MART",
        "materializationType": "table",
    }
    assert fct["isMultisource"] is False and fct["overrideSQL"] is False and fct["description"]
    (mapping,) = fct["metadata"]["sourceMapping"]
    assert mapping["dependencies"] == [
        {"locationName": "STAGE", "nodeName": "STG_ORDERS"},
        {"locationName": "MART", "nodeName": "DIM_CUSTOMER"},
    ]
    assert mapping["join"]["joinCondition"].startswith("FROM {{ ref('STAGE', 'STG_ORDERS') }} \"STG_ORDERS\"")
    assert set(mapping) == {"name", "aliases", "customSQL", "dependencies", "join", "noLinkRefs"}
    order_id, _, region, _ = fct["metadata"]["columns"]
    assert set(order_id) == {
        "columnID", "name", "dataType", "description", "nullable", "transform", "isBusinessKey",
        "isSurrogateKey", "primaryKey", "uniqueKey", "appliedColumnTests", "sources",
    }  # fmt: skip
    assert order_id["appliedColumnTests"] == {"unique": True, "notNull": True} and order_id["isBusinessKey"]
    # Column lineage points at the upstream node's own column ids.
    dim = api.get(f"/api/v1/environments/2/nodes/{ids['DIM_CUSTOMER']}").json()
    dim_region = next(c for c in dim["metadata"]["columns"] if c["name"] == "REGION")
    assert region["sources"] == [
        {"transform": "", "columnReferences": [{"nodeID": dim["id"], "columnID": dim_region["columnID"]}]}
    ]
    (node_test,) = fct["metadata"]["appliedNodeTests"]
    assert set(node_test) == {"name", "description", "continueOnFailure", "runOrder", "templateString"}
    assert node_test["name"] == "NO_NEGATIVE_AMOUNT"
    assert (node_test["continueOnFailure"], node_test["runOrder"]) == (False, "After")
    assert "{{ ref('MART', 'FCT_SALES') }}" in node_test["templateString"]
    # Column tests: a map of test id to enabled on each column, and the ids the node has enabled.
    assert fct["metadata"]["enabledColumnTestIDs"] == ["notNull", "unique"]
    view = api.get(f"/api/v1/environments/2/nodes/{ids['V_REGION_TOTALS']}").json()
    assert view["materializationType"] == "view"
    assert_error(api.get("/api/v1/environments/2/nodes/no-such-node"), 404, "no-such-node")


def test_jobs_are_found_by_id_and_404_past_the_last(api: httpx.Client) -> None:
    assert api.get("/api/v1/environments/2/jobs/1").json() == {
        "id": "1",
        "name": "customers_nightly",
        "includeSelector": "{name: STG_CALENDAR} OR {name: *CUSTOMER*}",
        "excludeSelector": "",
    }
    assert api.get("/api/v1/environments/2/jobs/2").json()["name"] == "sales_nightly"
    assert_error(api.get("/api/v1/environments/2/jobs/3"), 404, "Job 3")
    assert_error(api.get("/api/v1/environments/9/jobs/1"), 404, "Environment 9")


def test_there_is_no_jobs_collection_unless_turned_on(api: httpx.Client) -> None:
    # No public evidence the real API has it (the Transform MCP server probes /jobs/{id} instead).
    assert_error(api.get("/api/v1/environments/2/jobs"), 404, "no such endpoint")
    assert api.post("/_sim/api", json={"jobsCollection": True}).json() == {"jobsCollection": True}
    try:
        first = api.get("/api/v1/environments/2/jobs", params={"limit": 1, "orderBy": "id"}).json()
        assert set(first) == {"data", "next", "total"} and first["total"] == 2
        assert [j["name"] for j in first["data"]] == ["customers_nightly"] and first["next"] not in (
            "1",
            None,
        )
        params = {"limit": 1, "startingFrom": first["next"]}
        assert_error(api.get("/api/v1/environments/2/jobs", params=params), 400, "orderBy is required")
        second = api.get("/api/v1/environments/2/jobs", params={**params, "orderBy": "id"}).json()
        assert [j["name"] for j in second["data"]] == ["sales_nightly"] and second["next"] is None
        order = {"orderBy": "name", "orderByDirection": "desc"}
        by_name = api.get("/api/v1/environments/2/jobs", params=order)
        assert [j["name"] for j in by_name.json()["data"]] == ["sales_nightly", "customers_nightly"]
        assert_error(api.get("/api/v1/environments/2/jobs", params={"limit": 501}), 400, "limit")
        assert_error(api.get("/api/v1/environments/9/jobs"), 404, "Environment 9")
    finally:
        api.post("/_sim/api", json={"jobsCollection": False})
    assert api.get("/api/v1/environments/2/jobs").status_code == 404


# ------------------
# Runs
# ------------------


def test_a_job_run_builds_what_snowflake_then_holds(api: httpx.Client, sf: Any) -> None:
    run_id = start(api, jobID="2")
    assert api.get("/scheduler/runStatus", params={"runCounter": run_id}).json()["runStatus"] in (
        "waitingToRun",
        "running",
        "completed",
    )
    run = wait(api, run_id)
    assert run["runStatus"] == "completed" and run["runFailureReason"] is None
    assert run["runStartTime"] <= run["runEndTime"]
    for key in ("runStartTime", "runEndTime"):
        assert re.match(ISO_Z, run[key])
    assert run["runDetails"] == {
        "environmentID": "2",
        "jobID": "2",
        "includeNodesSelector": None,
        "excludeNodesSelector": None,
        "parallelism": 16,
        "nodesInRun": 5,
        "canceled": False,
    }
    assert run["userCredentials"] == {
        "snowflakeAccount": "fakesnow",
        "snowflakeAuthType": "Basic",
        "snowflakeUsername": "TRANSFORM",
        "snowflakeRole": "TRANSFORMER",
        "snowflakeWarehouse": "LOCAL_WH",
    }
    assert (run["runType"], run["reRunID"], run["runHistory"]) == ("refresh", None, [])
    assert run["userID"] == "local-user"
    status = api.get("/scheduler/runStatus", params={"runCounter": run_id}).json()
    assert status["runStatus"] == "completed" and status["runType"] == "refresh"
    # The run's page in the app (OpenAPI v6.2's example: https://app.coalescesoftware.io/runs/1).
    assert status["runLink"].endswith(f"/runs/{run_id}") and "/api/" not in status["runLink"]

    built = results(api, run_id)
    # Dependency order, Sources never built.
    assert list(built) == BUILT_BY_JOB_2
    for name, node in built.items():
        assert node["isRunning"] is False and all(q["success"] for q in node["queryResults"])
        assert node["runState"] == "complete"
        for query in node["queryResults"]:
            # A test's result says so (type sqlTest); the queries that build carry no type.
            testing = {"type"} if ": " in query["name"] or query["name"] == "NO_NEGATIVE_AMOUNT" else set()
            assert set(query) == {
                "name", "sql", "status", "success", "isRunning", "startTime", "endTime", "queryID",
                "rowsInserted", "rowsUpdated", "rowsDeleted", "warehouse", "error", *testing,
            }  # fmt: skip
            assert query.get("type") == ("sqlTest" if testing else None)
            assert (query["status"], query["error"], query["warehouse"]) == ("success", None, "LOCAL_WH")
        if name == "V_REGION_TOTALS":
            assert [q["name"] for q in node["queryResults"]] == ["Create View"]
            continue
        insert = next(q for q in node["queryResults"] if q["name"] == "Insert Data")
        schema = "STAGE" if name.startswith("STG_") else "MART"
        assert insert["rowsInserted"] == scalar(sf, f'SELECT COUNT(*) FROM "SIM_PROD"."{schema}"."{name}"')
    assert [q["name"] for q in built["FCT_SALES"]["queryResults"]] == [
        "Create Table", "Insert Data", "ORDER_ID: Unique", "ORDER_ID: Null", "NO_NEGATIVE_AMOUNT",
    ]  # fmt: skip
    # The inner join to DIM_CUSTOMER drops the order of unknown customer 9.
    assert built["FCT_SALES"]["queryResults"][1]["rowsInserted"] == 3
    total = scalar(sf, 'SELECT SUM("TOTAL_AMOUNT") FROM "SIM_PROD"."MART"."V_REGION_TOTALS"')
    assert total == pytest.approx(35.75)
    assert PASSWORD not in api.get(f"/api/v1/runs/{run_id}").text
    assert PASSWORD not in api.get("/api/v1/runs", params={"detail": "true"}).text


def test_a_failing_node_test_fails_the_run_and_a_rerun_resumes_there(api: httpx.Client, sf: Any) -> None:
    sf.execute('INSERT INTO "SIM_PROD"."RAW"."ORDERS" VALUES (5, 1, -7.00)')
    try:
        failed = wait(api, start(api, jobID="2"))
    finally:
        sf.execute('DELETE FROM "SIM_PROD"."RAW"."ORDERS" WHERE "ORDER_ID" = 5')
    assert failed["runStatus"] == "failed"
    assert failed["runFailureReason"] == "Node MART.FCT_SALES failed: Test failed: 1 failing row"
    built = results(api, failed["id"])
    # The failed node's downstream view is not built; the other nodes are.
    assert list(built) == BUILT_BY_JOB_2[:-1]
    test = next(q for q in built["FCT_SALES"]["queryResults"] if q["name"] == "NO_NEGATIVE_AMOUNT")
    assert (test["success"], test["status"]) == (False, "failed")
    assert test["error"] == {
        "errorString": "Test failed: 1 failing row",
        "errorDetail": "1 failing row: Sales are never negative.",
    }
    assert '"SIM_PROD"."MART"."FCT_SALES"' in test["sql"]
    assert api.get("/api/v1/environments/2").json()["status"] == "Failed Refresh"

    # The retry starts from FCT_SALES, which reads the already built STG_ORDERS: fix the row there.
    sf.execute('DELETE FROM "SIM_PROD"."STAGE"."STG_ORDERS" WHERE "AMOUNT" < 0')
    body = {"runDetails": {"runID": str(failed["id"])}, "userCredentials": credentials()}
    response = api.post("/scheduler/rerun", json=body)
    assert response.status_code == 200, response.text
    rerun = wait(api, response.json()["runCounter"])
    assert rerun["runStatus"] == "completed"
    assert (rerun["reRunID"], rerun["runHistory"]) == (failed["id"], [failed["id"]])
    assert rerun["runDetails"]["jobID"] == "2" and rerun["runDetails"]["nodesInRun"] == 2
    assert list(results(api, rerun["id"])) == ["FCT_SALES", "V_REGION_TOTALS"]
    assert api.get("/api/v1/environments/2").json()["status"] == "Waiting"


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        ("{name: STG_*}", None, ["STG_CALENDAR", "STG_CUSTOMERS", "STG_ORDERS"]),
        ("{location: MART nodeType: Fact}", None, ["FCT_SALES"]),
        ("+{name: FCT_SALES}", None, ["STG_CUSTOMERS", "STG_ORDERS", "DIM_CUSTOMER", "FCT_SALES"]),
        ("{name: DIM_CUSTOMER}+", None, ["DIM_CUSTOMER", "FCT_SALES", "V_REGION_TOTALS"]),
        ("{name: STG_CALENDAR} OR {nodeType: View}", None, ["STG_CALENDAR", "V_REGION_TOTALS"]),
        ("{location: MART}", "{nodeType: View}", ["DIM_CUSTOMER", "FCT_SALES"]),
        # No include selector: the whole environment, less the excluded nodes.
        (None, "{location: MART} OR {name: STG_C*}", ["STG_ORDERS"]),
    ],
)
def test_selectors_choose_what_a_run_builds(
    api: httpx.Client, sf: Any, include: str | None, exclude: str | None, expected: list[str]
) -> None:
    details = {k: v for k, v in (("includeNodesSelector", include), ("excludeNodesSelector", exclude)) if v}
    run = wait(api, start(api, **details))
    assert run["runStatus"] == "completed", run["runFailureReason"]
    assert run["runDetails"]["includeNodesSelector"] == include
    assert run["runDetails"]["excludeNodesSelector"] == exclude
    assert run["runDetails"]["nodesInRun"] == len(expected)
    assert list(results(api, run["id"])) == expected


@pytest.mark.parametrize(
    ("run_details", "user_credentials", "status", "fragments"),
    [
        ({"includeNodesSelector": "{name: X"}, {}, 400, ["runDetails.includeNodesSelector", "position 8"]),
        ({"excludeNodesSelector": "{colour: red}"}, {}, 400, ["runDetails.excludeNodesSelector", "'colour'"]),
        ({"includeNodesSelector": "{name: NOTHING_*}"}, {}, 400, ["selects no node to build"]),
        ({"includeNodesSelector": "{nodeType: Source}"}, {}, 400, ["selects no node to build"]),
        ({"jobID": "1", "includeNodesSelector": "{name: X}"}, {}, 400, ["not both"]),
        ({"jobID": "7"}, {}, 404, ["Job 7", "runDetails.jobID"]),
        ({"jobID": 1}, {}, 400, ["runDetails.jobID", "valid string"]),
        ({"environmentID": 2}, {}, 400, ["runDetails.environmentID", "valid string"]),
        ({"environmentID": "9"}, {}, 404, ["Environment 9", "runDetails.environmentID"]),
        ({"includeSelector": "{name: X}"}, {}, 400, ["runDetails.includeSelector: unknown field"]),
        ({}, {"snowflakePassword": None}, 400, ["userCredentials", "Basic needs snowflakePassword"]),
        ({}, {"snowflakeAuthType": "Magic"}, 400, ["userCredentials.snowflakeAuthType"]),
        ({}, {"snowflakeUsername": None}, 400, ["userCredentials.snowflakeUsername"]),
    ],
)
def test_a_bad_start_is_refused_naming_the_field(
    api: httpx.Client,
    run_details: dict[str, Any],
    user_credentials: dict[str, Any],
    status: int,
    fragments: list[str],
) -> None:
    creds = {k: v for k, v in credentials(**user_credentials).items() if v is not None}
    body = {"runDetails": {"environmentID": "2", **run_details}, "userCredentials": creds}
    error = assert_error(api.post("/scheduler/startRun", json=body), status, *fragments)
    assert PASSWORD not in json.dumps(error)


def test_runs_are_listed_filtered_and_paged_to_the_end(api: httpx.Client) -> None:
    wait(api, start(api, jobID="1"))
    everything = api.get("/api/v1/runs", params={"limit": 1000}).json()["data"]
    assert len(everything) >= 10
    ids = [r["id"] for r in everything]
    assert ids == sorted(ids, reverse=True) and ids[-1] == 1
    summary = {"id", "runType", "runStatus", "runStartTime", "runEndTime", "environmentID", "reRunID"}
    assert all(set(r) == summary | {"runFailureReason"} for r in everything)
    assert follow(api, "/api/v1/runs", limit=3) == everything
    assert [r["id"] for r in follow(api, "/api/v1/runs", limit=4, orderByDirection="asc")] == ids[::-1]
    assert [r["id"] for r in follow(api, "/api/v1/runs", limit=2, startingFrom=str(ids[2]))] == ids[3:]
    # A run id is a documented startingFrom for runs, but only with orderBy.
    assert_error(api.get("/api/v1/runs", params={"startingFrom": str(ids[2])}), 400, "orderBy is required")
    by_start = follow(api, "/api/v1/runs", limit=2, orderBy="runStartTime", orderByDirection="asc")
    assert [r["runStartTime"] for r in by_start] == sorted(r["runStartTime"] for r in everything)
    middle = by_start[len(by_start) // 2]["runStartTime"]
    ascending = {"orderBy": "runStartTime", "orderByDirection": "asc"}
    later = api.get("/api/v1/runs", params={**ascending, "startingFrom": middle}).json()["data"]
    assert_error(api.get("/api/v1/runs", params={"startingFrom": middle}), 400, "orderBy is required")
    assert later and all(r["runStartTime"] > middle for r in later)
    failed = follow(api, "/api/v1/runs", limit=1, runStatus="failed")
    assert failed and all(r["runStatus"] == "failed" for r in failed)
    assert follow(api, "/api/v1/runs", runType="refresh", environmentID="2", limit=5) == [
        r for r in everything if r["runType"] == "refresh"
    ]
    assert follow(api, "/api/v1/runs", environmentID="9") == []
    cursor = api.get("/api/v1/runs", params={"limit": 1, "orderBy": "id"}).json()["next"]
    nodes = api.get("/api/v1/environments/2/nodes", params={"startingFrom": cursor, "orderBy": "id"})
    assert_error(nodes, 400, "another listing")
    detailed = api.get("/api/v1/runs", params={"detail": "true", "limit": 2}).json()["data"]
    assert detailed == [api.get(f"/api/v1/runs/{r['id']}").json() for r in detailed]
    for params, field in [
        ({"limit": 1001}, "limit"),
        ({"orderBy": "name"}, "orderBy"),
        ({"runStatus": "cancelled"}, "runStatus"),
        ({"runType": "dev"}, "runType"),
        ({"startingFrom": "yesterday", "orderBy": "id"}, "startingFrom"),
        ({"startingFrom": "yesterday", "orderBy": "runEndTime"}, "startingFrom"),
    ]:
        assert_error(api.get("/api/v1/runs", params=params), 400, field)
    for path in ["/api/v1/runs/999999", "/api/v1/runs/abc", "/api/v1/runs/999999/results"]:
        assert_error(api.get(path), 404)
    assert_error(api.get("/scheduler/runStatus", params={"runCounter": 999999}), 404, "Run 999999")
    assert_error(api.get("/scheduler/runStatus"), 400, "runCounter")
    assert_error(api.get("/api/v1/nothing-here"), 404, "no such endpoint")


def test_a_slow_run_spans_many_polls_and_can_be_canceled(api: httpx.Client) -> None:
    assert api.post("/_sim/warehouse", json={"queryDelaySeconds": 0.1}).status_code == 200
    try:
        running = start(api, jobID="2")
        waiting = start(api, jobID="1")
        seen: list[tuple[str, int]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len({count for _, count in seen}) < 3:
            status = api.get("/scheduler/runStatus", params={"runCounter": running}).json()["runStatus"]
            queries = sum(len(n["queryResults"]) for n in results(api, running).values())
            seen.append((status, queries))
            time.sleep(0.05)
        assert {status for status, _ in seen} <= {"waitingToRun", "running"}, seen
        assert seen[-1][0] == "running", seen
        assert api.get("/api/v1/environments/2").json()["status"] == "Refreshing"
        in_flight = [q for n in results(api, running).values() for q in n["queryResults"] if q["isRunning"]]
        assert len(in_flight) <= 1
        assert all(q["status"] == "running" and q["endTime"] is None for q in in_flight)
        # A queued run is canceled before it starts; the running one at its next query.
        for run_id in (waiting, running):
            response = api.post(
                "/scheduler/cancelRun", json={"runID": run_id, "environmentID": "2", "orgID": ORG_ID}
            )
            assert response.status_code == 204 and response.content == b""
    finally:
        api.post("/_sim/warehouse", json={"queryDelaySeconds": 0})
    canceled = wait(api, running)
    assert (canceled["runStatus"], canceled["runDetails"]["canceled"]) == ("canceled", True)
    never_started = wait(api, waiting)
    assert (never_started["runStatus"], never_started["runStartTime"]) == ("canceled", None)
    assert results(api, waiting) == {}
    for body, status, fragment in [
        ({"runID": running, "environmentID": "2", "orgID": ORG_ID}, 400, "already canceled"),
        ({"runID": running, "environmentID": "3", "orgID": ORG_ID}, 400, "environmentID"),
        ({"runID": 999999, "environmentID": "2", "orgID": ORG_ID}, 404, "Run 999999"),
        ({"runID": "x", "environmentID": "2", "orgID": ORG_ID}, 400, "runID"),
        # Coalesce wants the organization: missing or another one is refused.
        ({"runID": running, "environmentID": "2"}, 400, "orgID"),
        ({"runID": running, "environmentID": "2", "orgID": "999"}, 403, "orgID"),
    ]:
        assert_error(api.post("/scheduler/cancelRun", json=body), status, fragment)


# ------------------
# Faults and the clock
# ------------------


def test_injected_rate_limits_and_outages(api: httpx.Client) -> None:
    fault = {"status": 429, "count": 2, "retryAfter": 1, "pathPrefix": "/api/v1"}
    response = api.post("/_sim/faults", json=fault)
    assert response.status_code == 200 and response.json()["http"]["remaining"] == 2
    # Control endpoints and other prefixes are never faulted.
    assert api.get("/_sim/health").status_code == 200
    assert api.get("/scheduler/runStatus", params={"runCounter": 1}).status_code == 200
    for _ in range(2):
        limited = api.get("/api/v1/environments")
        assert_error(limited, 429, "429: Too many requests")
        assert limited.headers["Retry-After"] == "1"
    assert api.get("/api/v1/environments").status_code == 200

    api.post("/_sim/faults", json={"status": 503, "count": 1, "pathPrefix": "/scheduler"})
    body = {"runDetails": {"environmentID": "2", "jobID": "1"}, "userCredentials": credentials()}
    outage = api.post("/scheduler/startRun", json=body)
    assert_error(outage, 503)
    assert "Retry-After" not in outage.headers
    wait(api, api.post("/scheduler/startRun", json=body).json()["runCounter"])

    api.post("/_sim/faults", json={"status": 429, "count": 1})
    assert api.get("/api/v1/runs").headers["Retry-After"] == "1"
    api.post("/_sim/faults", json={"status": 503, "count": 5})
    assert api.delete("/_sim/faults").json() == {"http": None, "queryDelaySeconds": 0.0, "nodePages": None}
    assert api.get("/api/v1/environments").status_code == 200
    assert_error(api.post("/_sim/faults", json={"status": 418, "count": 1}), 400, "status")


def test_detailed_node_pages_can_be_slow_and_fail_by_size(api: httpx.Client) -> None:
    path, detail = "/api/v1/environments/2/nodes", {"detail": "true", "orderBy": "id"}
    fault = {"secondsPerNode": 0.1, "failAbove": 3, "count": 3}
    assert api.post("/_sim/nodepages", json=fault).json()["nodePages"]["failAbove"] == 3
    try:
        assert_error(api.get(path, params={**detail, "limit": 5}), 504, "504: Gateway timeout")
        started = time.monotonic()
        small = api.get(path, params={**detail, "limit": 2})
        assert small.status_code == 200 and len(small.json()["data"]) == 2
        assert time.monotonic() - started >= 0.2  # 0.1 s a node
        # Summaries are never slowed, nor counted.
        assert api.get(path, params={"limit": 5}).status_code == 200
        assert api.get(path, params={**detail, "limit": 2}).status_code == 200
        # Three detailed pages met it: the next is whole again.
        assert api.get(path, params={**detail, "limit": 5}).status_code == 200
    finally:
        api.delete("/_sim/faults")
    assert_error(api.post("/_sim/nodepages", json={"secondsPerNode": -1}), 400, "secondsPerNode")


def test_the_clock_sets_run_times(api: httpx.Client) -> None:
    response = api.post("/_sim/clock", json={"now": "2024-05-14T02:00:00-05:00"})
    assert response.status_code == 200 and response.json()["now"].startswith("2024-05-14T07:00:0")
    run = wait(api, start(api, jobID="1"))
    assert run["runStartTime"].startswith("2024-05-14T07:00:") and run["runEndTime"].endswith("Z")
    assert api.get("/_sim/clock").json()["now"] >= run["runEndTime"]
    assert_error(api.post("/_sim/clock", json={"now": "tonight"}), 400, "now")
    assert_error(api.post("/_sim/clock", json={"when": "2024-05-14"}), 400, "now: field required")


# ------------------
# Workspace edits and deploys
# ------------------


def test_a_deployed_node_edit_changes_what_the_next_run_builds(api: httpx.Client, sf: Any) -> None:
    # The stage tables FCT_SALES reads, as the whole job builds them: a run canceled part-way by an earlier
    # test may have left one replaced and not yet filled, depending on where the cancel landed.
    assert wait(api, start(api, jobID="2"))["runStatus"] == "completed"
    ids = node_ids(api)
    path = f"/_sim/workspace/nodes/{ids['FCT_SALES']}"
    original = api.get(path).json()
    assert original == api.get(f"/api/v1/environments/2/nodes/{ids['FCT_SALES']}").json()
    amount = next(c for c in original["metadata"]["columns"] if c["name"] == "AMOUNT")
    edited = json.loads(json.dumps(original))
    edited["metadata"]["columns"].append(
        {
            "name": "AMOUNT_CENTS",
            "dataType": "NUMBER(14,0)",
            "transform": '"STG_ORDERS"."AMOUNT" * 100',
            "appliedColumnTests": {"notNull": True},
            "sources": [{"transform": "", "columnReferences": amount["sources"][0]["columnReferences"]}],
        }
    )
    join = edited["metadata"]["sourceMapping"][0]["join"]
    join["joinCondition"] = join["joinCondition"].replace("INNER JOIN", "LEFT JOIN")
    response = api.put(path, json=edited)
    assert response.status_code == 200, response.text
    pending = response.json()
    assert pending["metadata"]["columns"][-1]["name"] == "AMOUNT_CENTS" and api.get(path).json() == pending
    # Not deployed yet: the environment still builds the old node.
    assert "AMOUNT_CENTS" not in api.get(f"/api/v1/environments/2/nodes/{ids['FCT_SALES']}").text
    wait(api, start(api, includeNodesSelector="{name: FCT_SALES}"))
    sf.execute('SELECT * FROM "SIM_PROD"."MART"."FCT_SALES" LIMIT 1')
    assert [d[0] for d in sf.description] == ["ORDER_ID", "CUSTOMER_ID", "REGION", "AMOUNT"]

    deployed = api.post("/_sim/deploy", json={"environmentID": "2"})
    assert deployed.status_code == 200 and deployed.json()["deployedNodes"] == [ids["FCT_SALES"]]
    deploy_run = api.get(f"/api/v1/runs/{deployed.json()['runCounter']}").json()
    assert (deploy_run["runType"], deploy_run["runStatus"], deploy_run["runDetails"]["nodesInRun"]) == (
        "deploy",
        "completed",
        1,
    )
    assert api.get(f"/api/v1/environments/2/nodes/{ids['FCT_SALES']}").json() == pending
    run = wait(api, start(api, includeNodesSelector="{name: FCT_SALES}"))
    assert run["runStatus"] == "completed"
    assert "AMOUNT_CENTS: Null" in json.dumps(results(api, run["id"]))
    # LEFT JOIN now keeps the order of unknown customer 9.
    assert scalar(sf, 'SELECT COUNT(*) FROM "SIM_PROD"."MART"."FCT_SALES"') == 4
    assert scalar(sf, 'SELECT SUM("AMOUNT_CENTS") FROM "SIM_PROD"."MART"."FCT_SALES"') == 13475

    # Put the node back for the tests that follow.
    assert api.put(path, json=original).status_code == 200
    assert api.post("/_sim/deploy", json={"environmentID": "2"}).json()["deployedNodes"] == [ids["FCT_SALES"]]
    assert api.get(f"/api/v1/environments/2/nodes/{ids['FCT_SALES']}").json() == original


def test_a_bad_node_edit_is_refused_naming_the_field(api: httpx.Client) -> None:
    ids = node_ids(api)
    path = f"/_sim/workspace/nodes/{ids['FCT_SALES']}"
    original = api.get(path).json()

    def edit(change: Any) -> httpx.Response:
        node = json.loads(json.dumps(original))
        change(node)
        return api.put(path, json=node)

    def join(node: dict) -> dict:
        return node["metadata"]["sourceMapping"][0]["join"]

    cases = [
        (lambda n: join(n).update(joinCondition="FROM {{ ref('STAGE', 'NOPE') }}"),
         ["metadata.sourceMapping[0].join.joinCondition", "ref('STAGE', 'NOPE') names no node"]),
        (lambda n: n["metadata"]["columns"][0]["sources"][0]["columnReferences"][0].update(columnID="x"),
         ["metadata.columns[0].sources[0].columnReferences[0]"]),
        (lambda n: n["metadata"]["columns"][1].pop("dataType"), ["metadata.columns[1].dataType"]),
        (lambda n: n["metadata"]["columns"][0]["appliedColumnTests"].update(accepted=True),
         ["metadata.columns[0].appliedColumnTests", "accepted"]),
        (lambda n: n.update(name="RENAMED"), ["name:", "in place"]),
        (lambda n: join(n).update(joinCondition="FROM {{ ref('MART', 'V_REGION_TOTALS') }}"),
         ["dependency cycle"]),
        (lambda n: n["metadata"]["columns"].pop(2),
         ["breaks node MART.V_REGION_TOTALS", "MART.FCT_SALES.REGION"]),
    ]  # fmt: skip
    for change, fragments in cases:
        assert_error(edit(change), 400, *fragments)
    assert api.get(path).json() == original
    assert_error(api.put("/_sim/workspace/nodes/nope", json=original), 404)
    assert_error(api.post("/_sim/deploy", json={"environmentID": "9"}), 404)


# ------------------
# Durability and the project file
# ------------------


def test_runs_survive_a_restart(api: httpx.Client, world: LocalWorld) -> None:
    api.post("/_sim/warehouse", json={"queryDelaySeconds": 0.2})
    interrupted = start(api, jobID="2")
    while api.get(f"/api/v1/runs/{interrupted}").json()["runStatus"] != "running":
        time.sleep(0.05)
    before = api.get("/api/v1/runs", params={"limit": 1000, "detail": "true"}).json()["data"]
    finished = [r for r in before if r["runStatus"] in ("completed", "failed", "canceled")]
    results_before = {r["id"]: api.get(f"/api/v1/runs/{r['id']}/results").json() for r in finished[:5]}
    clock_before = api.get("/_sim/clock").json()["now"]

    world.restart("coalesce")  # SIGKILL, as a crash would

    after = api.get("/api/v1/runs", params={"limit": 1000, "detail": "true"}).json()["data"]
    assert [r for r in after if r["id"] != interrupted] == [r for r in before if r["id"] != interrupted]
    crashed = next(r for r in after if r["id"] == interrupted)
    assert crashed["runStatus"] == "failed" and "Interrupted" in crashed["runFailureReason"]
    for run_id, body in results_before.items():
        assert api.get(f"/api/v1/runs/{run_id}/results").json() == body
    # The clock carries on from where it was set, and new runs continue the numbering.
    assert api.get("/_sim/clock").json()["now"] >= clock_before
    assert api.get("/_sim/faults").json()["queryDelaySeconds"] == 0
    assert start(api, jobID="1") == max(r["id"] for r in after) + 1


def test_a_broken_project_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    good = yaml.safe_load(FIXTURE_PROJECT.read_text())

    def broken(change: Any) -> Path:
        data = json.loads(json.dumps(good))
        change(data)
        path = tmp_path / f"project-{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def node(data: dict, name: str) -> dict:
        return next(n for n in data["nodes"] if n["name"] == name)

    cases = [
        (lambda d: node(d, "STG_ORDERS")["columns"][2].update(sources=["RAW.ORDERS.AMOUNTS"]),
         "node STAGE.STG_ORDERS: columns[2].sources[0]: RAW.ORDERS.AMOUNTS names no column"),
        (lambda d: node(d, "STG_ORDERS")["columns"][0].update(dataTyp="X"),
         "node STAGE.STG_ORDERS: columns[0].dataTyp: Extra inputs"),
        (lambda d: node(d, "STG_ORDERS")["columns"][0].update(sources=["ORDERS.ORDER_ID"]),
         "columns[0].sources[0]: expected LOCATION.NODE.COLUMN"),
        (lambda d: node(d, "FCT_SALES").update(join="FROM {{ ref('STAGE', 'STG_ORDER') }}"),
         "node MART.FCT_SALES: join: ref('STAGE', 'STG_ORDER') names no node"),
        (lambda d: node(d, "FCT_SALES")["tests"][0].update(sql="SELECT {{ ref('MART') }}"),
         "node MART.FCT_SALES: tests[0].sql: malformed ref"),
        (lambda d: node(d, "DIM_CUSTOMER").update(locationName="BI"),
         "node BI.DIM_CUSTOMER: locationName: 'BI' has no storage mapping"),
        (lambda d: d["jobs"][1].update(includeSelector="{location: STAGE"),
         "job 2: includeSelector: expected '}'"),
        (lambda d: d["environments"][0].pop("storageMappings"),
         "environment 2: storageMappings: field required"),
        (lambda d: node(d, "STG_CUSTOMERS").update(join="FROM {{ ref('MART', 'DIM_CUSTOMER') }}"),
         "node STAGE.STG_CUSTOMERS: join: dependency cycle: STAGE.STG_CUSTOMERS -> MART.DIM_CUSTOMER -> "),
    ]  # fmt: skip
    for change, message in cases:
        path = broken(change)
        with pytest.raises(ProjectFileError) as info:
            load_project(path)
        assert str(info.value).startswith(f"{path}: ") and message in str(info.value), str(info.value)
    not_yaml = tmp_path / "not.yaml"
    not_yaml.write_text("nodes: [\n")
    with pytest.raises(ProjectFileError, match=r"line 2, column 1: not valid YAML"):
        load_project(not_yaml)

    # The command line says the same and exits without serving.
    path = broken(cases[0][0])
    process = subprocess.run(
        [
            sys.executable, "-m", "dw_local.coalesce_sim", "--port", "1", "--project", str(path),
            "--data-dir", str(tmp_path / "data"), "--snowflake-port", "1", "--token", "t",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert process.returncode == 2
    assert f"{path}: node STAGE.STG_ORDERS: columns[2].sources[0]" in process.stderr
    assert "Traceback" not in process.stderr


def test_the_scheduler_starts_jobs_on_the_simulator_clock(tmp_path: Path, world: LocalWorld) -> None:
    project = yaml.safe_load(FIXTURE_PROJECT.read_text())
    nightly = {"jobID": "1", "environmentID": "2", "cron": "0 2 * * *", "timezone": "America/Chicago"}
    project["schedules"] = [nightly]
    project_file = tmp_path / "scheduled.yaml"
    project_file.write_text(yaml.safe_dump(project, sort_keys=False))
    ports = WorldPorts(snowflake=world.ports.snowflake)
    with LocalWorld(tmp_path / "w", ports, project_file, scheduler=True, services=("coalesce",)) as scheduled:
        headers = {"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
        with httpx.Client(base_url=scheduled.coalesce_url, headers=headers, timeout=30) as client:
            assert client.get("/_sim/health").json()["scheduler"] is True
            # A jump across 02:00 is not time passing; setting the clock to 02:00 exactly fires.
            client.post("/_sim/clock", json={"now": "2024-05-15T03:00:00-05:00"})
            client.post("/_sim/clock", json={"now": "2024-05-14T01:59:59.5-05:00"})
            deadline = time.monotonic() + 10
            while not (runs := client.get("/api/v1/runs").json()["data"]) and time.monotonic() < deadline:
                time.sleep(0.1)
            (run,) = runs
            run = wait(client, run["id"])
            assert run["runStatus"] == "completed" and run["runStartTime"].startswith("2024-05-14T07:00:0")
            assert run["runDetails"]["jobID"] == "1" and run["userID"] == "coalesce-scheduler"
            client.post("/_sim/clock", json={"now": "2024-05-15T02:00:00-05:00"})
            deadline = time.monotonic() + 10
            while len(client.get("/api/v1/runs").json()["data"]) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(client.get("/api/v1/runs").json()["data"]) == 2


class _RefusingSnowflake(http.server.BaseHTTPRequestHandler):
    """A Snowflake that listens but does not take the time (its clock endpoint answers 503)."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_the_snowflake_takes_the_time_before_the_simulator_moves(tmp_path: Path) -> None:
    # Once the simulator's clock moves, its Scheduler may start the night's run; a statement stamped before the
    # Snowflake's clock moved was counted on the night before. So the Snowflake takes it first, and a Snowflake
    # that does not leaves the simulator's clock where it was, with an error naming it.
    refusing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingSnowflake)
    threading.Thread(target=refusing.serve_forever, daemon=True).start()
    try:
        ports = WorldPorts(snowflake=refusing.server_address[1])
        with LocalWorld(tmp_path / "w", ports, FIXTURE_PROJECT, services=("coalesce",)) as lw:
            headers = {"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
            with httpx.Client(base_url=lw.coalesce_url, headers=headers, timeout=60) as client:
                before = client.get("/_sim/clock").json()["now"]
                refused = assert_error(
                    client.post("/_sim/clock", json={"now": "2024-05-15T02:00:00-05:00"}), 502
                )
                assert (
                    f"the local Snowflake at 127.0.0.1:{ports.snowflake} did not take the time"
                    in refused["errorDetail"]
                )
                after = client.get("/_sim/clock").json()["now"]
                assert before[:4] == after[:4] != "2024", (before, after)
    finally:
        refusing.shutdown()
        refusing.server_close()
