"""The receipt: what was wrong, what was changed on whose approval, what ran, what was verified, and how
to undo it. Written once per remediation run to the incident's append-only event log, shown in the Dagster
UI as ``dw/incidents`` metadata and posted to the incident's Slack threads."""

from __future__ import annotations

from dw_dagster.notifications.proposal_message import approve_commands, reject_command
from dw_dagster.notifications.text import fmt_datum, fmt_value, humanise
from dw_dagster.records.remediation import ProposalKind, Receipt, RemediationPlan


def plan_markdown(plan: RemediationPlan, approvers: dict[str, list[str]]) -> str:
    lines = [
        f"### Proposed fix {plan.plan_id}",
        f"Autonomy {plan.autonomy} (domain {plan.domain}); expires {plan.expires_at:%Y-%m-%d %H:%M} UTC.",
        "",
    ]
    for p in plan.proposals:
        lines.append(f"**{p.title}** (approve: {', '.join(p.owners)})")
        if p.reference_row:
            row = p.reference_row
            for col, value in row.values.items():
                source = row.drafted_from.get(col)
                shown = (
                    "(owner gives it: --set)" if value is None and col in row.required else fmt_datum(value)
                )
                lines.append(f"- `{col}` = {shown}" + (f" (from {source})" if source else ""))
        if p.node_change:
            lines += ["```diff", p.node_change.diff.rstrip(), "```"]
        if p.rerun:
            lines.append(f"- selector `{p.rerun.include_selector}`: {p.rerun.reason}")
        lines.append("")
    lines.append("Approvers: " + "; ".join(f"{t}: {', '.join(n)}" for t, n in approvers.items()))
    return "\n".join(lines)


def receipt_markdown(r: Receipt) -> str:
    lines = [
        f"### Receipt {r.plan_id}",
        f"**Verification: {'passed' if r.verified else 'FAILED'}**",
        *([f"**Stopped:** {r.failure}"] if r.failure else []),
        "",
        f"**Cause.** {r.cause}",
        "",
        "**Evidence.** " + "; ".join(f"{humanise(k)} {fmt_value(k, v)}" for k, v in r.evidence.items()),
        "",
        "**Approvals.**",
        *(
            f"- {a.approver} ({a.team}) at {a.at:%Y-%m-%d %H:%M:%S} UTC"
            + (f", set {fmt_value('', a.values)}" if a.values else "")
            for a in r.approvals
        ),
        "",
        "**Changes.**",
    ]
    for p in r.proposals:
        if p.kind is ProposalKind.NODE_CHANGE and p.node_change:
            lines += [
                f"- {p.title} (applied and deployed in Coalesce by its owner)",
                "```diff",
                p.node_change.diff.rstrip(),
                "```",
            ]
        elif p.kind is ProposalKind.SCOPED_RERUN and p.rerun:
            lines.append(
                f"- Coalesce rerun {r.coalesce_run_id} `{p.rerun.include_selector}` in {p.rerun.environment}, "
                f"as {r.coalesce_run_as}"
            )
    lines += [f"- {c.what} at {c.at:%Y-%m-%d %H:%M:%S} UTC" for c in r.changes]
    lines += [
        "",
        f"**Runs.** Dagster {r.dagster_run_id}; Coalesce {r.coalesce_run_id}",
        "",
        "**Verification.**",
    ]
    lines += [
        f"- {'passed' if v.passed else 'ERRORED' if v.passed is None else 'FAILED'}: {v.detail}"
        for v in r.verification
    ]
    lines += ["", "**Undo.**", *(f"{i}. {u}" for i, u in enumerate(r.undo, 1))]
    return "\n".join(lines)


def approve_hint(plan: RemediationPlan, approvers: dict[str, list[str]]) -> str:
    lines = ["", "To approve, one member of each owning team runs:", *approve_commands(plan, approvers)]
    lines.append(
        f"To reject: {reject_command(plan)}. Unanswered, the request expires at"
        f" {plan.expires_at:%Y-%m-%d %H:%M} UTC and escalates; it is never granted by itself."
    )
    return "\n".join(lines)
