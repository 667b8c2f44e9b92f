"""Operator commands of remediation: approve, reject, stop, resume, undo, proposals."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import click

from dw_dagster.app.commands.lookup import require_ref
from dw_dagster.app.operations import Operations


def _set_values(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        column, sep, value = v.partition("=")
        if not sep or not column.strip():
            raise click.BadParameter(f"{v!r}: expected COLUMN=VALUE", param_hint="--set")
        out[column.strip()] = value
    return out


AS_HELP = (
    "Who you are, as in the context file's teams (a name or email). With an approver key "
    "(DW_APPROVER_KEY_FILE) it must name the key's owner; alone, it is accepted only in the local world."
)


def _signer(ops: Operations, who: str | None, ref: str, command: str):
    """The proven person running ``command``; a failure to prove it is recorded as refused, then shown."""
    from dw_dagster.remediation.identity import IdentityError, command_signer

    try:
        return command_signer(ops.context, who)
    except IdentityError as e:
        _refused(ops, ref, command, who, str(e))
        raise click.ClickException(str(e)) from None


def _book(ops: Operations, signer=None):
    """The approval record as this command writes it: what it records goes on the audit trail, signed by the
    code location's key where this process holds it, else by the person's own approver key (unsigned only
    for the refused attempt of someone who proved nothing)."""
    from dw_dagster.remediation.approvals import ApprovalBook
    from dw_dagster.remediation.audit import TrailSigner

    key, email = (signer.key, signer.person.email) if signer is not None else (None, None)
    return ApprovalBook(ops.store, ops.context, trail_signer=TrailSigner.of_process(key, email))


def _refused(ops: Operations, ref: str, command: str, who: str | None, reason: str, signer=None) -> None:
    """Every refused attempt is recorded on its incident (when the reference names one)."""
    if not ref:
        return
    incident_id = ref if ref.startswith("INC-") else None
    if incident_id is None:
        run = ops.instance.get_run_by_id(ref)
        incident_id = run.tags.get("dw/incident_id") if run else None
    if incident_id and ops.store.get(incident_id) is not None:
        _book(ops, signer).refuse(incident_id, command, reason, ref=ref, claimed=who or "")


@click.command("approve")
@click.argument("ref")
@click.option("--as", "who", default=None, help=AS_HELP)
@click.option("--set", "values", multiple=True, help="COLUMN=VALUE on a reference row your team owns.")
def approve(ref: str, who: str | None, values: tuple[str, ...]) -> None:
    """Approve the remediation run waiting for REF (a run id or an incident id) on behalf of your team."""
    ops = Operations()
    require_ref(ops, ref)  # a mistyped id is "no such incident/run", with the closest names
    # Imported once REF names something: the gate acts through the Dagster instance, a mistyped id does not.
    from dw_dagster.remediation.approvals import ApprovalError
    from dw_dagster.remediation.gate import approve_run

    signer = _signer(ops, who, ref, "approve")
    try:
        out = approve_run(
            ops.instance,
            _book(ops, signer),
            ref,
            signer.person,
            signer.prove,
            signer.via,
            _set_values(values),
        )
    except ApprovalError as e:
        _refused(ops, ref, "approve", signer.person.name, str(e), signer)
        raise click.ClickException(str(e)) from None
    teams = ", ".join(a.team for a in out.given)
    approver = out.given[0].approver
    ops.tell_owners(
        out.plan.incident_id,
        f":white_check_mark: {approver} approved {out.plan.plan_id} for {teams}; {out.status}.",
        "approval",
        f"{out.plan.plan_id}|{teams}|{out.run_id}",
        run_id=out.run_id,
    )
    line = f"run {out.run_id}: approved by {approver} for {teams} (verified: {signer.via}); {out.status}"
    if out.blocked:
        raise click.ClickException(line)
    click.echo(line)


@click.command("reject")
@click.argument("ref")
@click.option("--as", "who", default=None, help=AS_HELP)
@click.option("--reason", required=True, help="Why; recorded and posted to the incident's threads.")
def reject(ref: str, who: str | None, reason: str) -> None:
    """Reject the remediation run waiting for REF: it is canceled and nothing is changed."""
    ops = Operations()
    require_ref(ops, ref)
    from dw_dagster.remediation.approvals import ApprovalError, incident_of
    from dw_dagster.remediation.gate import reject_run

    signer = _signer(ops, who, ref, "reject")
    try:
        decision = reject_run(ops.instance, _book(ops, signer), ref, signer.person, signer.prove, reason)
    except ApprovalError as e:
        _refused(ops, ref, "reject", signer.person.name, str(e), signer)
        raise click.ClickException(str(e)) from None
    ops.tell_owners(
        incident_of(decision.plan_id),
        f":no_entry: {decision.by} rejected {decision.plan_id}: {reason}",
        "rejection",
        decision.plan_id,
        run_id=decision.run_id,
    )
    click.echo(f"run {decision.run_id}: rejected by {decision.by} and canceled")


def _control(action: Literal["stop", "resume"], who: str | None, reason: str | None) -> None:
    from dw_dagster.remediation.control import ControlError

    ops = Operations()
    signer = _signer(ops, who, "", action)
    try:
        state = ops.control().set(action, signer, reason)
    except ControlError as e:
        raise click.ClickException(str(e)) from None
    click.echo(state.describe())


@click.command("stop")
@click.option("--as", "who", default=None, help=AS_HELP)
@click.option("--reason", default=None)
def stop(who: str | None, reason: str | None) -> None:
    """Org-wide stop: halt every autonomous dispatch now (durable until `dw-dagster resume`). Signed with your
    approver key; given by a member of the governing team (the teams the domains escalate to)."""
    _control("stop", who, reason)


@click.command("resume")
@click.option("--as", "who", default=None, help=AS_HELP)
def resume(who: str | None) -> None:
    """Lift the org-wide stop: autonomous dispatch resumes (held hold notices go out at the next flush)."""
    _control("resume", who, None)


@click.command("undo")
@click.argument("incident_id")
@click.option("--as", "who", default=None, help=AS_HELP)
def undo(incident_id: str, who: str | None) -> None:
    """Delete the reference rows a remediation added for INCIDENT_ID (node changes are reverted in Coalesce)."""
    from dw_dagster.remediation.changes import pending_undo
    from dw_dagster.remediation.changes import undo as undo_rows

    ops = Operations()
    signer = _signer(ops, who, incident_id, "undo")
    person = signer.person
    changes = pending_undo(ops.store, incident_id)
    if not changes:
        raise click.ClickException(f"{incident_id}: no change to undo")
    book = _book(ops, signer)
    teams = set(ops.context.teams_of(person))
    foreign = [c.what for c in changes if not teams & set(book.owners_of_change(incident_id, c.proposal_id))]
    if foreign:
        raise click.ClickException(f"{person.name} does not own what these changed: {'; '.join(foreign)}")
    with ops.warehouse.tagged_connection("cli.undo", job="undo") as conn:
        done = undo_rows(conn.cursor(), book.store, incident_id, changes, person.name)
    ops.tell_owners(
        incident_id,
        f":leftwards_arrow_with_hook: {person.name}: " + "; ".join(done),
        "undo",
        changes[-1].at.isoformat(),
    )
    click.echo("\n".join(done))


@click.command("proposals")
@click.argument("incident_id")
def proposals(incident_id: str) -> None:
    """Show an incident's proposed fixes, their diffs and who has approved."""
    ops = Operations()
    text = proposals_text(ops.book(), incident_id)
    if text is None:
        raise click.ClickException(f"{incident_id}: no proposal")
    click.echo(text)


