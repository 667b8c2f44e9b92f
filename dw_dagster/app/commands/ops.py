"""``dw-dagster ops``: the ops schema's migration, as a command and as a function a deploy step calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from dw_dagster.warehouse.migrations import MigrationReport
    from dw_dagster.warehouse.ops import OpsSchema
    from dw_dagster.warehouse.resources import WarehouseResource


def deployment(env: Mapping[str, str] | None = None) -> tuple[WarehouseResource, OpsSchema]:
    """The warehouse and ops schema the code location uses, from ``env`` (default: this process's)."""
    from dw_dagster.app.settings import Settings
    from dw_dagster.checks import load_metrics_file
    from dw_dagster.checks.metrics import MetricsFile
    from dw_dagster.config import DwConfigError
    from dw_dagster.warehouse.ops import OpsSchema
    from dw_dagster.warehouse.resources import warehouse_from_env

    settings = Settings.from_env(None if env is None else dict(env))
    if not settings.database:
        raise DwConfigError("SNOWFLAKE_DATABASE: not set; the ops schema lives in that database")
    metrics = load_metrics_file(settings.metrics_file) if settings.metrics_file else MetricsFile()
    return warehouse_from_env(env, resolved=env is not None), OpsSchema(settings.database, metrics.ops_schema)


def migrate_deployment(env: Mapping[str, str] | None = None) -> MigrationReport:
    """``dw-dagster ops migrate`` as a function: creates or migrates the ops schema; idempotent."""
    from dw_dagster.warehouse.migrations import migrate

    return migrate(*deployment(env))


@click.group("ops")
def ops() -> None:
    """dw-dagster's own tables in the warehouse (the ops schema)."""


@ops.command("migrate")
def ops_migrate() -> None:
    """Create the ops schema or bring it to this version (run at each deploy; safe to run again)."""
    report = migrate_deployment()
    click.echo(report.summary())
    for statement in report.changes:
        click.echo(f"  {' '.join(statement.split())[:160]}")


@ops.command("status")
def ops_status() -> None:
    """The ops schema's recorded version and what it lacks; exits 1 when `ops migrate` is needed."""
    from dw_dagster.warehouse.migrations import SCHEMA_VERSION, state

    warehouse, schema = deployment()
    current = state(warehouse, schema)
    where = f"{schema.database}.{schema.schema}"
    recorded = "never migrated" if current.version is None else f"version {current.version}"
    click.echo(f"ops schema {where}: {recorded}; this dw-dagster needs version {SCHEMA_VERSION}")
    if current.missing:
        click.echo(f"  missing: {', '.join(current.missing)}")
    if current.retired:
        click.echo(f"  rows to move from: {', '.join(current.retired)}")
    if not current.current:
        raise click.ClickException("run `dw-dagster ops migrate`")
