"""``dw-dagster cost report``: the top spenders of a window, read from Snowflake's account usage views."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import click


@click.group()
def cost() -> None:
    """Snowflake credits per Coalesce Job, node and run, and per dw-dagster check (docs/cost.md)."""


@cost.command()
@click.option(
    "--since", "since", type=click.DateTime(["%Y-%m-%d"]), help="First business date (default: a week ago)."
)
@click.option(
    "--until", "until", type=click.DateTime(["%Y-%m-%d"]), help="Last business date (default: today)."
)
@click.option(
    "--top", "top", type=click.IntRange(1, 500), default=10, show_default=True, help="How many spenders."
)
@click.option("--json", "as_json", is_flag=True, help="Print the attribution as JSON.")
def report(since: datetime | None, until: datetime | None, top: int, as_json: bool) -> None:
    """Print the top spenders from business date SINCE to UNTIL (the metrics file's business day)."""
    from snowflake.connector.errors import ProgrammingError

    from dw_dagster.app.settings import Settings
    from dw_dagster.checks import load_metrics_file
    from dw_dagster.checks.metrics import MetricsFile
    from dw_dagster.config import DwConfigError
    from dw_dagster.cost.attribution import attribute
    from dw_dagster.cost.history import AccountUsage, read_query_costs
    from dw_dagster.cost.night import night_window
    from dw_dagster.warehouse.connections import WarehouseUnavailable
    from dw_dagster.warehouse.resources import warehouse_from_env

    try:
        settings = Settings.from_env()
        metrics = load_metrics_file(settings.metrics_file) if settings.metrics_file else MetricsFile()
        views = AccountUsage.from_env()
    except DwConfigError as e:
        raise click.ClickException(str(e)) from e
    business_day = metrics.business_day
    last = until.date() if until else business_day.of(datetime.now(UTC))
    first = since.date() if since else last - timedelta(days=6)
    if first > last:
        raise click.ClickException(f"--since {first} is after --until {last}")
    start, _ = night_window(business_day, first)
    _, end = night_window(business_day, last)
    try:
        with warehouse_from_env().tagged_connection("cli.cost_report", job="cost_report") as conn:
            costs = read_query_costs(conn.cursor(), views, start, end)
    except ProgrammingError as e:
        raise click.ClickException(
            f"cannot read {views.view('QUERY_ATTRIBUTION_HISTORY')}: {e.msg} (dw-dagster's role needs "
            "IMPORTED PRIVILEGES on the SNOWFLAKE database, or DW_ACCOUNT_USAGE naming a copy; docs/cost.md)"
        ) from e
    except (DwConfigError, WarehouseUnavailable) as e:
        raise click.ClickException(str(e)) from e
    attribution = attribute(costs)
    if as_json:
        click.echo(attribution.model_dump_json(indent=2))
        return
    click.echo(render(attribution, first, last, top))


def render(attribution, first: date, last: date, top: int) -> str:
    window = first.isoformat() if first == last else f"{first.isoformat()} to {last.isoformat()}"
    lines = [
        f"Snowflake credits, business dates {window}: {attribution.total_credits:.4f} credits "
        f"over {attribution.queries} queries",
        "",
        "Top spenders (nodes, dw-dagster checks and diagnosis, untagged):",
    ]
    total = attribution.total_credits or 1.0
    for i, spend in enumerate(attribution.top(top), 1):
        runs = (
            f"  runs {', '.join(spend.runs[:4])}{'...' if len(spend.runs) > 4 else ''}" if spend.runs else ""
        )
        lines.append(
            f"{i:>3}. {spend.spender:<48} {spend.credits:>10.4f}  {100 * spend.credits / total:5.1f}%"
            f"  {spend.queries} queries{runs}"
        )
    if attribution.jobs:
        lines += ["", "Coalesce Jobs:"]
        lines += [
            f"     {s.spender:<48} {s.credits:>10.4f}  {len(s.runs)} runs" for s in attribution.jobs[:top]
        ]
    if attribution.runs:
        lines += ["", "Costliest runs:"]
        lines += [f"     {s.spender:<48} {s.credits:>10.4f}" for s in attribution.runs[: min(top, 5)]]
    if not attribution.queries:
        lines += ["", "No attributed queries in the window (the views lag up to 8 hours; see docs/cost.md)."]
    return "\n".join(lines)
