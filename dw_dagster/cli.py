"""The ``dw-dagster`` command.

Product commands live here. Other installed packages add theirs through the ``dw_dagster.cli`` entry-point
group (the local world adds ``world``, ``slack`` and ``demo``), so product code never imports them.
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import entry_points

import click

from dw_dagster.config import DwConfigError


@click.group()
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


class Operations:
    """What the operator commands reach: the instance, the warehouse's ops schema, the context, Slack."""

    def __init__(self) -> None:
        import dagster as dg

        from dw_dagster.checks import load_metrics_file
        from dw_dagster.checks.metrics import MetricsFile
        from dw_dagster.context.models import load_context_file
        from dw_dagster.incidents.store import IncidentStore
        from dw_dagster.notifications.resources import slack_from_env
        from dw_dagster.settings import Settings
        from dw_dagster.warehouse.ops import OpsSchema
        from dw_dagster.warehouse.resources import warehouse_from_env

        settings = Settings.from_env()
        if not settings.database or not settings.context_file:
            raise click.ClickException(
                "SNOWFLAKE_DATABASE and DW_CONTEXT_FILE must be set: approvals live in the warehouse's ops "
                "schema and approvers come from the context file"
            )
        metrics = load_metrics_file(settings.metrics_file) if settings.metrics_file else MetricsFile()
        self.context = load_context_file(settings.context_file)
        self.warehouse = warehouse_from_env()
        self.ops = OpsSchema(settings.database, metrics.ops_schema)
        self.store = IncidentStore(self.warehouse, self.ops)
        self.slack = slack_from_env()
        self._instance: dg.DagsterInstance | None = None

    @property
    def instance(self):
        import dagster as dg

        if self._instance is None:
            self._instance = dg.DagsterInstance.get()
        return self._instance

    def person(self, who: str):
        """A member of a team in the context file, or a clear error: every action names who takes it."""
        person = self.context.person(who)
        if person is None:
            raise click.ClickException(f"{who!r} is not a member of any team in the context file")
        return person

    def book(self):
        from dw_dagster.remediation.approvals import ApprovalBook

        return ApprovalBook(self.store, self.context)

    def control(self):
        from dw_dagster.remediation.control import OrgControl

        return OrgControl(self.warehouse, self.ops)

    def tell_owners(self, incident_id: str, text: str, kind: str, version: str) -> None:
        """A reply in the incident's owner threads (through the outbox: an outage delays it, never loses it)."""
        from dw_dagster.remediation.control import gated_notifier

        incident = self.store.get(incident_id)
        if incident is not None:
            gated_notifier(self.slack, self.store, self.context).post_update(
                incident, text, kind=kind, version=version
            )


