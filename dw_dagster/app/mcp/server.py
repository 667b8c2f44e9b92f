"""The MCP server: the tools of each concern on one :class:`MCPServer`, over stdio or streamable HTTP."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from dw_dagster.app.mcp import action_tools, history_tools, incident_tools, lineage_tools, proposal_tools
from dw_dagster.app.mcp.workspace import Workspace

INSTRUCTIONS = """dw-dagster watches what the Coalesce Jobs build on Snowflake. Coalesce's own MCP answers what
is deployed and what ran; this server answers what that run did to the data and what the fix is: the
incidents (one per cause), their diagnosis and blast radius, lineage with the systems around the pipeline,
what each check recorded night by night, and the proposed fixes with who still has to approve them.
It acts within the gates (run checks, diagnose, leave a note, ask for a fix); nothing approves: approvals
are given by the owners themselves, verified, in Slack or with `dw-dagster approve`."""


def build_server(workspace: Workspace | None = None) -> MCPServer:
    from importlib.metadata import version

    ws = workspace or Workspace()
    server = MCPServer(name="dw-dagster", instructions=INSTRUCTIONS, version=version("dw-dagster"),
                       log_level="WARNING")  # fmt: skip
    for concern in (incident_tools, lineage_tools, history_tools, proposal_tools, action_tools):
        concern.register(server, ws)
    return server


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` for loopback) to its parts, or a ``ValueError`` saying what was expected."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    return host.strip("[]") or "127.0.0.1", int(port)
