"""The `dw-dagster` commands, one module per concern (checks, incidents, remediation, cost, ops, mcp)."""
