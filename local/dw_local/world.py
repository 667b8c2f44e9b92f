"""Supervises the local world's three servers: local Snowflake, the Coalesce simulator, the Slack stand-in.

Each server is a separate process on a loopback port, so the product reaches it exactly as it reaches the
real service: over a socket, through its public protocol. The ports and process ids live in
``<root>/world.json`` so that ``dw-dagster world down`` in another shell can find them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from dw_local.forkserver import die_with_parent, spawn

DISTRIBUTOR_DIR = Path(__file__).parent / "worlds" / "distributor"
# The local servers accept these credentials (any password, unless a world requires key pair); they are
# not secrets.
LOCAL_COALESCE_TOKEN = "local-coalesce-token"
# The organization of the simulator's project (a project file's `project.orgID`, "1" unless it says).
LOCAL_COALESCE_ORG_ID = "1"
LOCAL_SLACK_TOKEN = "xoxb-local-slack-token"
LOCAL_SNOWFLAKE_USER = "DW_DAGSTER"
LOCAL_SNOWFLAKE_PASSWORD = "local"
LOCAL_DATABASE = "DW_PROD"
LOCAL_SIGNING_KEY = "local-world-signing-key-not-a-secret-0123456789"
LOCAL_SLACK_SIGNING_SECRET = "local-slack-signing-secret"


def sim_control(coalesce: Any, method: str, name: str, body: dict | None = None) -> dict:
    """Calls the Coalesce simulator's own endpoints (``/_sim/<name>``: clock, workspace, deploy), outside the
    Coalesce API the client speaks."""
    from dw_dagster.coalesce.http_client import tls_context  # its caller has the client loaded

    response = httpx.request(
        method,
        f"{coalesce.base_url}/_sim/{name}",
        json=body,
        headers={"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"},
        timeout=30,
        verify=tls_context(),  # not a new one per call (http_client.tls_context)
    )
    response.raise_for_status()
    return response.json()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def password_variables(context_file: Path) -> set[str]:
    """The variables the context file names for approvers' own Snowflake passwords (``run_as``)."""
    from dw_dagster.context.models import load_context_file

    context = load_context_file(context_file)
    return {m.run_as.password_env for team in context.teams.values() for m in team.members if m.run_as}


@dataclass(frozen=True)
class SnowflakeTarget:
    """Where the local Snowflake listens, and how the connector reaches it."""

    host: str
    port: int
    user: str = LOCAL_SNOWFLAKE_USER
    password: str = LOCAL_SNOWFLAKE_PASSWORD
    account: str = "fakesnow"
    protocol: str = "http"
    private_key_path: str | None = None
    """Set on a world that requires key pair (``LocalWorld(snowflake_sign_in="key_pair")``)."""

    def connect(self, database: str | None = LOCAL_DATABASE, schema: str | None = None, **kwargs: Any):
        import snowflake.connector

        # Read by the connector at connect: without it, about one connect in 18 stalls 5 s probing cloud
        # metadata endpoints. Set when connecting, not when this module is imported.
        os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")

        key = self.private_key_path
        sign_in = {"private_key_file": key} if key else {"password": self.password}
        conn = snowflake.connector.connect(
            user=self.user,
            **sign_in,
            account=self.account,
            host=self.host,
            port=self.port,
            protocol=self.protocol,
            database=database,
            schema=schema,
            **kwargs,
        )
        if database:
            # After a server restart only databases named at connect are attached.
            conn.cursor().execute(f'CREATE DATABASE IF NOT EXISTS "{database}"')
        return conn


@dataclass
class WorldPorts:
    snowflake: int = field(default_factory=free_port)
    coalesce: int = field(default_factory=free_port)
    slack: int = field(default_factory=free_port)


class WorldError(RuntimeError):
    pass


