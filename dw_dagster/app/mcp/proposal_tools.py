"""An incident's proposed fixes and who still has to approve them. Nothing here approves: approvals are
given by people, verified (docs/approve.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from dw_dagster.app.mcp.answers import Answer, answer
from dw_dagster.app.mcp.incident_tools import READ_ONLY, get_incident
from dw_dagster.app.mcp.workspace import Workspace


class ProposalLine(BaseModel):
    proposal_id: str
    kind: str
    title: str
    owners: list[str] = Field(description="The teams that approve this proposal.")


class GivenApproval(BaseModel):
    team: str
    approver: str
    at: datetime
    run_id: str
    via: str | None


class WaitingFor(BaseModel):
    team: str
    members: list[str] = Field(description="Who in the team may approve (from the context file).")


class PlanStatus(BaseModel):
    plan_id: str
    state: str = Field(description="waiting for approval, released, rejected, expired or superseded")
    autonomy: str
    expires_at: datetime
    proposals: list[ProposalLine]
    approved: list[GivenApproval]
    waiting_for: list[WaitingFor]
    run_id: str | None = Field(description="The run dw-dagster submitted for the plan, held until approved.")


class IncidentProposals(Answer):
    incident_id: str
    plans: list[PlanStatus]


def register(server: MCPServer, ws: Workspace) -> None:
    @server.tool(annotations=READ_ONLY)
    def incident_proposals(incident_id: str) -> Annotated[CallToolResult, IncidentProposals]:
        """An incident's proposed fixes (reference rows, node changes with their diff, reruns), the run held
        for them, who approved, and which owner teams still have to approve (with who may). Approving is
        done by those people, in Slack or with `dw-dagster approve`, never through this server."""
        from dw_dagster.app.commands.remediation import proposals_text

        get_incident(ws, incident_id)
        with ws.warehouse_read("the incident's proposals"):
            book = ws.ops.book()
            text = proposals_text(book, incident_id)
            plans = [_status(book, plan) for plan in book.plans(incident_id)]
        if text is None:
            text = f"{incident_id}: no proposal (the diagnosis proposes a fix when it can name one)"
        else:
            waiting = [
                f"{p.plan_id}: waiting for {', '.join(w.team for w in p.waiting_for)}"
                for p in plans
                if p.waiting_for and p.state == "waiting for approval"
            ]
            text = "\n".join([*waiting, "", text]) if waiting else text
        return answer(IncidentProposals(incident_id=incident_id, plans=plans, text=text))


def _status(book, plan) -> PlanStatus:
    approvals = book.approvals(plan)
    missing = book.missing(plan, approvals)
    members = book.approvers(plan)
    decision = book.decision(plan)
    binding = book.binding(plan)
    if decision is not None:
        state = decision.kind
    elif not missing:
        state = "released"
    elif plan.expires_at <= datetime.now(UTC):
        state = "expired"
    else:
        state = "waiting for approval"
    return PlanStatus(
        plan_id=plan.plan_id,
        state=state,
        autonomy=plan.autonomy,
        expires_at=plan.expires_at,
        proposals=[
            ProposalLine(proposal_id=p.proposal_id, kind=p.kind.value, title=p.title, owners=p.owners)
            for p in plan.proposals
        ],
        approved=[
            GivenApproval(team=a.team, approver=a.approver, at=a.at, run_id=a.run_id, via=a.via)
            for a in approvals
        ],
        waiting_for=[WaitingFor(team=t, members=members.get(t, [])) for t in missing],
        run_id=binding.run_id if binding else None,
    )
