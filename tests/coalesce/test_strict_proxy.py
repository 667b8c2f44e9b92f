"""Judged by a strict Coalesce: a proxy of our own in front of the simulator refuses the jobs collection
(404) and any ``startingFrom`` without ``orderBy`` (400), whatever the simulator would answer (its jobs
collection is turned on here). Through it, the shipped ``dw-dagster coalesce refresh`` and a load of the code
location pass, a second refresh reads the jobs found by id without probing from 1 again, and the run
sensor reports a run with its job's name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import dagster as dg
import httpx
import pytest
from coalesce_state import environ

from dw_dagster.coalesce import CoalesceUserCredentials, CoalesceWorkspace, build_coalesce_polling_sensor
from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.components import asset_specs_of
from dw_dagster.definitions import load_definitions
from dw_dagster.project import refresh_coalesce_state
from dw_local.world import LOCAL_COALESCE_TOKEN as TOKEN
from dw_local.world import LocalWorld, free_port, sim_control

pytestmark = pytest.mark.world

VENV_BIN = Path(sys.executable).parent
JOBS_COLLECTION = re.compile(r"^/api/v1/environments/[^/]+/jobs/?$")
JOB_BY_ID = re.compile(r"^/api/v1/environments/[^/]+/jobs/(\d+)$")


class StrictProxy:
    """Forwards to ``upstream``, refusing what the real Coalesce may not have; every request is kept."""

    def __init__(self, upstream: str):
        self.upstream = httpx.Client(base_url=upstream, timeout=60)
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.refused: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                proxy.requests.append((self.command, url.path, query))
                if self.command == "GET" and JOBS_COLLECTION.match(url.path):
                    return self._refuse(404, "Not found.", url.path)
                if "startingFrom" in query and "orderBy" not in query:
                    return self._refuse(400, "startingFrom requires orderBy", self.path)
                length = int(self.headers.get("Content-Length") or 0)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")
                }
                response = proxy.upstream.request(
                    self.command,
                    self.path,
                    content=self.rfile.read(length) if length else None,
                    headers=headers,
                )
                self.send_response(response.status_code)
                for name in ("Content-Type", "Retry-After"):
                    if name in response.headers:
                        self.send_header(name, response.headers[name])
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            def _refuse(self, status: int, message: str, what: str) -> None:
                proxy.refused.append(what)
                body = json.dumps(
                    {"error": {"errorString": f"{status}: {message}", "errorDetail": what}}
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.upstream.close()

    def job_ids_read(self) -> list[int]:
        return sorted(int(m[1]) for _, path, _ in self.requests if (m := JOB_BY_ID.match(path)))

    def clear(self) -> None:
        self.requests.clear()
        self.refused.clear()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorld]:
    with LocalWorld(tmp_path_factory.mktemp("strict") / "local", services=("snowflake", "coalesce")) as lw:
        yield lw


@pytest.fixture(scope="module")
def proxy(world: LocalWorld) -> Iterator[StrictProxy]:
    proxy = StrictProxy(world.coalesce_url)
    # The simulator would answer the collection: only the proxy's strictness is in play.
    sim_control(world.coalesce_client(), "POST", "api", {"jobsCollection": True})
    yield proxy
    proxy.close()


def refresh(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_BIN / "dw-dagster"), "coalesce", "refresh"], env={**os.environ, **env},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_refresh_the_load_and_the_sensor_pass_a_strict_coalesce(
    world: LocalWorld, proxy: StrictProxy, tmp_path: Path
) -> None:
    env = {**world.env(), "COALESCE_BASE_URL": proxy.url, "DAGSTER_HOME": str(tmp_path)}
    out = refresh(env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"refreshed CoalesceComponent[{proxy.url}|2]" in out.stdout
    # The collection was asked once and refused; the jobs were then read by id, from 1.
    assert proxy.refused == ["/api/v1/environments/2/jobs"]
    assert proxy.job_ids_read() == list(range(1, 51))

    instance = dg.DagsterInstance.from_config(str(tmp_path))
    with environ(env):
        specs = [s for s in asset_specs_of(load_definitions(instance)) if "coalesce/node_id" in s.metadata]
    fct = next(s for s in specs if s.key.to_user_string() == "inventory/fct_inventory_position")
    assert [j["name"] for j in fct.metadata["coalesce/jobs"].data] == ["inventory_nightly"]

    # The next refresh (in process, as `dg utils refresh-defs-state` would) reads the job it found and the ten
    # ids past it, not 50 from 1.
    proxy.clear()
    with environ(env):
        refresh_coalesce_state(instance)
    assert proxy.refused == ["/api/v1/environments/2/jobs"]
    assert proxy.job_ids_read() == list(range(1, 12))

    # The run sensor, through the proxy, reports a run under its job's name without listing jobs.
    proxy.clear()
    workspace = CoalesceWorkspace(base_url=proxy.url, api_token=TOKEN, environment_ids=["2"])
    sensor = build_coalesce_polling_sensor(workspace=workspace, asset_specs=specs)
    first = sensor(dg.build_sensor_context(instance=instance))
    client = workspace.get_client()
    credentials = CoalesceUserCredentials(snowflake_username="DW_DAGSTER", snowflake_password="local")
    run_id = client.start_run("2", job_id=1, user_credentials=credentials)
    client.wait_for_run(run_id, 0.05, 120)
    second = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert json.loads(second.cursor)["environments"]["2"]["high_water"] == run_id
    reported = set()
    for spec in specs:
        records = [*instance.fetch_observations(spec.key, limit=5).records,
                   *instance.fetch_materializations(spec.key, limit=5).records]  # fmt: skip
        for record in records:
            if record.asset_event is not None:
                ours = CoalesceRunMetadataSet.extract(record.asset_event.metadata)
                reported.add((ours.run_id, ours.job_name))
    assert reported == {(run_id, "inventory_nightly")}
    assert proxy.refused == [] and not any(JOBS_COLLECTION.match(path) for _, path, _ in proxy.requests)
