"""Starts the local world's servers by forking a process that has already imported them.

A server's start is mostly its imports (fakesnow, DuckDB, sqlglot, the Snowflake connector): about 3 s of
CPU for a world's three servers, paid again for every world. A process that starts worlds one after another
(the test suite, ``scenario score``) asks a fork server instead: a child process that imports the servers'
modules once and forks one child per server, which runs its module as ``python -m`` would, with the
requester's environment, arguments, working directory and log file.

Forking is safe only while the fork server has one thread: it imports nothing that starts threads or opens
a database (``fakesnow.server`` makes an in-memory DuckDB at import, so each child imports it itself), and
it starts with OpenBLAS and pyarrow's jemalloc told not to start their own. Run as
``python -m dw_local.forkserver --socket PATH``; :func:`spawn` starts it on first use.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# What the servers import, minus what would start a thread or open a database (see the module's doc), and
# minus the modules run as ``__main__`` themselves (runpy would run a second copy beside the imported one).
PRELOAD = [
    "fakesnow.cursor", "fakesnow.instance", "fakesnow.arrow", "fakesnow.fakes", "fakesnow.copy_into",
    "uvicorn", "uvicorn.main", "starlette.applications", "starlette.routing", "httpx", "dw_local.account_usage",
    "dw_local.coalesce_sim.app", "dw_local.coalesce_sim.project", "dw_local.coalesce_sim.runner",
    "dw_local.coalesce_sim.simulator",
    # What each server otherwise imported after the fork, on its first statement or request (about 0.1 s of
    # CPU a server): sqlglot's dialects load on first use, uvicorn's protocols and anyio's backend at start.
    "sqlglot.dialects.duckdb", "sqlglot.dialects.snowflake", "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto", "anyio._backends._asyncio",
]  # fmt: skip
SINGLE_THREADED = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
START_TIMEOUT = 60.0
REQUEST_TIMEOUT = 10.0


def die_with_parent() -> None:
    # Linux: the process gets SIGTERM when the one that started it exits, however it exits.
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def default_signals() -> None:
    """SIGINT and SIGTERM as a fresh process has them. A process started in the background by a shell
    ignores SIGINT, and Dagster maps SIGTERM onto SIGINT's handler: a requester that ran a Dagster job hands
    both down ignored, and a child that ignores SIGTERM outlives ``dw-dagster world down``."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def child_setup(die: bool) -> Callable[[], None]:
    """A ``preexec_fn`` for the world's processes: default signals, and dying with this process if ``die``."""

    def setup() -> None:
        default_signals()
        if die:
            die_with_parent()

    return setup


# -- the fork server -----------------------------------------------------------------------------


def _run_child(request: dict[str, Any]) -> int:
    """In the forked child: become the server ``request`` asks for; returns its exit code."""
    os.setsid()
    die_with_parent()  # the fork server dies with the process that started it, its children with it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the fork server's own (it removes its folder)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["argv"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever ends the server, its log says why
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


class Children:
    """The fork server's children and how each ended, by pid.

    The kernel reuses a pid once its process is reaped (``pid_max`` is 32768 on many machines, and a long
    test run starts many processes): a pid forked again starts with no exit recorded, or a new server would
    read its predecessor's exit code and be taken for dead."""

    def __init__(self) -> None:
        self._exits: dict[int, int] = {}

    def forked(self, pid: int) -> None:
        self._exits.pop(pid, None)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._exits[pid] = os.waitstatus_to_exitcode(status)

    def returncode(self, pid: int) -> int | None:
        self.reap()
        return self._exits.get(pid)


def _answer(conn: socket.socket, listener: socket.socket, children: Children) -> None:
    line = conn.makefile("r").readline()
    if not line:
        return  # the client went away before asking
    request = json.loads(line)
    if request["op"] == "spawn":
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            os._exit(_run_child(request))
        children.forked(pid)
        reply: dict[str, Any] = {"pid": pid}
    else:
        reply = {"returncode": children.returncode(request["pid"])}
    conn.sendall((json.dumps(reply) + "\n").encode())


def serve(path: Path) -> None:
    # A process started in the background by a shell ignores SIGINT, and Dagster maps SIGTERM onto SIGINT's
    # handler: a requester that ran a Dagster job hands down SIGTERM ignored. The fork server must die with
    # its requester (PR_SET_PDEATHSIG, a SIGTERM) and its servers stop on SIGTERM; it takes its folder (the
    # socket, its log) with it, however its requester ended.
    def leave(*_: object) -> None:
        shutil.rmtree(path.parent, ignore_errors=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    for name in PRELOAD:
        __import__(name)
    from dw_local.snowflake_stages import keep_stages_in

    # Each Snowflake server forked from here keeps its stages with its data; the fork server's own (none are
    # put here) go with its folder, not in a folder fakesnow's import made and nobody removes.
    keep_stages_in(path.parent / "stages")
    children = Children()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: the client waits for the path, then connects.
    binding = path.with_suffix(".binding")
    listener.bind(str(binding))
    listener.listen(16)
    binding.rename(path)
    listener.settimeout(1.0)
    while True:
        children.reap()
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(REQUEST_TIMEOUT)
            try:
                _answer(conn, listener, children)
            except (OSError, ValueError, KeyError):
                # One client's broken request (gone mid-way, not JSON) must not end every world's servers.
                traceback.print_exc()


# -- the client ----------------------------------------------------------------------------------


class ForkServer:
    """A running fork server, a child of this process; it and its folder go when this process ends."""

    def __init__(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="dw-forkserver-"))
        self.folder = folder
        self.path = folder / "socket"
        env = {**os.environ, **SINGLE_THREADED}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dw_local.forkserver", "--socket", str(self.path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "forkserver.log", "ab"),  # noqa: SIM115 - owned by the child
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the local world's fork server did not start; see {folder / 'forkserver.log'}"
                )
            time.sleep(0.02)
        atexit.register(self.close)

    def close(self) -> None:
        """Stops the fork server (its servers die with it) and removes its folder."""
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(REQUEST_TIMEOUT)
            conn.connect(str(self.path))
            conn.sendall((json.dumps(body) + "\n").encode())
            return json.loads(conn.makefile("r").readline())


class ForkedProcess:
    """A server the fork server started, with the part of ``subprocess.Popen`` the local world uses."""

    def __init__(self, server: ForkServer, args: list[str], pid: int):
        self.server, self.args, self.pid = server, args, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if not self.server.alive():
                self.returncode = -signal.SIGTERM  # it died with the fork server
            else:
                self.returncode = self.server.request({"op": "status", "pid": self.pid})["returncode"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_server: ForkServer | None = None
_lock = threading.Lock()


def spawn(cmd: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
    """Starts ``cmd`` (``[python, "-m", module, *args]``) as a fork of the fork server, started on first use
    (and again if it died)."""
    global _server
    python, flag, module, *argv = cmd
    if flag != "-m":
        raise ValueError(f"the fork server runs modules (python -m ...), not {cmd!r}")
    with _lock:
        if _server is None or not _server.alive():
            if _server is not None:
                _server.close()  # a fork server that was killed left its folder
            _server = ForkServer()
        server = _server
    request = {"op": "spawn", "module": module, "argv": argv, "env": env, "log": str(log), "cwd": os.getcwd()}
    return ForkedProcess(server, cmd, server.request(request)["pid"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", type=Path, required=True)
    serve(parser.parse_args().socket)


if __name__ == "__main__":
    main()
