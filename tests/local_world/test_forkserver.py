"""The fork server: a world's servers forked from one process that imported them once, which stays
single-threaded (forking is safe only so), reports each server's exit, and is started again if it died."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dw_local import forkserver
from dw_local.world import LocalWorld, WorldError


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _running(pid: int) -> bool:
    # Gone, or a zombie its new parent has yet to reap.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_worlds_are_forked_from_one_single_threaded_server(tmp_path: Path) -> None:
    servers = set()
    for name in ("a", "b"):
        with LocalWorld(tmp_path / name, services=("snowflake", "slack")) as lw:
            with lw.snowflake.connect() as conn:
                assert conn.cursor().execute("SELECT 1").fetchone() == (1,)
            assert httpx.get(f"{lw.slack_url}/_sink/health", timeout=5).status_code == 200
            servers |= {_parent(p.pid) for p in lw._procs.values()}
    (server,) = servers
    assert server == forkserver._server.proc.pid
    assert _threads(server) == 1, "a fork server with threads cannot fork safely"


def test_a_server_that_fails_says_so_with_its_exit_code_and_log(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "w", services=("slack",))
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "slack").write_text("a file where the stand-in keeps its folder")
    with pytest.raises(WorldError, match=r"slack server exited with code 1; see .*slack\.log"):
        world.start(timeout=30)
    assert "Traceback" in (tmp_path / "w" / "logs" / "slack.log").read_text()


def test_a_killed_server_is_reaped_and_restarted(tmp_path: Path) -> None:
    with LocalWorld(tmp_path / "w", services=("slack",)) as lw:
        first = lw._procs["slack"]
        lw.restart("slack")
        assert first.returncode == -signal.SIGKILL
        assert httpx.get(f"{lw.slack_url}/_sink/health", timeout=5).status_code == 200
        assert lw._procs["slack"].pid != first.pid


def test_a_dead_fork_server_is_started_again(tmp_path: Path) -> None:
    with LocalWorld(tmp_path / "a", services=("slack",)) as lw:
        old = forkserver._server
        orphan = lw._procs["slack"]
        old.proc.kill()
        old.proc.wait()
        assert old.folder.exists()
        # Its servers die with it, and say so.
        assert orphan.wait(timeout=10) == -signal.SIGTERM
        deadline = time.monotonic() + 10
        while _running(orphan.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(orphan.pid)
    with LocalWorld(tmp_path / "b", services=("slack",)) as lw:
        assert forkserver._server is not old
        assert httpx.get(f"{lw.slack_url}/_sink/health", timeout=5).status_code == 200
    assert not old.folder.exists(), "a killed fork server's folder is removed when it is replaced"


def test_a_pid_forked_again_has_no_exit_until_its_own(tmp_path: Path) -> None:
    """The kernel reuses pids: a server forked under a pid an earlier, stopped server had must not be read
    as exited with that server's code (CI saw a new world's Snowflake "exited with code -15")."""
    # In a process of its own: ``Children`` reaps any child, which would take the test process's own.
    script = """
import os, signal, time
from dw_local.forkserver import Children

children = Children()
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a server's child of the fork server has it
    time.sleep(30)
    os._exit(0)
children.forked(pid)
assert children.returncode(pid) is None
os.kill(pid, signal.SIGTERM)
deadline = time.monotonic() + 10
while children.returncode(pid) is None and time.monotonic() < deadline:
    time.sleep(0.02)
assert children.returncode(pid) == -signal.SIGTERM, children.returncode(pid)
children.forked(pid)  # the same pid, handed to the next server
assert children.returncode(pid) is None
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_client_that_hangs_up_or_sends_garbage_does_not_end_the_fork_server(tmp_path: Path) -> None:
    with LocalWorld(tmp_path / "a", services=("slack",)):
        server = forkserver._server
    for payload in (b"", b"not json\n", b'{"op": "status"}\n'):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(str(server.path))
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(100)  # the server closed its end: the request was refused, not answered
    assert server.alive()
    with LocalWorld(tmp_path / "b", services=("slack",)) as lw:
        assert forkserver._server is server
        assert httpx.get(f"{lw.slack_url}/_sink/health", timeout=5).status_code == 200


def test_the_fork_server_dies_with_a_requester_that_ignores_sigterm(tmp_path: Path) -> None:
    """A requester started in the background (SIGINT ignored) that ran a Dagster job ignores SIGTERM too
    (Dagster maps it onto SIGINT's handler), and a child inherits an ignored signal: its fork server, which
    is told of its requester's end by SIGTERM, must still die with it, and its servers with it."""
    script = f"""
import os, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
from dw_local import forkserver
from dw_local.world import LocalWorld
lw = LocalWorld(__import__("pathlib").Path({str(tmp_path / "w")!r}), services=("slack",)).start()
print(forkserver._server.proc.pid, lw._procs["slack"].pid, forkserver._server.folder, flush=True)
os._exit(0)  # gone without stopping anything, as a killed requester
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    server, slack, folder = done.stdout.split()
    deadline = time.monotonic() + 20
    while (_running(int(server)) or _running(int(slack))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(int(server)) and not _running(int(slack))
    assert Path(folder).name.startswith("dw-forkserver-") and not Path(folder).exists(), "its temp folder too"
