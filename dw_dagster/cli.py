"""The ``dw-dagster`` command.

Product commands live here. Other installed packages add theirs through the ``dw_dagster.cli`` entry-point
group (the local world adds ``world``, ``slack`` and ``demo``), so product code never imports them.
"""

from __future__ import annotations

import importlib
import logging
import sys
from importlib.metadata import entry_points

import click

from dw_dagster.config import DwConfigError


class LazyGroup(click.Group):
    """A group whose commands live in the modules of their concern, imported only when one is looked up."""

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            module, _, attr = self.lazy_commands[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


# Product commands, each in the module of its concern: name -> "module:attribute". One line per command.
PRODUCT_COMMANDS = {
    "approve": "dw_dagster.remediation.commands:approve",
    "reject": "dw_dagster.remediation.commands:reject",
    "stop": "dw_dagster.remediation.commands:stop",
    "resume": "dw_dagster.remediation.commands:resume",
    "undo": "dw_dagster.remediation.commands:undo",
    "proposals": "dw_dagster.remediation.commands:proposals",
    "incidents": "dw_dagster.incidents.commands:incidents",
    "ops": "dw_dagster.warehouse.commands:ops",
    "baseline": "dw_dagster.checks.commands:baseline",
    "approver-key": "dw_dagster.remediation.commands:approver_key",
    "serve-approvals": "dw_dagster.remediation.slack_endpoint:serve",
    "mcp": "dw_dagster.mcp.commands:mcp",
    "cost": "dw_dagster.cost.commands:cost",
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
    """Fetch environments, nodes and jobs from the Coalesce API into the state file that loading reads."""
    from dw_dagster.coalesce.state import refresh_state_file
    from dw_dagster.settings import Settings

    settings = Settings.from_env()
    data = refresh_state_file(settings)
    nodes = sum(len(e.nodes) for e in data.environments)
    click.echo(
        f"wrote {settings.coalesce_state_file}: {len(data.environments)} environment(s), {nodes} nodes, "
        f"{sum(len(e.jobs) for e in data.environments)} jobs"
    )


def _load_plugins() -> None:
    for ep in entry_points(group="dw_dagster.cli"):
        ep.load()(main)


def run() -> None:
    _load_plugins()
    try:
        main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except DwConfigError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
