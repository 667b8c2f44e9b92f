"""The Coalesce client over real sockets: against the local Coalesce simulator (backed by the local
Snowflake), and against a tiny canned HTTP server for the answers the simulator never gives.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from dw_dagster.coalesce import (
    CoalesceAPIError,
    CoalesceClient,
    CoalesceConnectionError,
    CoalesceResponseError,
    CoalesceRunStatus,
    CoalesceRunTimeoutError,
    CoalesceUserCredentials,
    CoalesceWorkspace,
    CoalesceWorkspaceData,
)
from dw_dagster.coalesce.run_models import CoalesceRunType
from dw_dagster.coalesce.workspace_models import CoalesceNode
from dw_local.world import LOCAL_COALESCE_ORG_ID, LocalWorld, free_port, sim_control
from dw_local.world import LOCAL_COALESCE_TOKEN as TOKEN

NOT_FOUND = {"error": {"errorString": "404: not found"}}
FIXTURE_PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "sim_project.yaml"


# ------------------
# A canned HTTP server
# ------------------


@dataclass
class Canned:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class CannedServer:
    """A real HTTP server on a loopback port that answers each path from a script, in order, and
    records what it was sent.
    """

    def __init__(self, script: dict[str, list[Canned]], port: int = 0):
        self.script = {path: list(answers) for path, answers in script.items()}
        self.received: list[tuple[str, str, dict[str, str], bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.received.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
                answers = server.script.get(self.path.split("?")[0]) or [Canned(404, NOT_FOUND)]
                canned = answers.pop(0) if len(answers) > 1 else answers[0]
                time.sleep(canned.delay)
                body = canned.body if isinstance(canned.body, bytes | str) else json.dumps(canned.body)
                payload = body.encode() if isinstance(body, str) else body
                try:
                    self.send_response(canned.status)
                    for key, value in canned.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # The client gave up waiting, as a timeout test wants.

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> CannedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def canned_client(server: CannedServer, **kwargs: Any) -> CoalesceClient:
    return CoalesceClient(api_token=TOKEN, base_url=server.url, request_retry_delay=0.01, **kwargs)


def credentials() -> CoalesceUserCredentials:
    return CoalesceUserCredentials(
        snowflake_username="TRANSFORM",  # Coalesce's own user: dw-dagster's signs in by key pair only
        snowflake_password="local-snowflake-secret",
        snowflake_warehouse="LOCAL_WH",
        snowflake_role="DW_DAGSTER",
    )


# ------------------
# Against canned answers
# ------------------


def test_malformed_response_is_rejected_naming_endpoint_and_field() -> None:
    run = {"id": "seven", "runType": "refresh", "runStatus": "completed", "runDetails": {"parallelism": "x"}}
    script = {"/api/v1/runs/7": [Canned(body=run)], "/api/v1/runs/8": [Canned(body="<html>ok</html>")]}
    with CannedServer(script) as server:
        client = canned_client(server)
        with pytest.raises(CoalesceResponseError) as info:
            client.get_run(7)
        assert info.value.endpoint == "GET /api/v1/runs/7"
        assert [p.split(":")[0] for p in info.value.problems] == ["id", "runDetails.parallelism"]
        assert "Input should be a valid integer" in str(info.value)
        with pytest.raises(CoalesceResponseError, match=r"runs/8: <body>: expected JSON, got '<html>"):
            client.get_run(8)


def test_a_run_start_is_not_repeated_when_the_server_may_have_acted() -> None:
    # A 502 can come back after the run started: repeating startRun could build everything twice.
    with CannedServer({"/scheduler/startRun": [Canned(502, "Bad Gateway")]}) as server:
        with pytest.raises(CoalesceAPIError) as info:
            canned_client(server).start_run("2", job_id=1, user_credentials=credentials())
        assert info.value.status == 502 and info.value.endpoint == "POST /scheduler/startRun"
        assert info.value.error_string == "Bad Gateway"
        assert len(server.received) == 1


def test_a_run_start_is_repeated_when_the_server_surely_did_not_act() -> None:
    busy = Canned(503, {"error": {"errorString": "busy"}})
    with CannedServer({"/scheduler/startRun": [busy, Canned(body={"runCounter": 12})]}) as server:
        assert canned_client(server).start_run("2", job_id=1, user_credentials=credentials()) == 12
    # Both attempts carried the same body: ids as strings, the secret only on the wire.
    bodies = [json.loads(body) for _, _, _, body in server.received]
    assert bodies[0] == bodies[1]
    assert bodies[0]["runDetails"] == {"environmentID": "2", "jobID": "1", "parallelism": 16}
    assert bodies[0]["userCredentials"]["snowflakePassword"] == "local-snowflake-secret"
    assert server.received[0][2]["Authorization"] == f"Bearer {TOKEN}"


def test_a_read_timeout_is_retried_for_a_read() -> None:
    prod = {"id": "2", "name": "PROD"}
    script = {
        "/api/v1/environments/2": [Canned(body=prod, delay=0.6), Canned(body=prod)],
        "/api/v1/environments/9": [Canned(body=prod, delay=0.6)],
    }
    with CannedServer(script) as server:
        assert canned_client(server, request_timeout=0.2).get_environment("2").name == "PROD"
        assert len(server.received) == 2
        with pytest.raises(CoalesceConnectionError) as info:
            canned_client(server, request_timeout=0.2, request_max_retries=1).get_environment("9")
    assert str(info.value).startswith("Coalesce GET /api/v1/environments/9 failed: ReadTimeout")
    assert info.value.retries == 1


def test_an_error_page_that_is_not_coalesce_json_is_still_reported() -> None:
    with CannedServer({"/api/v1/environments": [Canned(403, "<h1>Forbidden by proxy</h1>")]}) as server:
        with pytest.raises(CoalesceAPIError, match=r"GET /api/v1/environments returned 403: <h1>Forbidden"):
            canned_client(server).list_environments()


def test_a_cursor_that_does_not_advance_is_refused() -> None:
    page = {"data": [{"id": "2", "name": "PROD"}], "next": "2", "limit": 1}
    with CannedServer({"/api/v1/environments": [Canned(body=page)]}) as server:
        with pytest.raises(CoalesceResponseError, match="the cursor '2' did not advance"):
            canned_client(server).list_environments()
        assert len(server.received) == 2


def test_an_echoed_token_is_scrubbed_from_errors() -> None:
    body = {"error": {"errorString": f"401: token {TOKEN} is invalid", "errorDetail": f"Bearer {TOKEN}"}}
    with CannedServer({"/api/v1/environments": [Canned(401, body)]}) as server:
        with pytest.raises(CoalesceAPIError) as info:
            canned_client(server).list_environments()
    assert TOKEN not in str(info.value) and TOKEN not in repr(info.value)
    assert info.value.error_string == "401: token *** is invalid"


# ------------------
# Connection failures
# ------------------


def test_a_closed_port_is_retried_then_reported() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = CoalesceClient(api_token=TOKEN, base_url=url, request_max_retries=2, request_retry_delay=0.1)
    started = time.monotonic()
    with pytest.raises(CoalesceConnectionError) as info:
        client.list_environments()
    # The backoff between the 2 retries: 0.1 s then 0.2 s.
    assert time.monotonic() - started >= 0.3
    assert info.value.retries == 2
    assert info.value.endpoint == "GET /api/v1/environments"
    assert str(info.value).startswith(f"Coalesce GET /api/v1/environments failed: cannot connect to {url}")
    assert str(info.value).endswith("gave up after 2 retries")
    assert TOKEN not in str(info.value)
    # A request that never connected never reached Coalesce: even a run start is retried.
    with pytest.raises(CoalesceConnectionError) as info:
        client.start_run("2", job_id=1, user_credentials=credentials())
    assert (info.value.endpoint, info.value.retries) == ("POST /scheduler/startRun", 2)


def test_a_server_that_comes_up_during_the_retries_is_reached() -> None:
    port = free_port()
    servers: list[CannedServer] = []

    def come_up() -> None:
        script = {"/api/v1/environments/2": [Canned(body={"id": "2", "name": "PROD"})]}
        servers.append(CannedServer(script, port=port).__enter__())

    threading.Timer(0.2, come_up).start()
    client = CoalesceClient(
        api_token=TOKEN, base_url=f"http://127.0.0.1:{port}", request_max_retries=3, request_retry_delay=0.1
    )
    try:
        assert client.get_environment("2").name == "PROD"
    finally:
        for server in servers:
            server.__exit__()
    assert len(servers[0].received) == 1


# ------------------
# Secrets
# ------------------


def test_the_token_never_shows_in_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COALESCE_API_TOKEN", TOKEN)
    workspace = CoalesceWorkspace(api_token=dg.EnvVar("COALESCE_API_TOKEN"), environment_ids=["2"])
    with workspace.process_config_and_initialize_cm() as initialized:
        assert initialized.api_token == TOKEN
        client = initialized.get_client()
        texts = [repr(initialized), str(initialized), repr(client), str(client), repr(client._http.headers)]
    direct = CoalesceWorkspace(api_token=TOKEN, environment_ids=["2"])
    texts += [repr(direct), str(direct)]
    assert not [text for text in texts if TOKEN in text]


# ------------------
# Against the local simulator
# ------------------


@pytest.fixture(scope="module")
def coalesce_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorld]:
    with LocalWorld(
        tmp_path_factory.mktemp("coalesce") / "local",
        project_file=FIXTURE_PROJECT,
        services=("snowflake", "coalesce"),
    ) as world:
        yield world


@pytest.fixture
def sim(coalesce_world: LocalWorld) -> Iterator[CoalesceClient]:
    with CoalesceClient(
        api_token=TOKEN, base_url=coalesce_world.coalesce_url, request_retry_delay=0.01
    ) as client:
        yield client
    # No test leaves faults behind for the next one.
    inject(coalesce_world, status=503, count=0)


@pytest.fixture
def slow_warehouse(coalesce_world: LocalWorld) -> Iterator[None]:
    """Every query of a run waits 0.5 s first, so a run lasts long enough to be watched and canceled."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=coalesce_world.coalesce_url, headers=headers) as control:
        control.post("/_sim/warehouse", json={"queryDelaySeconds": 0.5}).raise_for_status()
        yield
        control.post("/_sim/warehouse", json={"queryDelaySeconds": 0}).raise_for_status()


