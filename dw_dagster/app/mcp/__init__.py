"""An MCP server for engineers' coding agents: incidents, lineage, check history and proposals as tools
(``dw-dagster mcp``, docs/mcp.md). Read-only: approvals stay with people."""