class LocalWorld:
    """The three local servers under one folder.

    ``root`` holds each server's durable data (``snowflake/``, ``coalesce/``, ``slack/``), its log
    (``logs/``) and ``world.json``.
    """

    def __init__(
        self,
        root: Path,
        ports: WorldPorts | None = None,
        project_file: Path | None = None,
        scheduler: bool = False,
        services: tuple[str, ...] = ("snowflake", "coalesce", "slack"),
        outlive_parent: bool = False,
        snowflake_sign_in: str = "password",
    ):
        self.root = Path(root).resolve()
        self.services = services
        # By default the servers die with the process that started them (a test run killed by a timeout
        # leaves no orphans); `world up --no-ui` keeps them for other shells.
        self.outlive_parent = outlive_parent
        self.ports = ports or WorldPorts()
        self.project_file = Path(project_file or DISTRIBUTOR_DIR / "project.yaml").resolve()
        self.scheduler = scheduler
        # "key_pair": the product's Snowflake user signs in only with its key pair (snowflake_auth.py).
        self.snowflake_sign_in = snowflake_sign_in
        self._procs: dict[str, Any] = {}
        """Each server's process: a ``subprocess.Popen``, or a ``ForkedProcess`` of the fork server."""

    # -- addresses -------------------------------------------------------------------------------

    @property
    def snowflake(self) -> SnowflakeTarget:
        key = str(self._private_key_path) if self.snowflake_sign_in == "key_pair" else None
        return SnowflakeTarget(host="127.0.0.1", port=self.ports.snowflake, private_key_path=key)

    @property
    def _private_key_path(self) -> Path:
        return self.root / "keys" / "snowflake_rsa_key.p8"

    @property
    def coalesce_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.coalesce}"

    @property
    def slack_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.slack}"

    def env(self) -> dict[str, str]:
        """The environment variables that point the product at this world (the production path)."""
        env = {
            "COALESCE_BASE_URL": self.coalesce_url,
            "COALESCE_API_TOKEN": LOCAL_COALESCE_TOKEN,
            "COALESCE_ENVIRONMENT_IDS": "2",
            "COALESCE_ORG_ID": LOCAL_COALESCE_ORG_ID,
            "SNOWFLAKE_ACCOUNT": "fakesnow",
            "SNOWFLAKE_USER": LOCAL_SNOWFLAKE_USER,
            "SNOWFLAKE_PASSWORD": LOCAL_SNOWFLAKE_PASSWORD,
            "SNOWFLAKE_DATABASE": LOCAL_DATABASE,
            "SNOWFLAKE_WAREHOUSE": "LOCAL_WH",
            "SNOWFLAKE_ROLE": "DW_DAGSTER",
            "SNOWFLAKE_HOST": "127.0.0.1",
            "SNOWFLAKE_PORT": str(self.ports.snowflake),
            "SNOWFLAKE_PROTOCOL": "http",
            # Every process that connects to Snowflake sets this: otherwise about one connect in 18 stalls
            # 5 s probing cloud metadata endpoints.
            "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true",
            "SLACK_BOT_TOKEN": LOCAL_SLACK_TOKEN,
            "SLACK_BASE_URL": f"{self.slack_url}/api/",
            "DW_CONTEXT_FILE": str(DISTRIBUTOR_DIR / "context.yaml"),
            "DW_METRICS_FILE": str(DISTRIBUTOR_DIR / "metrics.yaml"),
            # The deployment's seal and the Slack app's signing secret (the stand-in signs clicks with it);
            # --as alone approves here, and only here: every host above is this machine.
            "DW_SIGNING_KEY": LOCAL_SIGNING_KEY,
            "SLACK_SIGNING_SECRET": LOCAL_SLACK_SIGNING_SECRET,
            "DW_ALLOW_UNVERIFIED_APPROVERS": "local-world",
        }
        # Each approver's own Coalesce run identity names its password variable; the local Snowflake takes
        # any password.
        env.update(
            {name: LOCAL_SNOWFLAKE_PASSWORD for name in password_variables(Path(env["DW_CONTEXT_FILE"]))}
        )
        if self.snowflake_sign_in == "key_pair":
            del env["SNOWFLAKE_PASSWORD"]
            env["SNOWFLAKE_PRIVATE_KEY_PATH"] = str(self._private_key_path)
        return env

    def coalesce_client(self):
        from dw_dagster.coalesce.client import CoalesceClient

        return CoalesceClient(base_url=self.coalesce_url, api_token=LOCAL_COALESCE_TOKEN)

    # -- lifecycle -------------------------------------------------------------------------------

    def _commands(self) -> dict[str, list[str]]:
        py = sys.executable
        sim = [
            py, "-m", "dw_local.coalesce_sim",
            "--port", str(self.ports.coalesce),
            "--project", str(self.project_file),
            "--data-dir", str(self.root / "coalesce"),
            "--snowflake-host", "127.0.0.1",
            "--snowflake-port", str(self.ports.snowflake),
            "--token", LOCAL_COALESCE_TOKEN,
        ]  # fmt: skip
        if self.scheduler:
            sim.append("--scheduler")
        return {
            "snowflake": [
                py, "-m", "dw_local.snowflake_server",
                "--port", str(self.ports.snowflake), "--data-dir", str(self.root / "snowflake"),
            ],
            "coalesce": sim,
            "slack": [
                py, "-m", "dw_local.slack_server",
                "--port", str(self.ports.slack), "--data-dir", str(self.root / "slack"),
            ],
        }  # fmt: skip

    def start(self, timeout: float = 60.0) -> LocalWorld:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true"}
        if self.snowflake_sign_in == "key_pair" and "snowflake" in self.services:
            from dw_local import snowflake_auth

            public_key = snowflake_auth.new_key_pair(self._private_key_path)
            snowflake_auth.register_user(
                self.root / "snowflake", LOCAL_SNOWFLAKE_USER, ["KEYPAIR"], public_key
            )
        try:
            # The simulator connects to Snowflake as it starts: it starts once Snowflake answers, the others
            # start together (each server's start is mostly its imports).
            commands = self._commands()
            first = [n for n in self.services if n != "coalesce"]
            for name in first:
                self._start_one(name, commands[name], env)
            if "snowflake" in first:
                self._wait("snowflake", self._probe("snowflake"), timeout)
            if "coalesce" in self.services:
                self._start_one("coalesce", commands["coalesce"], env)
            for name in self.services:
                self._wait(name, self._probe(name), timeout)
        except BaseException:
            self.stop()
            raise
        self._write_state()
        return self

    def restart(self, name: str, timeout: float = 60.0) -> None:
        """Kill one server (SIGKILL, as a crash would) and start it again on the same port."""
        proc = self._procs.pop(name)
        proc.kill()
        proc.wait()
        env = {**os.environ, "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true"}
        self._start_one(name, self._commands()[name], env)
        self._wait(name, self._probe(name), timeout)
        self._write_state()

    def add_process(self, name: str, proc: subprocess.Popen) -> None:
        """Another process of the world (e.g. the product's approvals endpoint): stopped with the servers."""
        self._procs[name] = proc
        self._write_state()

    def _probe(self, name: str):
        return {
            "snowflake": self._snowflake_up,
            "coalesce": lambda: self._http_up(f"{self.coalesce_url}/_sim/health"),
            "slack": lambda: self._http_up(f"{self.slack_url}/_sink/health"),
        }[name]

    def _start_one(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        path = self.root / "logs" / f"{name}.log"
        if not self.outlive_parent and env.get("DW_LOCAL_FORK_SERVER", "1") != "0":
            # Forked from a process that imported the servers once: a world starts without their imports.
            self._procs[name] = spawn(cmd, env, path)
            return
        with open(path, "ab") as log:
            self._procs[name] = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=None if self.outlive_parent else die_with_parent,
            )

    def _wait(self, name: str, probe, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._procs[name]
            if proc.poll() is not None:
                raise WorldError(
                    f"the local {name} server exited with code {proc.returncode}; "
                    f"see {self.root / 'logs' / (name + '.log')}"
                )
            if probe():
                return
            time.sleep(0.1)
        raise WorldError(
            f"the local {name} server did not answer within {timeout:.0f} s; "
            f"see {self.root / 'logs' / (name + '.log')}"
        )

    def _snowflake_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.ports.snowflake), timeout=0.5):
                return True
        except OSError:
            return False

    @staticmethod
    def _http_up(url: str) -> bool:
        from dw_dagster.coalesce.http_client import tls_context

        try:
            headers = {"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
            # Polled every 0.1 s while a server starts: one TLS context, not one per poll.
            return httpx.get(url, headers=headers, timeout=1.0, verify=tls_context()).status_code == 200
        except httpx.HTTPError:
            return False

    def _write_state(self) -> None:
        state = {
            "ports": asdict(self.ports),
            "pids": {name: p.pid for name, p in self._procs.items()},
            "project_file": str(self.project_file),
        }
        (self.root / "world.json").write_text(json.dumps(state, indent=2))

    def stop(self) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        (self.root / "world.json").unlink(missing_ok=True)

    def __enter__(self) -> LocalWorld:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- another shell's world -------------------------------------------------------------------

    @classmethod
    def read_state(cls, root: Path) -> dict[str, Any] | None:
        path = Path(root) / "world.json"
        return json.loads(path.read_text()) if path.exists() else None

    @classmethod
    def attach(cls, root: Path) -> LocalWorld:
        """The running world under ``root``, as started by another process."""
        state = cls.read_state(root)
        if state is None:
            raise WorldError(f"no local world is running under {root}: run `dw-dagster world up`")
        return cls(root, ports=WorldPorts(**state["ports"]), project_file=Path(state["project_file"]))

    @classmethod
    def stop_running(cls, root: Path) -> bool:
        state = cls.read_state(root)
        if state is None:
            return False
        for pid in state["pids"].values():
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        (Path(root) / "world.json").unlink(missing_ok=True)
        return True
