"""``dw-dagster mcp --http`` bound beyond loopback answers only a request that carries the deployment's
bearer token and names an allowed host (and, from a browser, an allowed origin). Before, such a server
answered any Host header (the SDK checks Host and Origin only on a loopback bind) and anyone at all.

The command runs as its own process on every interface (0.0.0.0), as docs/mcp.md shows it; the requests
are real HTTP on a socket."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from dw_dagster.app.cli import main
from dw_local.world import free_port

TOKEN = "t" * 20 + "-mcp-bearer-token-for-tests"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def _command() -> list[str]:
    script = Path(sys.executable).with_name("dw-dagster")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dw_dagster"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    port = free_port()
    env = {**os.environ, "DW_MCP_TOKEN": TOKEN, "DAGSTER_HOME": str(tmp_path_factory.mktemp("home"))}
    log = tmp_path_factory.mktemp("mcp") / "mcp.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*_command(), "mcp", "--http", f"0.0.0.0:{port}", "--allowed-host", f"mcp.example:{port}"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the MCP server did not start within 60 s"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp", port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _post(url: str, **headers: str) -> httpx.Response:
    return httpx.post(
        url,
        json=INITIALIZE,
        headers={
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            **headers,
        },
        timeout=10,
    )


def test_a_request_with_the_token_and_an_allowed_host_is_answered(server):
    url, port = server
    answer = _post(url, Host=f"mcp.example:{port}", Authorization=f"Bearer {TOKEN}")
    assert answer.status_code == 200 and '"name":"dw-dagster"' in answer.text.replace(" ", "")
    # A client on the machine itself names a loopback host.
    assert _post(url, Authorization=f"Bearer {TOKEN}").status_code == 200


def test_a_foreign_host_header_is_refused_even_with_the_token(server):
    """DNS rebinding: a page on evil.example resolving to this server's address reaches it as evil.example."""
    url, port = server
    answer = _post(url, Host=f"evil.example:{port}", Authorization=f"Bearer {TOKEN}")
    assert answer.status_code == 421 and "Invalid Host header" in answer.text


def test_a_request_without_the_token_or_with_another_is_refused(server):
    url, port = server
    bare = _post(url, Host=f"mcp.example:{port}")
    assert bare.status_code == 401 and "serverInfo" not in bare.text
    assert bare.headers["www-authenticate"].startswith("Bearer")
    assert _post(url, Host=f"mcp.example:{port}", Authorization=f"Bearer {TOKEN[:-1]}x").status_code == 401


def test_a_foreign_origin_is_refused(server):
    url, port = server
    answer = _post(
        url, Host=f"mcp.example:{port}", Origin="https://evil.example", Authorization=f"Bearer {TOKEN}"
    )
    assert answer.status_code == 403 and "Invalid Origin header" in answer.text
    allowed = _post(
        url, Host=f"mcp.example:{port}", Origin=f"https://mcp.example:{port}", Authorization=f"Bearer {TOKEN}"
    )
    assert allowed.status_code == 200


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--http", "127.0.0.1:8765"], {}, "DW_MCP_TOKEN: not set"),
        (["--http", "127.0.0.1:8765"], {"DW_MCP_TOKEN": "short"}, "DW_MCP_TOKEN: 5 characters"),
        (["--http", "0.0.0.0:8765"], {"DW_MCP_TOKEN": TOKEN}, "name the host clients reach it by"),
    ],
    ids=["no-token", "short-token", "wildcard-without-allowed-host"],
)
def test_the_http_server_refuses_to_start_without_a_token_or_with_any_host_allowed(args, env, expected):
    out = CliRunner().invoke(
        main, ["mcp", *args], env={"DW_MCP_TOKEN": "", "DW_MCP_ALLOWED_HOSTS": "", **env}
    )
    assert out.exit_code == 2 and expected in out.output
    assert TOKEN not in out.output, "the token is never printed"


def test_without_the_mcp_extra_the_command_says_which_extra_to_install():
    """A wheel installed without the ``mcp`` extra: the command names the extra, not a traceback (as if the
    SDK were absent: ``sys.modules['mcp'] = None`` makes importing it fail as a missing module does)."""
    code = "import sys; sys.modules['mcp'] = None; from dw_dagster.app.cli import run; sys.argv[0] = 'dw-dagster'; run()"
    out = subprocess.run([sys.executable, "-c", code, "mcp"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stderr == (
        "Error: the MCP server needs the 'mcp' extra, not installed here: pip install 'dw-dagster[mcp]'\n"
    ), out.stderr
