"""The processes of one Dagster deployment on this machine (a gRPC code server, the daemon, the webserver),
each its own process group, over an instance's storage: Postgres for the production-shaped tests, or an
existing instance's home (the seeded world's sqlite storage); either with the deployment's event log storage
and event batch size (local/dw_local/instance_storage.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
import httpx
import yaml
from dagster._core.scheduler.instigation import InstigatorType
from image import Image

from dw_local.instance_storage import EVENT_BATCH_SIZE, deployment_storage
from dw_local.world import LocalWorld, free_ports

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
T = TypeVar("T")


class Deployment:
    """The code server, daemon and webserver of one Dagster instance, each its own process group."""

    def __init__(
        self, root: Path, lw: LocalWorld, postgres_url: str | None = None, home: Path | None = None,
        image: Image | None = None,
    ):  # fmt: skip
        """On Postgres storage at ``postgres_url`` (a new home under ``root``), or on the instance at ``home``
        (a private copy: its dagster.yaml is rewritten); either with the deployment's event log storage.
        ``image``: the processes run from what its steps installed (else from this venv)."""
        self.root = root
        self.bin = image.bin if image is not None else BIN
        self.lw = lw
        self.logs = root / "logs"
        self.logs.mkdir(parents=True)
        self.home = home if home is not None else root / "dagster_home"
        self.home.mkdir(parents=True, exist_ok=True)
        config = yaml.safe_load((REPO / "dagster.yaml").read_text())
        config.update(deployment_storage(self.home, postgres_url))
        (self.home / "dagster.yaml").write_text(yaml.safe_dump(config))
        self.grpc_port, self.web_port = free_ports(2)  # two picked one after another could be the same
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
        base = image.env() if image is not None else dict(os.environ)
        self.env = {**base, **lw.env(), "DAGSTER_HOME": str(self.home), "DW_RETRY_BACKOFF_SECONDS": "2",
                    "DAGSTER_EVENT_BATCH_SIZE": EVENT_BATCH_SIZE}  # fmt: skip
        self.procs: dict[str, subprocess.Popen] = {}
        self.instance = dg.DagsterInstance.from_config(str(self.home))

    def commands(self) -> dict[str, list[str]]:
        return {
            "code-server": [str(self.bin / "dagster"), "api", "grpc", "-m", "dw_dagster.definitions",
                            "-h", "127.0.0.1", "-p", str(self.grpc_port)],
            "daemon": [str(self.bin / "dagster-daemon"), "run", "-w", str(self.workspace)],
            "webserver": [str(self.bin / "dagster-webserver"), "-w", str(self.workspace), "-h", "127.0.0.1",
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

    def command(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """An operator's ``dw-dagster`` command, from the deployment's venv, in its environment."""
        return subprocess.run(
            [str(self.bin / "dw-dagster"), *args], cwd=self.root, env=self.env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

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
