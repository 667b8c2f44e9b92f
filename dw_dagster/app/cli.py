"""The ``dw-dagster`` command.

Each command lives in the module of its concern and is named here (``PRODUCT_COMMANDS``) or, for other
installed packages, in the ``dw_dagster.app.cli`` entry-point group (the local world names ``world``, ``slack``,
``demo`` and ``scenario``), so product code never imports them. A command's module is imported only when
that command runs: ``dw-dagster --help`` reads each command's summary from its module's source, without
importing it, and so starts in well under a second (``benchmarks/bench_cli_startup.py``).
"""

from __future__ import annotations

import ast
import importlib
import logging
import sys

import click

ENTRY_POINT_GROUP = "dw_dagster.app.cli"


def _source(module: str) -> str | None:
    """The source of ``module``, found as the import system would but without importing its parent
    packages (``importlib.util.find_spec`` runs them, and a package's ``__init__`` may import dagster)."""
    parts = module.split(".")
    spec, path = None, None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name)
        if loaded is not None:
            spec = loaded.__spec__
        else:
            finders = (f for f in sys.meta_path if hasattr(f, "find_spec"))
            spec = next((found for f in finders if (found := f.find_spec(name, path)) is not None), None)
        if spec is None:
            return None
        path = spec.submodule_search_locations
    return spec.loader.get_source(module) if spec and spec.loader else None  # type: ignore[union-attr]


def _summary(target: str) -> str:
    """The first line of the docstring of the function ``target`` ("module:attribute") defines, read from
    the module's source: what ``--help`` lists, without importing the module."""
    module, _, attr = target.partition(":")
    try:
        source = _source(module)
    except (ImportError, ValueError):
        return ""
    for node in ast.parse(source or "").body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attr:
            doc = ast.get_docstring(node) or ""
            return doc.strip().split("\n\n")[0].replace("\n", " ")
    return ""


class LazyCommand(click.Command):
    """Stands in for a command in the listing of ``--help``: its name and summary, nothing imported."""

    def __init__(self, name: str, target: str):
        super().__init__(name, help=_summary(target))


class LazyGroup(click.Group):
    """A group whose commands live in the modules of their concern, imported only when one is called:
    ``lazy_commands`` (name -> "module:attribute") and the ``dw_dagster.app.cli`` entry points."""

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands
        self._plugins: dict[str, str] | None = None

    @property
    def plugins(self) -> dict[str, str]:
        if self._plugins is None:
            from importlib.metadata import entry_points

            self._plugins = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
        return self._plugins

    def _targets(self) -> dict[str, str]:
        return {**self.plugins, **self.lazy_commands}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._targets()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._targets().get(cmd_name)
        if target is not None and cmd_name not in self.commands:
            module, _, attr = target.partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The listing shows each command's summary without loading it (and its imports).
        targets = self._targets()
        shown = {
            name: self.commands.get(name) or LazyCommand(name, targets[name])
            for name in self.list_commands(ctx)
        }
        limit = formatter.width - 6 - max((len(name) for name in shown), default=0)
        rows = [(name, cmd.get_short_help_str(limit)) for name, cmd in shown.items()]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# Product commands, each in the module of its concern: name -> "module:attribute". One line per command.
PRODUCT_COMMANDS = {
    "approve": "dw_dagster.app.commands.remediation:approve",
    "reject": "dw_dagster.app.commands.remediation:reject",
    "stop": "dw_dagster.app.commands.remediation:stop",
    "resume": "dw_dagster.app.commands.remediation:resume",
    "undo": "dw_dagster.app.commands.remediation:undo",
    "proposals": "dw_dagster.app.commands.remediation:proposals",
    "incidents": "dw_dagster.app.commands.incidents:incidents",
    "ops": "dw_dagster.app.commands.ops:ops",
    "baseline": "dw_dagster.app.commands.checks:baseline",
    "approver-key": "dw_dagster.app.commands.remediation:approver_key",
    "audit": "dw_dagster.app.commands.audit:audit",
    "serve-approvals": "dw_dagster.app.slack_endpoint:serve",
    "mcp": "dw_dagster.app.commands.mcp:mcp",
    "cost": "dw_dagster.app.commands.cost:cost",
}


@click.group(cls=LazyGroup, lazy_commands=PRODUCT_COMMANDS)
@click.option("-v", "--verbose", is_flag=True, help="Log debug output.")
def main(verbose: bool) -> None:
    """Production operations for Coalesce pipelines over Snowflake."""
    level = logging.DEBUG if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(message)s")
    # The integration logs through Dagster's logger, which brings its own handler and level.
    for name in ("dagster", "dagster.builtin"):
        logging.getLogger(name).setLevel(level)


@main.group()
def coalesce() -> None:
    """The Coalesce workspace this code location watches."""


@coalesce.command("refresh")
def coalesce_refresh() -> None:
    """Fetch environments, nodes and jobs from the Coalesce API into the state that loading reads (the
    Dagster instance's definitions state, as `dg utils refresh-defs-state` keeps it)."""
    import os

    import dagster as dg

    from dw_dagster.app.project import refresh_coalesce_state

    if not os.environ.get("DAGSTER_HOME"):
        raise click.UsageError(
            "DAGSTER_HOME: not set; the Coalesce state is kept in the Dagster instance the code location uses"
        )
    with dg.DagsterInstance.get() as instance:
        for component in refresh_coalesce_state(instance):
            click.echo(f"refreshed {component.defs_state_config.key}")


def run() -> None:
    try:
        main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except Exception as e:
        # Imported only when something went wrong: a configuration error is a message, not a traceback.
        from dw_dagster.coalesce.errors import CoalesceConfigError, CoalesceStateError
        from dw_dagster.config import DwConfigError

        if not isinstance(e, DwConfigError | CoalesceConfigError | CoalesceStateError):
            raise
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