def proposals_text(book, incident_id: str) -> str | None:
    """An incident's plans as ``proposals`` shows them (diffs, bound run, approvals, decision); ``None``
    without a plan. The MCP server's ``incident_proposals`` tool reads the same."""
    from dw_dagster.notifications.receipt_text import plan_markdown

    plans = book.plans(incident_id)
    if not plans:
        return None
    lines = []
    for plan in plans:
        lines.append(plan_markdown(plan, book.approvers(plan)))
        binding = book.binding(plan)
        if binding is not None:
            lines.append(f"the run dw-dagster submitted for it: {binding.run_id} (submission {binding.seq})")
        for a in book.approvals(plan):
            lines.append(
                f"approved by {a.approver} for {a.team} at {a.at:%Y-%m-%d %H:%M:%S} UTC (run {a.run_id}; via {a.via})"
            )
        decision = book.decision(plan)
        if decision:
            lines.append(
                f"{decision.kind} by {decision.by} at {decision.at:%Y-%m-%d %H:%M:%S} UTC: {decision.reason}"
            )
    return "\n".join(lines)


@click.group("approver-key")
def approver_key() -> None:
    """Your approver key: the credential the command line proves who you are with."""


@approver_key.command("new")
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the private key (only you may read it); never share it.",
)
def approver_key_new(out: Path) -> None:
    """Make a key pair: the private half for you (DW_APPROVER_KEY_FILE), the public half for the context file."""
    from dw_dagster.remediation.identity import APPROVER_KEY_FILE_ENV, new_key_pair

    if out.exists():
        raise click.ClickException(f"{out}: exists; a key is never overwritten")
    pem, public = new_key_pair()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch(mode=0o600)
    out.write_bytes(pem)
    click.echo(f"wrote {out} (only you can read it); export {APPROVER_KEY_FILE_ENV}={out}")
    click.echo(f"add to your entry in the context file's teams: approver_key: {public}")
