"""Operator commands of the incident lifecycle: ``dw-dagster incidents list|show|resolve``."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from dw_dagster.app.commands.lookup import require_incident
from dw_dagster.app.operations import Operations


@click.group("incidents")
def incidents() -> None:
    """Incidents: one per cause, resolved when their checks pass again (docs/incidents.md)."""


@incidents.command("list")
@click.option("--open", "only_open", is_flag=True, help="Only open incidents (stale ones included).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per incident.")
def list_incidents(only_open: bool, as_json: bool) -> None:
    """Every incident, oldest first: its state, nights, class and title."""
    from dw_dagster.notifications.incident_view import view_of

    ops = Operations()
    views = [view_of(ops.store, i) for i in ops.store.list(status="open" if only_open else None)]
    if as_json:
        click.echo(json.dumps([v.summary() for v in views], indent=2, default=str))
        return
    if not views:
        click.echo("no open incidents" if only_open else "no incidents")
        return
    for v in views:
        click.echo(v.line())


@incidents.command("show")
@click.argument("incident_id")
def show(incident_id: str) -> None:
    """An incident's findings night by night, its diagnosis, its changes of status and links, its receipt."""
    from dw_dagster.notifications.incident_view import view_of

    ops = Operations()
    incident = require_incident(ops, incident_id)
    click.echo(view_of(ops.store, incident).markdown())


@incidents.command("resolve")
@click.argument("incident_id")
@click.option("--as", "who", required=True, help="An owner of the incident's assets, as in the context file.")
@click.option(
    "--reason", required=True, help="Why it is over; recorded and posted to the incident's threads."
)
def resolve_incident(incident_id: str, who: str, reason: str) -> None:
    """Resolve INCIDENT_ID by hand (owners of its assets only): recorded, posted, shown on dw/incidents."""
    from dw_dagster.app.lifecycle import resolve
    from dw_dagster.incidents.events import findings_of, latest_diagnosis
    from dw_dagster.incidents.lifecycle import owner_teams
    from dw_dagster.notifications.incident_asset import view_materialization
    from dw_dagster.notifications.incident_view import view_of

    ops = Operations()
    person = ops.person(who)
    incident = require_incident(ops, incident_id)
    if incident.status == "merged":
        raise click.ClickException(f"{incident_id} continues {incident.merged_into}: resolve that incident")
    if incident.status == "resolved":
        raise click.ClickException(f"{incident_id} is already resolved")
    found = latest_diagnosis(ops.store, incident_id)
    owners = owner_teams(ops.context, findings_of(ops.store, incident_id), found[0] if found else None)
    if not set(ops.context.teams_of(person)) & set(owners):
        raise click.ClickException(
            f"{person.name} does not own the assets of {incident_id}: its owners are "
            f"{', '.join(owners) or 'no team in the context file'}"
        )
    now = datetime.now(UTC)
    done = resolve(
        ops.store,
        incident,
        by=person.name,
        reason=reason,
        note=f"{person.name}: {reason}",
        key=f"manual|{now.isoformat()}",
        how="manual",
        slack=ops.slack,
        context_file=ops.context,
    )
    if done is None:
        raise click.ClickException(f"{incident_id} is no longer open")
    try:
        ops.instance.report_runless_asset_event(view_materialization(view_of(ops.store, done)))
    except Exception as e:  # noqa: BLE001 - resolved and posted already; only the UI's copy is missing
        click.echo(f"warning: not shown on dw/incidents ({type(e).__name__}: {e})", err=True)
    click.echo(
        f"{incident_id}: resolved by {person.name} for {', '.join(set(ops.context.teams_of(person)) & set(owners))}"
    )
