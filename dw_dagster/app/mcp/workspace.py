"""What the tools read, opened on first use: the server starts without touching the warehouse, the context
file or the Coalesce state, and each tool opens only what it needs.

Every failure to open or to read is a :class:`ToolError` whose message says what is wrong and how to fix
it; the values of secret variables never appear in it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|PRIVATE|_KEY$|PASSPHRASE", re.IGNORECASE)


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` without the value of any secret-looking environment variable (a connector's error can echo
    the connection string it was given)."""
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if SECRET_NAME.search(name) and len(value) >= 4:
            text = text.replace(value, "***")
    return text


class Workspace:
    """The operator view (:class:`~dw_dagster.app.operations.Operations`) and the lineage graph, built lazily."""

    @cached_property
    def ops(self):
        import click

        from dw_dagster.app.operations import Operations
        from dw_dagster.config import DwConfigError

        try:
            return Operations()
        except (click.ClickException, DwConfigError) as e:
            raise ToolError(f"dw-dagster is not configured: {redact(_message(e))}") from None

    @cached_property
    def metrics(self):
        from dw_dagster.app.settings import Settings
        from dw_dagster.checks.metrics import MetricsFile, load_metrics_file
        from dw_dagster.config import DwConfigError

        try:
            settings = Settings.from_env()
            return load_metrics_file(settings.metrics_file) if settings.metrics_file else MetricsFile()
        except DwConfigError as e:
            raise ToolError(f"the metrics file: {redact(str(e))}") from None

    @cached_property
    def lineage(self):
        """The asset and column graph of the code location's own definitions (Coalesce nodes and the context
        file's systems), from the Coalesce state the code location loads: no warehouse query."""
        import dagster as dg

        from dw_dagster.app.definitions import load_definitions
        from dw_dagster.context.lineage import LineageGraph

        try:
            # The state lives in the instance (DAGSTER_HOME), as the code server reads it.
            specs = load_definitions(dg.DagsterInstance.get()).resolve_all_asset_specs()
        except Exception as e:  # noqa: BLE001 - a config or state problem, told as such
            raise ToolError(
                f"could not load the code location's assets ({type(e).__name__}): {redact(_message(e))}"
            ) from None
        return LineageGraph(specs)

    @contextmanager
    def warehouse_read(self, what: str) -> Iterator[None]:
        """Reads from the ops schema; a connector failure becomes a clear tool error."""
        try:
            yield
        except ToolError:
            raise
        except Exception as e:  # noqa: BLE001 - the connector's many error types, all told the same way
            raise ToolError(
                f"could not read {what} from the warehouse ({type(e).__name__}): {redact(_message(e))}. "
                "Check SNOWFLAKE_ACCOUNT/SNOWFLAKE_HOST, the credentials and that the warehouse is reachable."
            ) from None


def _message(e: Any) -> str:
    text = getattr(e, "message", None) or str(e)
    return " ".join(str(text).split())[:500]
