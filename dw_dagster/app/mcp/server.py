"""The MCP server: the tools of each concern on one :class:`MCPServer`, over stdio or streamable HTTP.

Over HTTP the server answers only a request that carries the deployment's bearer token (``DW_MCP_TOKEN``)
and names an allowed host, from an allowed origin if any, on every bind: the SDK turns its Host and Origin
checks (against DNS rebinding) on by itself only on a loopback bind, and has no authentication of its own.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from dw_dagster.app.mcp import action_tools, history_tools, incident_tools, lineage_tools, proposal_tools
from dw_dagster.app.mcp.workspace import Workspace

INSTRUCTIONS = """dw-dagster watches what the Coalesce Jobs build on Snowflake. Coalesce's own MCP answers what
is deployed and what ran; this server answers what that run did to the data and what the fix is: the
incidents (one per cause), their diagnosis and blast radius, lineage with the systems around the pipeline,
what each check recorded night by night, and the proposed fixes with who still has to approve them.
It acts within the gates (run checks, diagnose, leave a note, ask for a fix); nothing approves: approvals
are given by the owners themselves, verified, in Slack or with `dw-dagster approve`."""


TOKEN_ENV = "DW_MCP_TOKEN"
ALLOWED_HOSTS_ENV = "DW_MCP_ALLOWED_HOSTS"
ALLOWED_ORIGINS_ENV = "DW_MCP_ALLOWED_ORIGINS"
MIN_TOKEN_LENGTH = 32
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""Host headers a loopback client sends, whatever the port: always allowed."""


class HttpSettingsError(ValueError):
    """The HTTP server cannot start safely as configured; the message says what to set."""


class StaticTokenVerifier:
    """The SDK's ``TokenVerifier`` for one shared secret: a request carries it as ``Authorization: Bearer``."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if not hmac.compare_digest(token.encode(), self._token):
            return None
        return AccessToken(token=token, client_id="dw-dagster-mcp", scopes=[])


@dataclass(frozen=True)
class HttpSettings:
    """Who the HTTP server answers: the holders of ``token``, through ``allowed_hosts`` (Host header values,
    ``name:port`` or ``name:*``), from ``allowed_origins`` when a browser sends an Origin."""

    host: str
    port: int
    token: str
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]

    @classmethod
    def resolve(
        cls,
        host: str,
        port: int,
        hosts: Sequence[str] = (),
        origins: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> HttpSettings:
        """The settings for a bind to ``host:port``: the token from ``DW_MCP_TOKEN``, the allowed hosts and
        origins given (else from ``DW_MCP_ALLOWED_HOSTS`` / ``DW_MCP_ALLOWED_ORIGINS``, comma-separated) over
        the loopback names; a wildcard bind must name the host its clients use."""
        env = os.environ if env is None else env
        token = env.get(TOKEN_ENV, "").strip()
        if len(token) < MIN_TOKEN_LENGTH:
            raise HttpSettingsError(
                f"{TOKEN_ENV}: {'not set' if not token else f'{len(token)} characters'}; over HTTP the server "
                f"answers only requests with this bearer token, at least {MIN_TOKEN_LENGTH} characters (e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`); give it to clients as "
                "`Authorization: Bearer <token>`"
            )
        named = list(hosts) or _split(env.get(ALLOWED_HOSTS_ENV, ""))
        wildcard = host in ("0.0.0.0", "::", "")
        if wildcard and not named:
            raise HttpSettingsError(
                f"--http {host}:{port} listens on every interface: name the host clients reach it by with "
                f"--allowed-host (or {ALLOWED_HOSTS_ENV}), e.g. --allowed-host dw-dagster.internal:{port}; "
                "a request naming any other host is refused"
            )
        bound = [] if wildcard else [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        allowed = tuple(dict.fromkeys([*LOOPBACK_HOSTS, *bound, *named]))
        given_origins = list(origins) or _split(env.get(ALLOWED_ORIGINS_ENV, ""))
        derived = [f"{scheme}://{h}" for h in allowed for scheme in ("http", "https")]
        return cls(host, port, token, allowed, tuple(dict.fromkeys([*derived, *given_origins])))

    def transport_security(self) -> TransportSecuritySettings:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(self.allowed_hosts),
            allowed_origins=list(self.allowed_origins),
        )

    def auth(self) -> AuthSettings:
        # The token is the deployment's own: no authorization server issues it and no metadata about one is
        # published (resource_server_url None); the SDK requires an issuer URL all the same.
        return AuthSettings(issuer_url=self.url, resource_server_url=None)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_server(workspace: Workspace | None = None, http: HttpSettings | None = None) -> MCPServer:
    """The server with every concern's tools; with ``http``, requests must carry its bearer token."""
    from importlib.metadata import version

    ws = workspace or Workspace()
    auth = {"auth": http.auth(), "token_verifier": StaticTokenVerifier(http.token)} if http else {}
    server = MCPServer(
        name="dw-dagster",
        instructions=INSTRUCTIONS,
        version=version("dw-dagster"),
        log_level="WARNING",
        **auth,
    )
    for concern in (incident_tools, lineage_tools, history_tools, proposal_tools, action_tools):
        concern.register(server, ws)
    return server


def serve_http(http: HttpSettings, workspace: Workspace | None = None) -> None:
    """Serves streamable HTTP at ``http.url``/mcp, with the token, Host and Origin checks on."""
    build_server(workspace, http).run(
        "streamable-http", host=http.host, port=http.port, transport_security=http.transport_security()
    )


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` for loopback) to its parts, or a ``ValueError`` saying what was expected."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    return host.strip("[]") or "127.0.0.1", int(port)
