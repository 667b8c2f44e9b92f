"""Supervises the local world's three servers: local Snowflake, the Coalesce simulator, the Slack stand-in.

Each server is a separate process on a loopback port, so the product reaches it exactly as it reaches the
real service: over a socket, through its public protocol. The ports and process ids live in
``<root>/world.json`` so that ``dw-dagster world down`` in another shell can find them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from dw_local.forkserver import child_setup, spawn
from dw_local.world_clock import CLOCK_FILE_ENV, clock_env, without_clock

DISTRIBUTOR_DIR = Path(__file__).parent / "worlds" / "distributor"
# The local servers accept these credentials; they are not secrets. The product's Snowflake user signs in
# with the world's key pair (``LocalWorld.snowflake_sign_in``); other users with any password.
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


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, every socket held open until all are picked: picked one after
    another, each closed at once, the kernel can hand the same port out twice, and a world's second server
    then found its port taken by its first."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def free_port() -> int:
    return free_ports(1)[0]


def password_variables(context_file: Path) -> set[str]:
    """The variables the context file names for approvers' own Snowflake passwords (``run_as``)."""
    from dw_dagster.context.models import load_context_file

    context = load_context_file(context_file)
    return {
        m.run_as.password_env
        for team in context.teams.values()
        for m in team.members
        if m.run_as and m.run_as.password_env
    }


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
    """The product user's private key, on a world that requires key pair (the default)."""

    def sign_in(self) -> dict[str, str]:
        """The warehouse resource's sign-in settings for this target: its private key, or its password."""
        key = self.private_key_path
        return {"private_key_path": key} if key else {"password": self.password}

    def connect(self, database: str | None = LOCAL_DATABASE, schema: str | None = None, **kwargs: Any):
        import snowflake.connector

        # Read by the connector at connect: without it, about one connect in 18 stalls 5 s probing cloud
        # metadata endpoints. Set when connecting, not when this module is imported.
        os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")

        key = self.private_key_path
        sign_in = {"private_key": _private_key(key)} if key else {"password": self.password}
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


def _private_key(path: str) -> Any:
    """The key at ``path``, parsed once a process for each key it holds: the connector reads and parses a
    ``private_key_file`` on every connect (a tenth of a seeding night's CPU: the world's generator connects
    each night), and every copy of a template holds the template's key (a test file plays many copies)."""
    return _parsed_key(Path(path).read_bytes())


@functools.cache
def _parsed_key(pem: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization

    return serialization.load_pem_private_key(pem, password=None)


SERVICE_NAMES = {
    "snowflake": "the local Snowflake",
    "coalesce": "the Coalesce simulator",
    "slack": "the Slack stand-in",
}
STOP_SECONDS = 30.0  # how long a process has to stop on SIGTERM before it is killed
PORT_ATTEMPTS = 3  # how many times a world's picked ports are picked again when another process took one


@dataclass
class WorldPorts:
    """The world's servers' ports; each one not given (0) is a free port, none the same as another
    (``free_ports``)."""

    snowflake: int = 0
    coalesce: int = 0
    slack: int = 0
    picked: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    """The servers whose port was picked free here, not given."""

    def __post_init__(self) -> None:
        self.picked = tuple(name for name in SERVICE_NAMES if not getattr(self, name))
        self.pick_again()

    def pick_again(self) -> None:
        """New free ports for the servers whose port was picked here (none the same as another's)."""
        for name, port in zip(self.picked, free_ports(len(self.picked)), strict=True):
            setattr(self, name, port)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in SERVICE_NAMES}


class WorldError(RuntimeError):
    pass


class PortInUse(WorldError):
    """A port the world needs is taken: which, by what (when this machine says), and the world it belongs
    to if it is a local world's server."""

    def __init__(self, port: int, what: str):
        self.port, self.what = port, what
        holder = port_holder(port)
        self.holder_root: Path | None = None
        by = ""
        if holder is not None:
            pid, command = holder
            by = f" by pid {pid} ({command[:100]})"
            if "dw_local." in command:
                # A local world's server writes its log to <root>/logs/<server>.log (see _start_one).
                try:
                    log = Path(os.readlink(f"/proc/{pid}/fd/1"))
                except OSError:
                    log = None
                if log is not None and log.parent.name == "logs" and log.stem in SERVICE_NAMES:
                    self.holder_root = log.parent.parent
                    by += f", a server of the local world under {self.holder_root}"
        super().__init__(f"port {port} ({what}) is in use{by}")


class ForeignSnowflake(PortInUse):
    """Another local world's Snowflake answers on this world's port: it took the port between the pick and
    this world's bind (the suite builds templates side by side). A port taken, so a picked one is picked
    again (``LocalWorld.start``)."""

    def __init__(self, port: int, theirs: str):
        WorldError.__init__(
            self,
            f"port {port}: another local Snowflake answers there (data in {theirs}), not this world's; "
            "start it again on free ports",
        )
        self.port, self.what = port, SERVICE_NAMES["snowflake"]
        self.holder_root = Path(theirs).parent