def _set_values(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        column, sep, value = v.partition("=")
        if not sep or not column.strip():
            raise click.BadParameter(f"{v!r}: expected COLUMN=VALUE", param_hint="--set")
        out[column.strip()] = value
    return out


@main.command("approve")
@click.argument("ref")
@click.option("--as", "who", required=True, help="Your name or email, as in the context file's teams.")
@click.option("--set", "values", multiple=True, help="COLUMN=VALUE on a reference row your team owns.")
def approve(ref: str, who: str, values: tuple[str, ...]) -> None:
    """Approve the remediation run waiting for REF (a run id or an incident id) on behalf of your team."""
    from dw_dagster.remediation.approvals import ApprovalError, approve_run

    ops = Operations()
    try:
        out = approve_run(ops.instance, ops.book(), ref, who, _set_values(values))
    except ApprovalError as e:
        raise click.ClickException(str(e)) from None
    teams = ", ".join(a.team for a in out.given)
    approver = out.given[0].approver
    status = (
        "every owner has approved: the run is released"
        if out.released
        else f"waiting for {', '.join(out.missing)}"
    )
    ops.tell_owners(
        out.plan.incident_id, f":white_check_mark: {approver} approved {out.plan.plan_id} for {teams}; {status}.",
        "approval", f"{out.plan.plan_id}|{teams}|{out.run_id}",
    )  # fmt: skip
    click.echo(f"run {out.run_id}: approved by {approver} for {teams}; {status}")


@main.command("reject")
@click.argument("ref")
@click.option("--as", "who", required=True, help="Your name or email, as in the context file's teams.")
@click.option("--reason", required=True, help="Why; recorded and posted to the incident's threads.")
def reject(ref: str, who: str, reason: str) -> None:
    """Reject the remediation run waiting for REF: it is canceled and nothing is changed."""
    from dw_dagster.remediation.approvals import ApprovalError, reject_run

    ops = Operations()
    try:
        decision = reject_run(ops.instance, ops.book(), ref, who, reason)
    except ApprovalError as e:
        raise click.ClickException(str(e)) from None
    from dw_dagster.remediation.approvals import incident_of

    ops.tell_owners(incident_of(decision.plan_id), f":no_entry: {decision.by} rejected {decision.plan_id}: {reason}",
                    "rejection", decision.plan_id)  # fmt: skip
    click.echo(f"run {decision.run_id}: rejected by {decision.by} and canceled")


@main.command("stop")
@click.option(
    "--as", "who", required=True, help="Who gives the stop: a person of the context file (recorded)."
)
@click.option("--reason", default=None)
def stop(who: str, reason: str | None) -> None:
    """Org-wide stop: halt every autonomous dispatch now (durable until `dw-dagster resume`)."""
    ops = Operations()
    click.echo(ops.control().set("stop", ops.person(who).name, reason).describe())


@main.command("resume")
@click.option(
    "--as", "who", required=True, help="Who lifts the stop: a person of the context file (recorded)."
)
def resume(who: str) -> None:
    """Lift the org-wide stop: autonomous dispatch resumes (held hold notices go out at the next flush)."""
    ops = Operations()
    click.echo(ops.control().set("resume", ops.person(who).name).describe())


@main.command("undo")
@click.argument("incident_id")
@click.option("--as", "who", required=True, help="An owner of the changed table.")
def undo(incident_id: str, who: str) -> None:
    """Delete the reference rows a remediation added for INCIDENT_ID (node changes are reverted in Coalesce)."""
    from dw_dagster.remediation.changes import pending_undo
    from dw_dagster.remediation.changes import undo as undo_rows

    ops = Operations()
    person = ops.person(who)
    changes = pending_undo(ops.store, incident_id)
    if not changes:
        raise click.ClickException(f"{incident_id}: no change to undo")
    book = ops.book()
    teams = set(ops.context.teams_of(person))
    foreign = [c.what for c in changes if not teams & set(book.owners_of_change(incident_id, c.proposal_id))]
    if foreign:
        raise click.ClickException(f"{person.name} does not own what these changed: {'; '.join(foreign)}")
    with ops.warehouse.tagged_connection("cli.undo", job="undo") as conn:
        done = undo_rows(conn.cursor(), ops.store, incident_id, changes, person.name)
    ops.tell_owners(incident_id, f":leftwards_arrow_with_hook: {person.name}: " + "; ".join(done), "undo",
                    changes[-1].at.isoformat())  # fmt: skip
    click.echo("\n".join(done))


@main.command("proposals")
@click.argument("incident_id")
def proposals(incident_id: str) -> None:
    """Show an incident's proposed fixes, their diffs and who has approved."""
    from dw_dagster.remediation.receipt import plan_markdown

    ops = Operations()
    book = ops.book()
    plans = book.plans(incident_id)
    if not plans:
        raise click.ClickException(f"{incident_id}: no proposal")
    for plan in plans:
        click.echo(plan_markdown(plan, book.approvers(plan)))
        for a in book.approvals(plan):
            click.echo(
                f"approved by {a.approver} for {a.team} at {a.at:%Y-%m-%d %H:%M:%S} UTC (run {a.run_id})"
            )
        decision = book.decision(plan)
        if decision:
            click.echo(
                f"{decision.kind} by {decision.by} at {decision.at:%Y-%m-%d %H:%M:%S} UTC: {decision.reason}"
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
