"""The stricter Coalesce simulator and the integration that passes it, over real sockets: a run's parameters
replace the environment's (and the client keeps them), jobs found with no jobs listing, slow pages of
detailed nodes shrunk until they answer, and a stopped wait that cancels its Coalesce run, down to a Dagster
run interrupted as Dagster terminates one."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from dw_dagster.coalesce import (
    CoalesceClient,
    CoalesceRunStatus,
    CoalesceRunTimeoutError,
    CoalesceUserCredentials,
    CoalesceWorkspace,
)
from dw_local import snowflake_auth
from dw_local.world import LOCAL_COALESCE_TOKEN as TOKEN
from dw_local.world import LocalWorld, sim_control

pytestmark = pytest.mark.world

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "coalesce_api" / "params_project.yaml"
ORG = "acme"  # the project's orgID
# Each query of a run this slow: the run is still going when a loaded machine (the suite's 3 workers on 2 cores) gets
# round to interrupting or cancelling it (at 0.5 s a one-node run completed first). A canceled run ends at once.
SLOW_QUERY_SECONDS = 5


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorld]:
    root = tmp_path_factory.mktemp("coalesce-fidelity") / "local"
    with LocalWorld(root, project_file=PROJECT, services=("snowflake", "coalesce")) as lw:
        yield lw


@pytest.fixture
def client(world: LocalWorld) -> Iterator[CoalesceClient]:
    with CoalesceClient(TOKEN, world.coalesce_url, request_retry_delay=0.01, org_id=ORG) as c:
        yield c
    httpx.delete(f"{world.coalesce_url}/_sim/faults", headers={"Authorization": f"Bearer {TOKEN}"})


def credentials() -> CoalesceUserCredentials:
    return CoalesceUserCredentials(snowflake_username="TRANSFORM", snowflake_password="local")


def rows(world: LocalWorld) -> list[tuple[Any, ...]]:
    conn = world.snowflake.connect(database="PARAM_PROD")
    try:
        cursor = conn.cursor()
        cursor.execute(
            'SELECT "CUSTOMER_ID", "CURRENCY" FROM "PARAM_PROD"."MART"."DIM_REGION_CUSTOMERS" ORDER BY 1'
        )
        return cursor.fetchall()
    finally:
        conn.close()


def test_a_runs_parameters_replace_the_environments_and_the_client_keeps_them(
    client: CoalesceClient, world: LocalWorld
) -> None:
    assert client.get_environment("2").run_time_parameters == {"region": "NORTH", "currency": "EUR"}
    staged = client.wait_for_run(client.start_run("2", job_id=1, user_credentials=credentials()), 0.05, 60)
    assert staged.run_status is CoalesceRunStatus.COMPLETED
    # Without parameters a run has the environment's.
    plain = client.wait_for_run(client.start_run("2", job_id=4, user_credentials=credentials()), 0.05, 60)
    assert plain.run_status is CoalesceRunStatus.COMPLETED
    assert plain.run_time_parameters == {"region": "NORTH", "currency": "EUR"}
    assert rows(world) == [(1, "EUR"), (3, "EUR")]

    # Sent alone, a run's parameters are all it has: the node reading {{ parameters.region }} fails.
    alone = client.start_run(
        "2", job_id=4, user_credentials=credentials(), parameters={"currency": "USD"},
        keep_environment_parameters=False,
    )  # fmt: skip
    failed = client.wait_for_run(alone, 0.05, 60)
    assert failed.run_status is CoalesceRunStatus.FAILED and failed.run_time_parameters == {"currency": "USD"}
    (node,) = client.get_run_results(alone).data
    assert "parameters.region is not defined" in node.query_results[0].error.error_string

    # The rerun of that run keeps the environment's parameters, the failed run's, and its own.
    rerun = client.rerun(alone, credentials(), parameters={"dw_incident_id": "inc-7"})
    done = client.wait_for_run(rerun, 0.05, 60)
    assert done.run_status is CoalesceRunStatus.COMPLETED and done.re_run_id == alone
    assert done.run_time_parameters == {"region": "NORTH", "currency": "USD", "dw_incident_id": "inc-7"}
    assert rows(world) == [(1, "USD"), (3, "USD")]

    # As the remediation starts its scoped rerun: its own parameters, the environment's kept under them.
    scoped = client.start_run(
        "2", include_selector="{name: DIM_REGION_CUSTOMERS}", user_credentials=credentials(),
        parameters={"dw_incident_id": "inc-8", "dw_business_date": "2026-12-04"},
    )  # fmt: skip
    run = client.wait_for_run(scoped, 0.05, 60)
    assert run.run_status is CoalesceRunStatus.COMPLETED and run.run_time_parameters == {
        "region": "NORTH", "currency": "EUR", "dw_incident_id": "inc-8", "dw_business_date": "2026-12-04"
    }  # fmt: skip


def test_a_run_signs_in_to_snowflake_with_its_own_credentials_and_fails_with_snowflakes_refusal(
    client: CoalesceClient, world: LocalWorld, tmp_path: Path
) -> None:
    """Coalesce passes a run's userCredentials to Snowflake, which refuses what it does not hold: the run
    fails before any node, Snowflake's refusal in its runFailureReason. Users the local Snowflake's users
    file names: one signing in by key pair only, one by password."""
    data = world.root / "snowflake"
    key = tmp_path / "runner.p8"
    snowflake_auth.register_user(
        data, "RUNNER_KEY", ["KEYPAIR"], public_key_pem=snowflake_auth.new_key_pair(key)
    )
    snowflake_auth.register_user(data, "RUNNER_PW", ["PASSWORD"], password="the-right-one")
    pem = key.read_text()
    snowflake_auth.new_key_pair(tmp_path / "other.p8")  # a key no user registered
    encrypted = (
        serialization.load_pem_private_key(pem.encode(), password=None)
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"open sesame"),
        )
        .decode()
    )  # fmt: skip

    def run(**given: Any) -> tuple[CoalesceRunStatus, str | None, int]:
        run_id = client.start_run("2", job_id=4, user_credentials=CoalesceUserCredentials(**given))
        done = client.wait_for_run(run_id, 0.05, 60)
        return done.run_status, done.run_failure_reason, len(client.get_run_results(run_id).data)

    key_pair = {"snowflake_username": "RUNNER_KEY", "snowflake_auth_type": "KeyPair"}
    assert run(**key_pair, snowflake_key_pair_key=pem)[0] is CoalesceRunStatus.COMPLETED
    assert run(**key_pair, snowflake_key_pair_key=encrypted, snowflake_key_pair_pass="open sesame")[0] is (
        CoalesceRunStatus.COMPLETED
    )
    assert (
        run(snowflake_username="RUNNER_PW", snowflake_password="the-right-one")[0]
        is CoalesceRunStatus.COMPLETED
    )
    refused = {
        "a key the user has not registered": (
            run(**key_pair, snowflake_key_pair_key=(tmp_path / "other.p8").read_text()),
            "JWT token is invalid",
        ),
        "a wrong passphrase": (
            run(**key_pair, snowflake_key_pair_key=encrypted, snowflake_key_pair_pass="open barley"),
            "the private key could not be read",
        ),
        "a password where the policy wants a key pair": (
            run(snowflake_username="RUNNER_KEY", snowflake_password="local"),
            "authentication policy",
        ),
        "a wrong password": (
            run(snowflake_username="RUNNER_PW", snowflake_password="local"),
            "Incorrect username or password",
        ),
        "OAuth, which no environment here has": (
            run(snowflake_username="RUNNER_PW", snowflake_auth_type="OAuth"),
            "no Snowflake OAuth connection",
        ),
    }
    for what, ((status, reason, nodes), says) in refused.items():
        assert status is CoalesceRunStatus.FAILED, what
        assert reason and reason.startswith("Cannot connect to Snowflake") and says in reason, (what, reason)
        assert nodes == 0, f"{what}: no node runs"
        assert "the-right-one" not in reason and "PRIVATE KEY" not in reason, what


def test_jobs_are_found_by_id_where_there_is_no_listing_and_kept_for_the_next_refresh(
    world: LocalWorld,
) -> None:
    workspace = CoalesceWorkspace(base_url=world.coalesce_url, api_token=TOKEN, environment_ids=["2"])
    first = workspace.fetch_workspace_data()
    (env,) = first.environments
    assert [(j.id, j.name) for j in env.jobs] == [("1", "stage_nightly"), ("4", "mart_nightly")]
    assert env.jobs_found_by == "probe"
    again = workspace.fetch_workspace_data(previous=first).environments[0]
    assert again.jobs == env.jobs and again.jobs_found_by == "probe"
    # Configured ids are read as they are; where the listing answers, it is used.
    configured = CoalesceWorkspace(
        base_url=world.coalesce_url, api_token=TOKEN, environment_ids=["2"], job_ids=["4"]
    )
    assert [j.id for j in configured.fetch_workspace_data().environments[0].jobs] == ["4"]
    sim_control(configured.get_client(), "POST", "api", {"jobsCollection": True})
    try:
        listed = configured.fetch_workspace_data().environments[0]
    finally:
        sim_control(configured.get_client(), "POST", "api", {"jobsCollection": False})
    assert [j.id for j in listed.jobs] == ["1", "4"] and listed.jobs_found_by == "collection"


def test_a_slow_page_of_detailed_nodes_is_asked_again_smaller_and_succeeds(
    world: LocalWorld, caplog: pytest.LogCaptureFixture
) -> None:
    workspace = CoalesceWorkspace(
        base_url=world.coalesce_url, api_token=TOKEN, environment_ids=["2"],
        node_page_timeout=0.5, node_page_retry_wait=0,
    )  # fmt: skip
    client = workspace.new_client()
    # 0.4 s a node: the project's two nodes on one page take 0.8 s, past the page's 0.5 s; one takes 0.4 s.
    sim_control(client, "POST", "nodepages", {"secondsPerNode": 0.4})
    try:
        with caplog.at_level(logging.WARNING):
            nodes = client.list_nodes("2", detail=True)
    finally:
        sim_control(client, "DELETE", "faults")
    assert [n.name for n in nodes] == sorted((n.name for n in nodes), key=lambda name: [m.id for m in nodes])
    assert {n.name for n in nodes} == {"STG_CUSTOMERS", "DIM_REGION_CUSTOMERS"}
    shrunk = [r.message for r in caplog.records if "took too long" in r.message]
    assert [m.split("asking for ")[1].split(" ")[0] for m in shrunk] == ["20", "2", "1"]


def test_a_wait_that_times_out_cancels_its_run(
    client: CoalesceClient, caplog: pytest.LogCaptureFixture
) -> None:
    sim_control(client, "POST", "warehouse", {"queryDelaySeconds": SLOW_QUERY_SECONDS})
    run_id = client.start_run("2", job_id=4, user_credentials=credentials())
    with caplog.at_level(logging.INFO), pytest.raises(CoalesceRunTimeoutError):
        client.wait_for_run(run_id, poll_interval=0.05, timeout=0.3)
    assert client.wait_for_run(run_id, 0.05, 60).run_status is CoalesceRunStatus.CANCELED
    assert f"Canceled Coalesce run {run_id}: the wait timed out." in caplog.text


def test_without_the_org_id_the_log_says_the_run_was_left_going(
    world: LocalWorld, caplog: pytest.LogCaptureFixture
) -> None:
    with CoalesceClient(TOKEN, world.coalesce_url) as client:
        sim_control(client, "POST", "warehouse", {"queryDelaySeconds": SLOW_QUERY_SECONDS})
        try:
            run_id = client.start_run("2", job_id=4, user_credentials=credentials())
            with caplog.at_level(logging.WARNING), pytest.raises(CoalesceRunTimeoutError):
                client.wait_for_run(run_id, poll_interval=0.05, timeout=0.3)
            assert not client.get_run_status(run_id).run_status.is_terminal
            client.cancel_run(run_id, "2", ORG)
        finally:
            sim_control(client, "DELETE", "faults")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [f"Coalesce run {run_id} was left going (the wait timed out)" in r.message for r in errors] == [
        True
    ]
    assert "COALESCE_ORG_ID" in errors[0].message


SCRIPT = """
import sys
import dagster as dg
from dw_dagster.coalesce import CoalesceUserCredentials, CoalesceWorkspace