def port_holder(port: int) -> tuple[int, str] | None:
    """The process listening on ``port`` and its command line, if this machine says (Linux's /proc; only
    this user's processes are visible)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "0100007F:B7AD", state 0A = LISTEN, inode in column 10.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return int(proc.name), command.strip()
        except OSError:
            continue
    return None


def check_port(port: int, what: str) -> None:
    """Raises :class:`PortInUse` unless ``port`` is free on the loopback interface."""
    with socket.socket() as s:
        # As uvicorn binds: a port in TIME_WAIT after a world stopped is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise PortInUse(port, what) from None


def process_start(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), or ``None`` if no such process runs (a zombie has
    ended): with the pid, it names one process, not whichever later process the kernel gave that pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Its members may be zombies their parents have yet to reap: alive only if one still runs.
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def stop_groups(pgids: list[int], sig: int = signal.SIGTERM, timeout: float = STOP_SECONDS) -> None:
    """Sends ``sig`` to each process group (a server and whatever it started) and waits for them to end;
    what is still running after ``timeout`` is killed."""
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + timeout
    while any(_group_alive(g) for g in pgids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pgid in pgids:
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
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
        command: str | None = None,
        clock: bool = False,
        snowflake_sign_in: str = "key_pair",
    ):
        self.root = Path(root).resolve()
        self.services = services
        # By default the servers die with the process that started them (a test run killed by a timeout
        # leaves no orphans); `world up --no-ui` keeps them for other shells.
        self.outlive_parent = outlive_parent
        # The command that runs the world in its own process (`world up`), if one does: `world down` stops it.
        self.command = command
        self.ports = ports or WorldPorts()
        self.project_file = Path(project_file or DISTRIBUTOR_DIR / "project.yaml").resolve()
        self.scheduler = scheduler
        # The world's one clock (world_clock.py): the Slack stand-in stamps its messages with it.
        self.clock = clock
        # "key_pair": the product's Snowflake user signs in only with its key pair (snowflake_auth.py), as
        # the product advises a deployment to (Snowflake is blocking password-only sign-ins): every process
        # of the world then signs in as a deployment should, and none warns of a password. "password": any
        # password, for a test of that path.
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

    def check_ports(self) -> None:
        """Raises :class:`PortInUse` for the first of the world's ports another process holds."""
        for name in self.services:
            check_port(getattr(self.ports, name), SERVICE_NAMES[name])

    def start(self, timeout: float = 60.0) -> LocalWorld:
        """Starts the world's servers. A port picked free here (not given) that another process takes before
        its server binds it (a free port stays free only until someone binds it: the suite's workers start
        worlds side by side) is picked again, up to ``PORT_ATTEMPTS`` times; a given port that is taken
        raises :class:`PortInUse` at once."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start(timeout)
            except PortInUse as e:
                picked = {getattr(self.ports, name) for name in self.ports.picked}
                if attempt == PORT_ATTEMPTS or e.port not in picked:
                    raise
                self.ports.pick_again()
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start(self, timeout: float) -> LocalWorld:
        # Before anything starts: a taken port is named, not found in a server's log after it died.
        self.check_ports()
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true"}
        if self.snowflake_sign_in == "key_pair" and "snowflake" in self.services:
            self._register_key_pair()
        try:
            # The simulator connects to Snowflake as it starts: it starts once Snowflake answers, the others
            # start together (each server's start is mostly its imports).
            commands = self._commands()
            first = [n for n in self.services if n != "coalesce"]
            for name in first:
                self._start_one(name, commands[name], self._server_env(name, env))
            if "snowflake" in first:
                self._wait("snowflake", self._probe("snowflake"), timeout)
            if "coalesce" in self.services:
                self._start_one("coalesce", commands["coalesce"], self._server_env("coalesce", env))
            for name in self.services:
                self._wait(name, self._probe(name), timeout)
        except BaseException:
            self.stop()
            raise
        self._write_state()
        return self

    def _register_key_pair(self) -> None:
        """The product user's key pair, made once per world (a copy of a seeded world keeps its own), its
        public half registered as the user's only sign-in."""
        from dw_local import snowflake_auth

        key = self._private_key_path
        if key.exists():
            from cryptography.hazmat.primitives import serialization

            public_key = (
                _private_key(str(key))
                .public_key()
                .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            )
        else:
            public_key = snowflake_auth.new_key_pair(key)
        snowflake_auth.register_user(self.root / "snowflake", LOCAL_SNOWFLAKE_USER, ["KEYPAIR"], public_key)

    def restart(self, name: str, timeout: float = 60.0) -> None:
        """Kill one server (SIGKILL, as a crash would) and start it again on the same port."""
        proc = self._procs.pop(name)
        proc.kill()
        proc.wait()
        env = {**os.environ, "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true"}
        self._start_one(name, self._commands()[name], self._server_env(name, env))
        self._wait(name, self._probe(name), timeout)
        self._write_state()

    def add_process(self, name: str, proc: subprocess.Popen) -> None:
        """Another process of the world (e.g. the product's approvals endpoint): stopped with the servers."""
        self._procs[name] = proc
        self._write_state()

    def _server_env(self, name: str, env: dict[str, str]) -> dict[str, str]:
        """The simulator and the Snowflake keep the world's clock themselves (an offset from real time);
        the Slack stand-in follows it when the world runs on its clock."""
        if name in ("snowflake", "coalesce") or not self.clock:
            return without_clock(env)
        return {**env, **clock_env(self.root, env)}

    def _probe(self, name: str):
        return {
            "snowflake": self._snowflake_up,
            "coalesce": lambda: self._http_up(f"{self.coalesce_url}/_sim/health"),
            "slack": lambda: self._http_up(f"{self.slack_url}/_sink/health"),
        }[name]

    def _start_one(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        path = self.root / "logs" / f"{name}.log"
        # A fork server's child skips Python's start-up, and with it the world clock's hook.
        forked = env.get("DW_LOCAL_FORK_SERVER", "1") != "0" and CLOCK_FILE_ENV not in env
        if not self.outlive_parent and forked:
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
                preexec_fn=child_setup(die=not self.outlive_parent),
            )

    def _wait(self, name: str, probe, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._procs[name]
            if proc.poll() is not None:
                port = getattr(self.ports, name)
                log = (self.root / "logs" / f"{name}.log").read_text(errors="replace")
                if "address already in use" in log.lower() and port_holder(port):
                    raise PortInUse(port, SERVICE_NAMES[name])  # taken since the check
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
        """This world's Snowflake answers on its port (not another world's server that took the port)."""
        from dw_dagster.coalesce.http_client import tls_context

        try:
            # Polled every 0.1 s while the server starts: httpx builds a TLS context for every client it makes
            # (21 ms of CPU a call, even for http), so each poll is given the one context of the process.
            url = f"http://127.0.0.1:{self.ports.snowflake}/_local/health"
            answer = httpx.get(url, timeout=1.0, verify=tls_context())
        except httpx.HTTPError:
            return False
        if answer.status_code != 200:
            return False
        theirs = answer.json().get("data_dir")
        if theirs != str((self.root / "snowflake").resolve()):
            raise ForeignSnowflake(self.ports.snowflake, str(theirs))
        return True

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
        pids = {name: p.pid for name, p in self._procs.items()}
        state = {
            "ports": self.ports.as_dict(),
            "pids": pids,
            # Each process's start, so that `world down` never signals a later process given the same pid.
            "started": {name: process_start(pid) for name, pid in pids.items()},
            # The process that started the world; a command (`world up`) is stopped with it.
            "owner": {"pid": os.getpid(), "started": process_start(os.getpid()), "command": self.command},
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
    def stop_running(cls, root: Path, timeout: float = STOP_SECONDS) -> list[str] | None:
        """Stops the world another process started under ``root`` and returns what was stopped (``None``
        when no world is recorded there): the Dagster UI of ``world up`` first, after which that ``world up``
        ends by itself (one still setting up is told to end), then every server left, each with whatever it
        started. Only processes that are the very ones recorded (pid and start time) are signalled."""
        state = cls.read_state(root)
        if state is None:
            return None
        started = state.get("started", {})
        running = {
            name: pid for name, pid in state["pids"].items()
            if process_start(pid) is not None and process_start(pid) == started.get(name, process_start(pid))
        }  # fmt: skip
        stopped = sorted(running, key=lambda name: name != "dagster-ui")
        owner = state.get("owner") or {}
        pid = owner.get("pid")
        command = bool(
            owner.get("command") and pid and pid != os.getpid() and process_start(pid) == owner.get("started")
        )
        if "dagster-ui" in running:
            stop_groups([running.pop("dagster-ui")], timeout=timeout)  # it stops its webserver and daemon
        elif command:
            os.kill(pid, signal.SIGTERM)
        if command:
            deadline = time.monotonic() + timeout
            while process_start(pid) is not None and time.monotonic() < deadline:
                time.sleep(0.1)
            if process_start(pid) is not None:
                os.kill(pid, signal.SIGKILL)
            stopped.append(owner["command"])
        stop_groups(list(running.values()), timeout=timeout)
        (Path(root) / "world.json").unlink(missing_ok=True)
        return stopped
