"""``dw-dagster mcp``: the MCP server for coding agents, on stdio (default) or streamable HTTP."""

from __future__ import annotations

import click


@click.command("mcp")
@click.option(
    "--http",
    "http",
    default=None,
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (:PORT: loopback). Requires "
    "DW_MCP_TOKEN, the bearer token every request must carry.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME[:PORT]",
    help="A Host header the HTTP server accepts besides loopback (NAME:* for any port); repeat for "
    "more. Default: DW_MCP_ALLOWED_HOSTS (comma-separated). Required with a 0.0.0.0 bind.",
)
@click.option(
    "--allowed-origin",
    "allowed_origins",
    multiple=True,
    metavar="ORIGIN",
    help="An Origin header accepted besides those of the allowed hosts (e.g. https://ide.example); "
    "default: DW_MCP_ALLOWED_ORIGINS.",
)
def mcp(http: str | None, allowed_hosts: tuple[str, ...], allowed_origins: tuple[str, ...]) -> None:
    """Serve dw-dagster's incidents, lineage, check history and proposals to a coding agent (docs/mcp.md)."""
    try:
        from dw_dagster.app.mcp.server import (
            HttpSettings,
            HttpSettingsError,
            build_server,
            parse_http,
            serve_http,
        )
    except ModuleNotFoundError as e:
        # The MCP SDK is an extra (pyproject.toml): a wheel installed without it says how to get it.
        if e.name != "mcp" and not (e.name or "").startswith("mcp."):
            raise
        raise click.ClickException(
            "the MCP server needs the 'mcp' extra, not installed here: pip install 'dw-dagster[mcp]'"
        ) from None

    if http is None:
        build_server().run("stdio")
        return
    try:
        host, port = parse_http(http)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--http") from None
    try:
        settings = HttpSettings.resolve(host, port, allowed_hosts, allowed_origins)
    except HttpSettingsError as e:
        raise click.UsageError(str(e)) from None
    click.echo(
        f"dw-dagster MCP server at {settings.url}/mcp; bearer token from DW_MCP_TOKEN; "
        f"Host headers accepted: {', '.join(settings.allowed_hosts)}",
        err=True,
    )
    serve_http(settings)
