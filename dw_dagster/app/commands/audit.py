"""``dw-dagster audit verify``: walks the audit trail and names the first event that does not verify."""

from __future__ import annotations

import click

from dw_dagster.app.operations import Operations
from dw_dagster.notifications.text import counted


@click.group("audit")
def audit() -> None:
    """The audit trail of approvals, refusals, changes, receipts and org-wide stops (docs/approve.md)."""


@audit.command("verify")
@click.option("--all", "show_all", is_flag=True, help="List every problem, not only the first.")
def verify(show_all: bool) -> None:
    """Checks every entry of the trail (its link to the one before, its hash, its signature) and the record it
    names, and that no audited record is missing from it. Exit 0: it verifies; 1: something does not (the first
    is named); 2: some entries could not be checked here (the code location's, without DW_SIGNING_KEY)."""
    from dw_dagster.remediation.audit import AuditTrail
    from dw_dagster.remediation.signing import Seal

    ops = Operations()
    report = AuditTrail(ops.warehouse, ops.ops).verify(ops.context, Seal.optional(), ops.control().records())
    older, verb = (
        counted(report.predating, "older record"),
        "predates" if report.predating == 1 else "predate",
    )
    predating = f"; {older} {verb} the trail" if report.predating else ""
    if report.problems:
        click.echo(f"audit trail: {report.entries} entries; does NOT verify: {report.problems[0]}", err=True)
        rest = report.problems[1:] if show_all else []
        for line in rest:
            click.echo(f"  {line}", err=True)
        if len(report.problems) > 1 and not show_all:
            more = counted(len(report.problems) - 1, "more problem")
            click.echo(f"  and {more} (--all lists them)", err=True)
        raise SystemExit(1)
    if report.unverifiable:
        click.echo(
            f"audit trail: {report.entries} entries; ERRORED: {len(report.unverifiable)} could not be checked here "
            f"({report.unverifiable[0]}); run it where the code location's DW_SIGNING_KEY is set{predating}",
            err=True,
        )
        raise SystemExit(2)
    click.echo(f"audit trail: {report.entries} entries, every one verifies{predating}")
