"""The composition root: every Dagster job, sensor, op wiring and component, the settings and project
loading, the code location's definitions, the `dw-dagster` command and its commands, and the MCP server. It is
the only package that imports the others all together; nothing below it imports it."""
