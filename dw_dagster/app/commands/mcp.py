"""``dw-dagster mcp``: the MCP server for coding agents, on stdio (default) or streamable HTTP."""

from __future__ import annotations

import click


@click.command("mcp")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.")  # fmt: skip
def mcp(http: str | None) -> None:
    """Serve dw-dagster's incidents, lineage, check history and proposals to a coding agent (docs/mcp.md)."""
    from dw_dagster.app.mcp.server import build_server, parse_http

    address = None
    if http is not None:
        try:
            address = parse_http(http)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--http") from None
    server = build_server()
    if address is None:
        server.run("stdio")
        return
    host, port = address
    click.echo(f"dw-dagster MCP server at http://{host}:{port}/mcp", err=True)
    server.run("streamable-http", host=host, port=port)