def inject(world: LocalWorld, **fault: Any) -> None:
    """Sets the simulator's next faults; a count of 0 clears them."""
    response = httpx.post(
        f"{world.coalesce_url}/_sim/faults", json=fault, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    response.raise_for_status()


@pytest.mark.world
def test_environments(sim: CoalesceClient) -> None:
    environments = sim.list_environments()
    assert [e.id for e in environments] == ["2"]
    prod = sim.get_environment("2")
    assert prod.name == "PROD" and prod == environments[0]


@pytest.mark.world
def test_nodes_are_followed_to_the_last_page(sim: CoalesceClient) -> None:
    every = sim.list_nodes("2", limit=500)
    one_by_one = sim.list_nodes("2", limit=1)
    assert len(every) >= 3
    assert [n.id for n in one_by_one] == [n.id for n in every] == sorted(n.id for n in every)
    detailed = sim.list_nodes("2", detail=True, limit=2)
    assert [n.id for n in detailed] == [n.id for n in every]
    assert all(isinstance(n, CoalesceNode) for n in detailed)
    built = next(n for n in detailed if any(m.dependencies for m in n.metadata.source_mapping))
    assert sim.get_node("2", built.id) == built
    assert any(c.sources and c.sources[0].column_references for c in built.metadata.columns)


@pytest.mark.world
def test_jobs_are_read_by_id_and_listed_only_where_the_listing_exists(
    sim: CoalesceClient, coalesce_world: LocalWorld
) -> None:
    with pytest.raises(CoalesceAPIError) as absent:
        sim.list_jobs("2")
    assert (absent.value.status, absent.value.endpoint) == (404, "GET /api/v1/environments/2/jobs")
    assert [sim.get_job("2", i).name for i in (1, 2)] == ["customers_nightly", "sales_nightly"]
    with pytest.raises(CoalesceAPIError) as info:
        sim.get_job("2", 3)
    assert info.value.status == 404
    assert info.value.endpoint == "GET /api/v1/environments/2/jobs/3"
    sim_control(sim, "POST", "api", {"jobsCollection": True})
    try:
        jobs = sim.list_jobs("2")
        one_by_one = sim.list_jobs("2", limit=1)
    finally:
        sim_control(sim, "POST", "api", {"jobsCollection": False})
    assert [j.id for j in one_by_one] == [j.id for j in jobs] == ["1", "2"]
    assert sim.get_job("2", 1) == jobs[0]


@pytest.mark.world
def test_unknown_ids_are_404_with_coalesce_error_bodies(sim: CoalesceClient) -> None:
    for call, endpoint in [
        (lambda: sim.get_environment("999"), "GET /api/v1/environments/999"),
        (lambda: sim.get_node("2", "no-such-node"), "GET /api/v1/environments/2/nodes/no-such-node"),
        (lambda: sim.get_run(999999), "GET /api/v1/runs/999999"),
    ]:
        with pytest.raises(CoalesceAPIError) as info:
            call()
        assert (info.value.status, info.value.endpoint, info.value.retries) == (404, endpoint, 0)
        assert info.value.error_string


@pytest.mark.world
def test_a_bad_token_is_401(coalesce_world: LocalWorld) -> None:
    bad = "not-the-token-0123"
    client = CoalesceClient(api_token=bad, base_url=coalesce_world.coalesce_url)
    with pytest.raises(CoalesceAPIError) as info:
        client.list_environments()
    assert (info.value.status, info.value.endpoint) == (401, "GET /api/v1/environments")
    assert info.value.error_string == "401: Unable to authenticate, please ensure your token is valid."
    assert info.value.error_detail
    assert bad not in str(info.value) and bad not in repr(client)


@pytest.mark.world
def test_a_job_run_from_start_to_results(sim: CoalesceClient) -> None:
    run_counter = sim.start_run("2", job_id=1, user_credentials=credentials())
    assert sim.get_run_status(run_counter).run_status in set(CoalesceRunStatus)
    run = sim.wait_for_run(run_counter, poll_interval=0.1, timeout=60)
    assert run.id == run_counter and run.run_status is CoalesceRunStatus.COMPLETED
    assert run.run_type is CoalesceRunType.REFRESH
    assert run.run_details is not None
    assert (run.run_details.environment_id, run.run_details.job_id) == ("2", "1")
    assert run.user_credentials is not None and run.user_credentials.snowflake_username == "TRANSFORM"
    assert "local-snowflake-secret" not in run.model_dump_json()
    assert run.run_start_time is not None and run.run_start_time.tzinfo is not None
    results = sim.get_run_results(run_counter)
    assert results.data and all(q.success for r in results.data for q in r.query_results)
    status = sim.get_run_status(run_counter)
    assert status.run_status is CoalesceRunStatus.COMPLETED and status.run_type is CoalesceRunType.REFRESH


@pytest.mark.world
def test_a_selector_run(sim: CoalesceClient) -> None:
    run_counter = sim.start_run(
        "2",
        include_selector="{name: STG_CUSTOMERS}+",
        exclude_selector="{name: FCT_SALES}+",
        user_credentials=credentials(),
        parameters={"REGION": "NORTH"},
        parallelism=2,
    )
    run = sim.wait_for_run(run_counter, poll_interval=0.1, timeout=60)
    assert run.run_status is CoalesceRunStatus.COMPLETED and run.run_time_parameters == {"REGION": "NORTH"}
    assert run.run_details is not None and run.run_details.parallelism == 2
    assert run.run_details.include_nodes_selector == "{name: STG_CUSTOMERS}+"
    assert [r.name for r in sim.get_run_results(run.id).data] == ["STG_CUSTOMERS", "DIM_CUSTOMER"]


@pytest.mark.world
def test_an_unscoped_run_needs_confirmation(sim: CoalesceClient) -> None:
    with pytest.raises(ValueError, match="Refusing to refresh every node"):
        sim.start_run("2", user_credentials=credentials())


@pytest.mark.world
def test_runs_are_listed_filtered_and_followed_page_by_page(sim: CoalesceClient) -> None:
    started = [sim.start_run("2", job_id=1, user_credentials=credentials()) for _ in range(3)]
    for run_counter in started:
        sim.wait_for_run(run_counter, poll_interval=0.1, timeout=60)
    ascending_ids = {"order_by": "id", "order_by_direction": "asc"}
    page = sim.list_runs(environment_id="2", run_type="refresh", limit=2, **ascending_ids)
    assert len(page.data) == 2 and page.limit == 2 and page.next is not None
    ascending = [r.id for r in sim.iter_runs(environment_id="2", limit=1, **ascending_ids)]
    assert ascending == sorted(ascending) and set(started) <= set(ascending)
    assert [r.id for r in sim.iter_runs(environment_id="2", order_by="id", limit=2)] == ascending[::-1]
    after = [r.id for r in sim.iter_runs(starting_from=started[0], **ascending_ids)]
    assert after == [i for i in ascending if i > started[0]]
    completed = list(sim.iter_runs(run_status=CoalesceRunStatus.COMPLETED, limit=5))
    assert completed and all(r.run_status is CoalesceRunStatus.COMPLETED for r in completed)
    since = datetime(2000, 1, 1, tzinfo=UTC)
    later = sim.list_runs(order_by="runStartTime", order_by_direction="asc", starting_from=since, limit=1000)
    assert set(started) <= {r.id for r in later.data}
    earlier = sim.list_runs(order_by="runStartTime", order_by_direction="desc", starting_from=since)
    assert earlier.data == [] and earlier.next is None


@pytest.mark.world
def test_a_failed_run_then_its_rerun(sim: CoalesceClient, coalesce_world: LocalWorld) -> None:
    # Job 2 reads RAW.ORDERS, which nobody has loaded yet.
    failed = sim.wait_for_run(sim.start_run("2", job_id=2, user_credentials=credentials()), 0.1, 60)
    assert failed.run_status is CoalesceRunStatus.FAILED and failed.run_failure_reason
    results = {r.name: r for r in sim.get_run_results(failed.id).data}
    assert all(q.success for q in results["DIM_CUSTOMER"].query_results)
    failing = [q for q in results["STG_ORDERS"].query_results if not q.success]
    assert failing and failing[0].error is not None and failing[0].error.error_string
    assert "FCT_SALES" not in results or not results["FCT_SALES"].query_results

    with coalesce_world.snowflake.connect(database="SIM_PROD") as conn:
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS SIM_PROD.RAW")
        conn.cursor().execute(
            "CREATE OR REPLACE TABLE SIM_PROD.RAW.ORDERS AS SELECT SEQ4() + 1 AS ORDER_ID, "
            "MOD(SEQ4(), 5) + 1 AS CUSTOMER_ID, 10.5 AS AMOUNT FROM TABLE(GENERATOR(ROWCOUNT => 20))"
        )
    rerun = sim.wait_for_run(sim.rerun(failed.id, user_credentials=credentials()), 0.1, 60)
    assert rerun.run_status is CoalesceRunStatus.COMPLETED
    assert rerun.re_run_id == failed.id and rerun.run_history == [*failed.run_history, failed.id]
    # From the point of failure: what failed or did not run, not what already succeeded.
    rebuilt = [r.name for r in sim.get_run_results(rerun.id).data]
    assert "STG_ORDERS" in rebuilt and "FCT_SALES" in rebuilt and "DIM_CUSTOMER" not in rebuilt


@pytest.mark.world
def test_cancel_a_running_run(sim: CoalesceClient, slow_warehouse: None) -> None:
    run_counter = sim.start_run("2", job_id=1, user_credentials=credentials())
    while sim.get_run_status(run_counter).run_status is not CoalesceRunStatus.RUNNING:
        time.sleep(0.05)
    with pytest.raises(ValueError, match="orgID"):
        sim.cancel_run(run_counter, environment_id="2", org_id="")
    with pytest.raises(CoalesceAPIError) as wrong:
        sim.cancel_run(run_counter, environment_id="2", org_id="999")
    assert wrong.value.status == 403 and "orgID" in str(wrong.value)
    sim.cancel_run(run_counter, environment_id="2", org_id=LOCAL_COALESCE_ORG_ID)
    run = sim.wait_for_run(run_counter, poll_interval=0.1, timeout=60)
    assert run.run_status is CoalesceRunStatus.CANCELED
    assert run.run_details is not None and run.run_details.canceled
    with pytest.raises(CoalesceAPIError) as info:
        sim.cancel_run(run_counter, environment_id="2", org_id=LOCAL_COALESCE_ORG_ID)
    assert (info.value.status, info.value.endpoint) == (400, "POST /scheduler/cancelRun")


@pytest.mark.world
def test_waiting_for_a_run_times_out_naming_it(sim: CoalesceClient, slow_warehouse: None) -> None:
    run_counter = sim.start_run("2", job_id=1, user_credentials=credentials())
    started = time.monotonic()
    with pytest.raises(CoalesceRunTimeoutError) as info:
        sim.wait_for_run(run_counter, poll_interval=0.05, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 1.0
    assert info.value.run_id == run_counter and info.value.last_status is not None
    assert str(info.value).startswith(f"Coalesce run {run_counter} did not finish within 0.3 s (last status")
    sim.cancel_run(run_counter, environment_id="2", org_id=LOCAL_COALESCE_ORG_ID)
    assert sim.wait_for_run(run_counter, 0.1, 60).run_status is CoalesceRunStatus.CANCELED


@pytest.mark.world
def test_rate_limits_are_waited_out(sim: CoalesceClient, coalesce_world: LocalWorld) -> None:
    inject(coalesce_world, status=429, count=2, retryAfter=0.3, pathPrefix="/api/v1")
    started = time.monotonic()
    assert sim.get_environment("2").name == "PROD"
    # Retry-After, not the 0.01 s backoff, set the pace.
    assert time.monotonic() - started >= 0.6


@pytest.mark.world
def test_outages_are_retried_with_backoff(sim: CoalesceClient, coalesce_world: LocalWorld) -> None:
    inject(coalesce_world, status=503, count=3, pathPrefix="/api/v1")
    assert sim.list_nodes("2")
    inject(coalesce_world, status=503, count=3, pathPrefix="/scheduler")
    assert sim.start_run("2", job_id=1, user_credentials=credentials()) > 0
    # A 500 may come after the run started: a run start is not repeated.
    inject(coalesce_world, status=500, count=1, pathPrefix="/scheduler")
    with pytest.raises(CoalesceAPIError) as info:
        sim.start_run("2", job_id=1, user_credentials=credentials())
    assert (info.value.status, info.value.retries) == (500, 0)
    # Reads are retried on a 500.
    inject(coalesce_world, status=500, count=2, pathPrefix="/scheduler")
    assert sim.get_run_status(1).run_status.is_terminal


@pytest.mark.world
def test_an_outage_longer_than_the_retries_names_the_endpoint(coalesce_world: LocalWorld) -> None:
    client = CoalesceClient(
        api_token=TOKEN, base_url=coalesce_world.coalesce_url, request_max_retries=2, request_retry_delay=0.01
    )
    inject(coalesce_world, status=503, count=10, pathPrefix="/api/v1")
    try:
        with pytest.raises(CoalesceAPIError) as info:
            client.get_run(1)
    finally:
        inject(coalesce_world, status=503, count=0)
    assert (info.value.status, info.value.endpoint, info.value.retries) == (503, "GET /api/v1/runs/1", 2)
    assert str(info.value).startswith("Coalesce GET /api/v1/runs/1 returned 503")
    assert str(info.value).endswith("gave up after 2 retries")


@pytest.mark.world
def test_workspace_data_snapshot_round_trips(coalesce_world: LocalWorld) -> None:
    workspace = CoalesceWorkspace(
        base_url=coalesce_world.coalesce_url, api_token=TOKEN, environment_ids=["2"], request_retry_delay=0.01
    )
    data = workspace.fetch_workspace_data()
    assert data.base_url == coalesce_world.coalesce_url and data.fetched_at.tzinfo is not None
    (prod,) = data.environments
    assert prod.environment.name == "PROD"
    # No jobs listing here: found by reading ids, as Coalesce's Transform MCP server does.
    assert [j.name for j in prod.jobs] == ["customers_nightly", "sales_nightly"]
    assert prod.jobs_found_by == "probe"
    fct_sales = next(n for n in prod.nodes if n.name == "FCT_SALES")
    assert fct_sales.metadata.applied_node_tests[0].name == "NO_NEGATIVE_AMOUNT"
    assert "{{ ref('MART', 'FCT_SALES') }}" in fct_sales.metadata.applied_node_tests[0].template_string
    assert [n.id for n in prod.nodes] == [n.id for n in workspace.get_client().list_nodes("2")]
    assert CoalesceWorkspaceData.model_validate_json(data.model_dump_json()) == data
