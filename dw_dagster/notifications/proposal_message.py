"""The proposed fix for the owners to approve: each proposal in full (the drafted row, the node diff, the
scoped rerun), who must approve by when, and the Approve and Reject buttons.

The buttons carry ``{"plan_id": ..., "run_id": ...}`` as their value (JSON): the plan and the Dagster run
held for approval that the click would release or cancel. Slack sends the click to the interactivity
endpoint, which verifies it and the person before anything is recorded (``docs/approve.md``). The same
commands work from a terminal; the message says which.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    PlainTextObject,
)

from dw_dagster.context.models import ContextFile
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
from dw_dagster.notifications.links import DagsterLinks, dagster_ui_url, short_run
from dw_dagster.notifications.owners import owners_text
from dw_dagster.notifications.text import counted, escape, fmt_datum, slack_date
from dw_dagster.records.incidents import Incident
from dw_dagster.records.remediation import Proposal, RemediationPlan

APPROVE_ACTION = "dw_approve"
REJECT_ACTION = "dw_reject"


def button_value(plan_id: str, run_id: str) -> str:
    """What an Approve or Reject click sends back: the plan and the held run, as JSON."""
    return json.dumps({"plan_id": plan_id, "run_id": run_id}, separators=(",", ":"))


def approve_commands(plan: RemediationPlan, approvers: Mapping[str, Sequence[str]]) -> list[str]:
    """One ``dw-dagster approve`` line per owning team, with the values its members must give."""
    lines: list[str] = []
    for p in plan.proposals:
        for team in p.owners:
            row = p.reference_row
            sets = "".join(f" --set {c}=..." for c in row.missing()) if row else ""
            who = (approvers.get(team) or ["<name>"])[0]
            line = f'`dw-dagster approve {plan.incident_id} --as "{who}"{sets}` ({team})'
            if line not in lines:
                lines.append(line)
    return lines


def reject_command(plan: RemediationPlan) -> str:
    return f'`dw-dagster reject {plan.incident_id} --as "<name>" --reason "..."`'


def _proposal_blocks(i: int, p: Proposal, context: ContextFile | None) -> list[Block]:
    head = f"*{i}. {escape(p.title)}* · approve: {owners_text(p.owners, context)}"
    lines: list[str] = []
    if p.reference_row:
        row = p.reference_row
        lines.append(f"Row for `{escape(row.table)}`:")
        for col, value in row.values.items():
            source = row.drafted_from.get(col)
            if value is None and col in row.required:
                lines.append(
                    f"• `{escape(col)}`: given by the owner when approving (`--set {escape(col)}=...`)"
                )
            else:
                lines.append(
                    f"• `{escape(col)}` = {escape(fmt_datum(value))}"
                    + (f" (from {escape(source)})" if source else "")
                )
    if p.rerun:
        lines.append(
            f"• Coalesce run of `{escape(p.rerun.include_selector)}` in {escape(p.rerun.environment)}:"
            f" {escape(p.rerun.reason)}"
        )
    blocks: list[Block] = line_sections(head, lines)
    if p.node_change:
        blocks += code_sections(
            f"Change to `{escape(p.node_change.node_name)}` (its owner applies and deploys it in Coalesce):",
            p.node_change.diff,
        )
    return blocks


def _decision_buttons(plan: RemediationPlan, run_id: str, links: DagsterLinks) -> ActionsBlock:
    value = button_value(plan.plan_id, run_id)
    return ActionsBlock(
        block_id=f"dw_decision|{plan.plan_id}",
        elements=[
            ButtonElement(
                text=PlainTextObject(text="Approve"),
                action_id=APPROVE_ACTION,
                value=value,
                style="primary",
                confirm=ConfirmObject(
                    title="Approve this fix?",
                    text=f"You approve plan {plan.plan_id} for your team. The run starts once every owning team has approved.",
                    confirm="Approve",
                    deny="Cancel",
                ),
            ),
            ButtonElement(
                text=PlainTextObject(text="Reject"), action_id=REJECT_ACTION, value=value, style="danger"
            ),
            ButtonElement(
                text=PlainTextObject(text="Run waiting for approval"),
                url=links.run(run_id),
                action_id="dw_open_run",
            ),
        ],
    )


def _steps(n: int) -> str:
    return counted(n, "step")


def proposal_messages(
    incident: Incident,
    plan: RemediationPlan,
    *,
    run_id: str,
    context: ContextFile | None = None,
    links: DagsterLinks | None = None,
) -> list[SlackMessage]:
    """The proposal as one or more thread replies; the Approve and Reject buttons close the last.

    ``run_id`` is the remediation run held for approval (the buttons' value names it).
    """
    links = links or DagsterLinks(dagster_ui_url())
    approvers = {
        t: [m.name for m in context.teams[t].members]
        for t in plan.required_teams
        if context and t in context.teams
    }
    needed = owners_text(plan.required_teams, context, mention=True)
    domain = f" (domain {escape(plan.domain)})" if plan.domain else ""
    head: list[Block] = [
        header(f":raising_hand: Proposed fix · {incident.incident_id} · {_steps(len(plan.proposals))}"),
        section(
            f"*{escape(plan.plan_id)}* waits for one member of each owning team: {needed}.\n"
            f"Autonomy {escape(plan.autonomy)}{domain}. Unanswered, it expires {slack_date(plan.expires_at)} and"
            " escalates; it is never granted by itself."
        ),
    ]
    body: list[Block] = []
    for i, p in enumerate(plan.proposals, 1):
        body += _proposal_blocks(i, p, context)
    # The commands are terminal text (`--as "<name>"`); in mrkdwn a raw `<...>` is a link or a mention.
    how = [
        "Click *Approve* or *Reject* below, or from a terminal:",
        *(escape(c) for c in approve_commands(plan, approvers)),
        f"To reject: {escape(reject_command(plan))}",
    ]
    body += line_sections("*How to decide*", how)
    tail: list[Block] = [
        _decision_buttons(plan, run_id, links),
        context_line(
            f"Plan {escape(plan.plan_id)} · Dagster run {short_run(run_id)} · proposed by {escape(plan.proposed_by)}"
        ),
    ]
    parts = split_blocks(
        body, first_head=head, tail=tail, continued=f"Proposed fix {plan.plan_id}, continued"
    )
    titles = "; ".join(p.title for p in plan.proposals)
    expires = plan.expires_at.strftime("%Y-%m-%d %H:%M UTC")
    messages = []
    for i, blocks in enumerate(parts):
        lead = (
            f"Proposed fix {plan.plan_id} for {incident.incident_id}: {titles}. Waits for {', '.join(plan.required_teams)}"
            f" until {expires}."
            if i == 0
            else f"Proposed fix {plan.plan_id} (part {i + 1} of {len(parts)})."
        )
        messages.append(
            SlackMessage(text=fallback(lead, f"Run waiting for approval: {links.run(run_id)}"), blocks=blocks)
        )
    return messages