workspace = CoalesceWorkspace(base_url=sys.argv[1], api_token=sys.argv[2], environment_ids=["2"], org_id=sys.argv[3])

@dg.op
def build_marts() -> None:
    credentials = CoalesceUserCredentials(snowflake_username="TRANSFORM", snowflake_password="local")
    with workspace.new_client() as client:
        run_id = client.start_run("2", job_id=4, user_credentials=credentials)
        print(f"started {run_id}", flush=True)
        client.wait_for_run(run_id, poll_interval=0.1, timeout=120)

@dg.job
def marts() -> None:
    build_marts()

result = marts.execute_in_process(raise_on_error=False)
print("success" if result.success else "failed", flush=True)
"""


def test_a_dagster_run_interrupted_while_it_waits_cancels_its_coalesce_run(
    client: CoalesceClient, world: LocalWorld, tmp_path: Path
) -> None:
    # Dagster terminates a run by interrupting its process (SIGINT), which its step sees as
    # DagsterExecutionInterruptedError.
    sim_control(client, "POST", "warehouse", {"queryDelaySeconds": SLOW_QUERY_SECONDS})
    script = tmp_path / "marts.py"
    script.write_text(textwrap.dedent(SCRIPT))
    process = subprocess.Popen(
        [sys.executable, str(script), world.coalesce_url, TOKEN, ORG],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={"DAGSTER_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = ""
        deadline = time.monotonic() + 120
        while not line.startswith("started ") and time.monotonic() < deadline:
            line = process.stdout.readline()
        run_id = int(line.split()[1])
        # Interrupt only once the step is inside wait_for_run: its first poll logs the run's status.
        # A signal between the script's print and the wait would stop the step outside the wait,
        # which no client can see (the race this test once lost under load).
        polled = f"Coalesce run {run_id} is "
        deadline = time.monotonic() + 30
        while polled not in line:
            assert time.monotonic() < deadline, "the script never polled its Coalesce run"
            line = process.stdout.readline()
        deadline = time.monotonic() + 30
        while client.get_run_status(run_id).run_status is not CoalesceRunStatus.RUNNING:
            assert time.monotonic() < deadline, "the Coalesce run never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert client.wait_for_run(run_id, 0.05, 60).run_status is CoalesceRunStatus.CANCELED, out
    assert f"Canceled Coalesce run {run_id}: the Dagster run was stopped." in out and "failed" in out
