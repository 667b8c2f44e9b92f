"""Operator commands of remediation: approve, reject, stop, resume, undo, proposals."""

from __future__ import annotations

import click

from dw_dagster.operations import Operations


def _set_values(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        column, sep, value = v.partition("=")
        if not sep or not column.strip():
            raise click.BadParameter(f"{v!r}: expected COLUMN=VALUE", param_hint="--set")
        out[column.strip()] = value
    return out


@click.command("approve")
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
        "approval", f"{out.plan.plan_id}|{teams}|{out.run_id}", run_id=out.run_id,
    )  # fmt: skip
    click.echo(f"run {out.run_id}: approved by {approver} for {teams}; {status}")


@click.command("reject")
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
                    "rejection", decision.plan_id, run_id=decision.run_id)  # fmt: skip
    click.echo(f"run {decision.run_id}: rejected by {decision.by} and canceled")


@click.command("stop")
@click.option(
    "--as", "who", required=True, help="Who gives the stop: a person of the context file (recorded)."
)
@click.option("--reason", default=None)
def stop(who: str, reason: str | None) -> None:
    """Org-wide stop: halt every autonomous dispatch now (durable until `dw-dagster resume`)."""
    ops = Operations()
    click.echo(ops.control().set("stop", ops.person(who).name, reason).describe())


@click.command("resume")
@click.option(
    "--as", "who", required=True, help="Who lifts the stop: a person of the context file (recorded)."
)
def resume(who: str) -> None:
    """Lift the org-wide stop: autonomous dispatch resumes (held hold notices go out at the next flush)."""
    ops = Operations()
    click.echo(ops.control().set("resume", ops.person(who).name).describe())


@click.command("undo")
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


@click.command("proposals")
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
