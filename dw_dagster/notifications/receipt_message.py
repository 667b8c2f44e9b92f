"""The receipt in Slack, whole: cause, evidence, approvals, changes (the node diff in full), runs,
verification and undo, split across as many messages as Slack's limits need, never cut off."""

from __future__ import annotations

from slack_sdk.models.blocks import Block

from dw_dagster.context.models import ContextFile
from dw_dagster.notifications.incident_message import evidence_blocks
from dw_dagster.notifications.kit import (
    SlackMessage,
    code_sections,
    context_line,
    fallback,
    header,
    line_sections,
    section,
    split_blocks,
)
from dw_dagster.notifications.links import DagsterLinks, dagster_buttons, dagster_ui_url, short_run
from dw_dagster.notifications.owners import team_label
from dw_dagster.notifications.text import escape, fmt_count, fmt_value, slack_date
from dw_dagster.notifications.wording import Wording
from dw_dagster.records.remediation import ProposalKind, Receipt

PASSED, FAILED, ERRORED = ":white_check_mark:", ":x:", ":warning:"


def _approval_lines(r: Receipt, context: ContextFile | None) -> list[str]:
    lines = []
    for a in r.approvals:
        values = f", set {escape(fmt_value('', a.values))}" if a.values else ""
        lines.append(f"• {escape(a.approver)} for {team_label(a.team, context)}, {slack_date(a.at)}{values}")
    return lines or ["• none recorded"]


def _change_blocks(r: Receipt) -> list[Block]:
    """What ran and what was changed, then each node change's diff in full."""
    lines = []
    for p in r.proposals:
        if p.kind is ProposalKind.SCOPED_RERUN and p.rerun:
            run = (
                f"Coalesce run {r.coalesce_run_id}"
                if r.coalesce_run_id
                else "The Coalesce rerun (not started)"
            )
            who = f", as {escape(r.coalesce_run_as)}" if r.coalesce_run_as else ""
            selector = f"`{escape(p.rerun.include_selector)}` in {escape(p.rerun.environment)}"
            lines.append(f"• {run} {selector}{who}")
    lines += [f"• {escape(c.what)}, {slack_date(c.at)}" for c in r.changes]
    diffs = [p for p in r.proposals if p.kind is ProposalKind.NODE_CHANGE and p.node_change]
    blocks: list[Block] = line_sections("*Changes*", lines or ([] if diffs else ["• nothing was changed"]))
    for p in diffs:
        title = f"• {escape(p.title)} (applied and deployed in Coalesce by its owner)"
        blocks += code_sections(title, p.node_change.diff)  # type: ignore[union-attr]
    return blocks


def _verification_lines(r: Receipt) -> list[str]:
    mark = {True: f"{PASSED} passed", False: f"{FAILED} failed", None: f"{ERRORED} could not be checked"}
    return [f"• {mark[v.passed]}: {escape(v.detail)}" for v in r.verification] or ["• nothing was verified"]


def receipt_messages(
    r: Receipt,
    *,
    context: ContextFile | None = None,
    links: DagsterLinks | None = None,
    wording: Wording | None = None,
) -> list[SlackMessage]:
    """The receipt as one or more thread replies, in order; each within Slack's limits."""
    links = links or DagsterLinks(dagster_ui_url())
    outcome = "verified" if r.verified else "NOT verified"
    status = f"{PASSED} *Verification passed*" if r.verified else f"{FAILED} *Verification failed*"
    if r.failure:
        status += f"\n*Stopped:* {escape(r.failure)}"
    head: list[Block] = [header(f":receipt: Receipt · {r.incident_id} · {outcome}"), section(status)]
    body: list[Block] = [section(f"*Cause*\n{escape(r.cause)}")]
    if r.evidence:
        body += evidence_blocks(r.evidence, wording or Wording())
    body += line_sections("*Approvals*", _approval_lines(r, context))
    body += _change_blocks(r)
    coalesce = f"Coalesce run {r.coalesce_run_id}" if r.coalesce_run_id else "no Coalesce run"
    body.append(
        section(
            f"*Runs*\nDagster <{links.run(r.dagster_run_id)}|run {short_run(r.dagster_run_id)}> · {coalesce}"
        )
    )
    body += line_sections("*Verification*", _verification_lines(r))
    body += line_sections(
        "*Undo*", [f"{i}. {escape(u)}" for i, u in enumerate(r.undo, 1)] or ["Nothing to undo."]
    )
    tail: list[Block] = [
        dagster_buttons(links, r.incident_id, r.dagster_run_id, "Remediation run in Dagster"),
        context_line(f"Plan {escape(r.plan_id)} · written {slack_date(r.written_at)}"),
    ]
    parts = split_blocks(body, first_head=head, tail=tail, continued=f"Receipt {r.incident_id}, continued")
    n = len(parts)
    messages = []
    for i, blocks in enumerate(parts):
        which = f" (part {fmt_count(i + 1)} of {fmt_count(n)})" if n > 1 else ""
        lead = (
            f"Receipt {r.plan_id} for {r.incident_id}{which}: {outcome}. Cause: {r.cause}"
            if i == 0
            else f"Receipt {r.plan_id} for {r.incident_id}{which}."
        )
        messages.append(
            SlackMessage(
                text=fallback(lead, f"Remediation run: {links.run(r.dagster_run_id)}"), blocks=blocks
            )
        )
    return messages


def receipt_checks(r: Receipt) -> dict[str, object]:
    """The verified subjects and what was observed, for the resolution's fields."""
    return {
        v.expectation.subject: v.observed.get("value", "passed" if v.passed else "failed")
        for v in r.verification
    }
