"""Incidents: list them, show one (findings, diagnosis, blast radius, receipt), as ``incidents list|show``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from dw_dagster.app.mcp.answers import Answer, answer
from dw_dagster.app.mcp.workspace import Workspace
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Finding

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)


class IncidentSummary(BaseModel):
    incident_id: str
    status: str = Field(description="open, resolved or merged")
    state: str = Field(description="The status as a person reads it (e.g. 'open (stale)').")
    severity: str
    title: str
    nights: list[str] = Field(description="Business dates with findings.")
    classification: str | None = Field(description="The diagnosed cause class, once diagnosed.")
    opened_at: str
    merged_into: str | None = None


class IncidentList(Answer):
    incidents: list[IncidentSummary]


class IncidentDetail(Answer):
    incident: IncidentSummary
    findings: list[Finding]
    diagnosis: Diagnosis | None
    blast_radius: BlastRadius | None
    receipt: str | None = Field(description="The receipt of the latest fix, as markdown, when there is one.")


def _summary(view: Any) -> IncidentSummary:
    s = view.summary()
    return IncidentSummary(**{k: s[k] for k in IncidentSummary.model_fields if k in s})


def get_incident(ws: Workspace, incident_id: str):
    with ws.warehouse_read("the incident"):
        incident = ws.ops.store.get(incident_id)
    if incident is None:
        raise ToolError(
            f"{incident_id}: no such incident in {ws.ops.ops.table('INCIDENTS')} (list_incidents shows them)"
        )
    return incident


def register(server: MCPServer, ws: Workspace) -> None:
    @server.tool(annotations=READ_ONLY)
    def list_incidents(
        status: Literal["open", "all"] = "open",
    ) -> Annotated[CallToolResult, IncidentList]:
        """The incidents dw-dagster opened, oldest first: state, nights, cause class and title. One incident
        is one cause; ``status`` 'open' (the default, stale ones included) or 'all'."""
        from dw_dagster.notifications.incident_view import view_of

        with ws.warehouse_read("the incidents"):
            store = ws.ops.store
            views = [view_of(store, i) for i in store.list(status="open" if status == "open" else None)]
        text = "\n".join(v.line() for v in views) or (
            "no open incidents" if status == "open" else "no incidents"
        )
        return answer(IncidentList(incidents=[_summary(v) for v in views], text=text))

    @server.tool(annotations=READ_ONLY)
    def show_incident(incident_id: str) -> Annotated[CallToolResult, IncidentDetail]:
        """One incident as the on-call reads it: findings night by night, the diagnosis (cause, evidence,
        keys, joins on the path, a test query), the blast radius (assets and readers downstream), changes of
        status, and the receipt after a fix."""
        from dw_dagster.notifications.incident_view import view_of

        incident = get_incident(ws, incident_id)
        with ws.warehouse_read("the incident's events"):
            view = view_of(ws.ops.store, incident)
        findings = [Finding.model_validate(e.detail) for e in view.of_kind("finding")]
        detail = IncidentDetail(
            incident=_summary(view),
            findings=findings,
            diagnosis=view.diagnosis,
            blast_radius=view.radius,
            receipt=view.receipt,
            text=view.markdown(),
        )
        return answer(detail)
