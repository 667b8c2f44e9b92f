"""What an agent may do, within the gates: run the checks of assets now, diagnose an incident again, size the
blast radius of any asset, leave a note in an incident's threads, and ask for a fix that goes to the owners'
approval like any other.

Each action is the product's own path, the one its sensors and commands take: the checks and the diagnosis
run as Dagster runs of the code location's own jobs (seen in the UI, tagged with who asked), the note goes
through the Slack outbox, and a fix is the diagnosis's own plan, recorded in the approval book, for which
the remediation sensor submits a run held until every owning team approves. Nothing here approves, rejects,
deploys or releases a run: those stay with people, verified (docs/approve.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cached_property
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from dw_dagster.app.mcp.answers import Answer, answer, table
from dw_dagster.app.mcp.incident_tools import READ_ONLY, get_incident
from dw_dagster.app.mcp.lineage_tools import resolve_asset
from dw_dagster.app.mcp.proposal_tools import PlanStatus, _status
from dw_dagster.app.mcp.workspace import Workspace, redact
from dw_dagster.records.incidents import BlastRadius, Diagnosis

ACTS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
REQUESTED_BY = "dw/requested_by"
"""Run tag: who asked for a run through the MCP server (as they named themselves)."""
MAX_NOTE = 2000
Caller = Annotated[
    str,
    Field(
        min_length=1,
        max_length=120,
        description="Who is asking: your name (as in the context file's teams) "
        "or your agent's; shown on the run or the note.",
    ),
]


class CheckResult(BaseModel):
    check: str
    asset: str
    passed: bool | None = Field(
        description="None: the check could not run (errored), never counted as passed."
    )
    severity: str | None
    description: str | None


class QualityRun(Answer):
    run_id: str
    status: str
    results: list[CheckResult]


class DiagnosisRun(Answer):
    run_id: str
    status: str
    diagnosis: Diagnosis | None
    blast_radius: BlastRadius | None


class AssetBlastRadius(Answer):
    asset_key: str
    business_date: str
    blast_radius: BlastRadius


class SlackNote(Answer):
    incident_id: str
    channels: list[str] = Field(description="The incident's owner threads the note goes to.")


class ProposedFix(Answer):
    incident_id: str
    plan: PlanStatus | None


class Actions:
    """The code location's definitions and instance, loaded on the first action (the server starts
    without them)."""

    def __init__(self, ws: Workspace):
        self.ws = ws

    @cached_property
    def instance(self):
        import dagster as dg

        return dg.DagsterInstance.get()

    @cached_property
    def defs(self):
        from dw_dagster.app.definitions import load_definitions

        try:
            return load_definitions(self.instance)
        except Exception as e:  # noqa: BLE001 - a config or state problem, told as such
            raise ToolError(
                f"could not load the code location ({type(e).__name__}): {redact(str(e))}"
            ) from None

    def execute(self, job, tags: dict[str, str]):
        """``job`` as a run of this instance, in this process; its output never reaches the protocol's
        stdout."""
        quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        with contextlib.redirect_stdout(sys.stderr):
            return job.execute_in_process(
                instance=self.instance, tags=tags, raise_on_error=False, run_config=quiet
            )


def _checks_of(defs, keys: list[str]) -> dict[str, list]:
    """Each asset key path -> the code location's checks on it."""
    out: dict[str, list] = {k: [] for k in keys}
    for check in defs.resolve_asset_graph().asset_check_keys:
        path = check.asset_key.to_user_string()
        if path in out:
            out[path].append(check)
    return out


@contextlib.contextmanager
def _tool_errors(what: str) -> Iterator[None]:
    try:
        yield
    except ToolError:
        raise
    except Exception as e:  # noqa: BLE001 - told as a tool error, secrets removed
        raise ToolError(f"{what} failed ({type(e).__name__}): {redact(str(e))}") from None


def register(server: MCPServer, ws: Workspace) -> None:
    actions = Actions(ws)

    @server.tool(annotations=ACTS)
    def run_quality_check(
        assets: Annotated[
            list[str], Field(min_length=1, description="Asset key paths, tables or node names.")
        ],
        caller: Caller,
    ) -> Annotated[CallToolResult, QualityRun]:
        """Run the checks of these assets now, as a Dagster run of the code location (the UI shows it, tagged
        with who asked), and return each check's result. A check judges the business day that is current
        now, as one launched by hand from the UI; a failing check records its finding as the nightly run
        would."""
        keys = [resolve_asset(ws.lineage, a) for a in assets]
        with _tool_errors("running the checks"):
            by_asset = _checks_of(actions.defs, keys)
            missing = [k for k in keys if not by_asset.get(k)]
            if missing:
                raise ToolError(f"no checks on {', '.join(missing)} (the metrics file defines the checks)")
            selection = {c for k in keys for c in by_asset[k]}
            from dw_dagster.app.checks import CHECKS_JOB  # dagster is imported once a tool acts

            # A run of the checks job, which the UI names as its target, as it names the nightly ones'.
            job = actions.defs.get_job_def(CHECKS_JOB).get_subset(asset_check_selection=selection)
            result = actions.execute(job, {REQUESTED_BY: caller})
        evaluations = {
            e.asset_check_evaluation_data.asset_check_key: e.asset_check_evaluation_data
            for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"
        }
        results = []
        for key in sorted(selection, key=lambda c: (c.asset_key.to_user_string(), c.name)):
            ev = evaluations.get(key)
            results.append(
                CheckResult(
                    check=key.name,
                    asset=key.asset_key.to_user_string(),
                    passed=None if ev is None else ev.passed,
                    severity=None if ev is None else ev.severity.value,
                    description=None if ev is None else ev.description,
                )
            )
        status = result.dagster_run.status.value
        rows = [
            [
                r.asset,
                r.check,
                {True: "passed", False: "FAILED", None: "errored"}[r.passed],
                r.severity if r.passed is False else "",
                r.description,
            ]
            for r in results
        ]
        text = f"### Checks run {result.run_id} ({status}), asked by {caller}\n\n" + table(
            ["asset", "check", "result", "severity", "what it found"], rows
        )
        return answer(QualityRun(run_id=result.run_id, status=status, results=results, text=text))

    @server.tool(annotations=ACTS)
    def diagnose_incident(incident_id: str, caller: Caller) -> Annotated[CallToolResult, DiagnosisRun]:
        """Diagnose an open incident again now, as the incident sensor does for a new one: the code
        location's diagnose_incident job runs (cause, evidence, blast radius; the owners' message is updated
        only if the diagnosis changed; a fix is proposed for their approval). Returns the diagnosis."""
        from dw_dagster.app.incidents import DIAGNOSE_JOB
        from dw_dagster.incidents.events import latest_diagnosis
        from dw_dagster.tags import INCIDENT_ID

        incident = get_incident(ws, incident_id)
        if incident.status != "open":
            raise ToolError(f"{incident_id} is {incident.status}: only an open incident is diagnosed")
        with _tool_errors("the diagnosis"):
            result = actions.execute(
                actions.defs.get_job_def(DIAGNOSE_JOB), {INCIDENT_ID: incident_id, REQUESTED_BY: caller}
            )
            found = latest_diagnosis(ws.ops.store, incident_id)
        diagnosis, radius = found if found else (None, None)
        status = result.dagster_run.status.value
        cause = (
            f"{diagnosis.classification.value}: {diagnosis.cause}" if diagnosis else "no diagnosis recorded"
        )
        text = f"### Diagnosis run {result.run_id} ({status}) of {incident_id}, asked by {caller}\n\n{cause}"
        return answer(
            DiagnosisRun(
                run_id=result.run_id, status=status, diagnosis=diagnosis, blast_radius=radius, text=text
            )
        )

    @server.tool(annotations=READ_ONLY)
    def blast_radius(
        asset: Annotated[str, Field(description="An asset key path, a Snowflake table or a node name.")],
    ) -> Annotated[CallToolResult, AssetBlastRadius]:
        """Who a wrong number in this asset would reach tonight: every asset and reader downstream, with its
        owners, how its recorded totals moved on the current business day against the last good night, and
        when a person reads it next (the context file's schedules)."""
        from dw_dagster.checks.history import HistorySession
        from dw_dagster.incidents.blast_radius import blast_radius as size
        from dw_dagster.incidents.evidence import DiagnosisContext
        from dw_dagster.records.incidents import CauseClass

        key = resolve_asset(ws.lineage, asset)
        metrics = ws.metrics
        day = metrics.business_day.of(datetime.now(UTC))

        def no_tables(location: str, name: str) -> str:
            raise ValueError("the blast radius of an asset reads recorded totals only")

        with ws.warehouse_read("the recorded totals"):
            ops = ws.ops
            with ops.warehouse.tagged_connection(
                "mcp.blast_radius", schema=ops.ops.schema, asset=key
            ) as conn:
                ctx = DiagnosisContext(
                    ws.lineage, metrics, no_tables, HistorySession(conn, ops.ops), conn.cursor()
                )
                start = Diagnosis(incident_id="", classification=CauseClass.UNKNOWN, cause="", path=[key])
                radius = size(key, day, start, ctx)
        rows = [
            [a.asset_key, a.name, ", ".join(a.owners), _moved(a.change), a.next_read] for a in radius.assets
        ]
        text = f"### Blast radius of {key} ({day.isoformat()})\n\n" + (
            table(["asset", "name", "owners", "moved tonight", "next read"], rows)
            if rows
            else "nothing downstream"
        )
        return answer(
            AssetBlastRadius(asset_key=key, business_date=day.isoformat(), blast_radius=radius, text=text)
        )

    @server.tool(annotations=ACTS)
    def send_slack_alert(
        incident_id: str,
        message: Annotated[
            str, Field(min_length=1, max_length=MAX_NOTE, description="The note, plain text.")
        ],
        caller: Caller,
    ) -> Annotated[CallToolResult, SlackNote]:
        """Leave a note in an incident's Slack threads (its owners'), headed with who sent it and that it came
        through dw-dagster's MCP server. Delivered through the outbox like every message: an outage delays
        it, the same note twice is posted once."""
        from dw_dagster.notifications.thread_messages import update_message
        from dw_dagster.remediation.control import gated_notifier, owner_channels

        incident = get_incident(ws, incident_id)
        with ws.warehouse_read("the incident's threads"):
            ops = ws.ops
            notifier = gated_notifier(ops.slack, ops.store, ops.context)
            note = update_message(
                incident,
                message,
                title=f"Note from {caller} (through dw-dagster's MCP server)",
                emoji=":speech_balloon:",
                links=notifier.links,
            )
            version = hashlib.sha256(f"{caller}\n{message}".encode()).hexdigest()[:16]
            notifier.post_update(incident, f"{caller}: {message}", note.blocks, kind="note", version=version)
            channels = owner_channels(notifier, incident_id)
        text = f"Note from {caller} queued for {incident_id}'s threads in {', '.join(channels) or 'no channel yet'}"
        return answer(SlackNote(incident_id=incident_id, channels=channels, text=text))

    @server.tool(annotations=ACTS)
    def propose_fix(incident_id: str, caller: Caller) -> Annotated[CallToolResult, ProposedFix]:
        """Ask for a fix to an open incident: the plan its diagnosis proposes (a reference row, a node change,
        a scoped rerun), recorded for the owners' approval like any other. dw-dagster submits its run held
        until one member of every owning team approves, in Slack or with `dw-dagster approve`; this tool
        approves nothing. An incident that already has a plan for its latest diagnosis returns that plan."""
        from dw_dagster.app.incidents import DIAGNOSE_JOB
        from dw_dagster.tags import INCIDENT_ID

        incident = get_incident(ws, incident_id)
        if incident.status != "open":
            raise ToolError(f"{incident_id} is {incident.status}: there is nothing left to fix")
        with ws.warehouse_read("the incident's plans"):
            book = ws.ops.book()
            plans = book.plans(incident_id)
        run_id = None
        if not plans:
            with _tool_errors("the diagnosis that proposes the fix"):
                result = actions.execute(
                    actions.defs.get_job_def(DIAGNOSE_JOB), {INCIDENT_ID: incident_id, REQUESTED_BY: caller}
                )
                run_id = result.run_id
                plans = book.plans(incident_id)
        if not plans:
            text = (
                f"The diagnosis of {incident_id} proposes no fix (run {run_id}: its log says why); a person "
                "decides what to do."
            )
            return answer(ProposedFix(incident_id=incident_id, plan=None, text=text))
        status = _status(book, plans[-1])
        waiting = "; ".join(f"{w.team} ({', '.join(w.members)})" for w in status.waiting_for) or "nobody"
        text = "\n".join(
            [
                f"### {status.plan_id}: {status.state}",
                *(f"- {p.title} (approve: {', '.join(p.owners)})" for p in status.proposals),
                "",
                f"Waiting for: {waiting}. Approvals are given by the owners themselves: in Slack or with "
                f"`dw-dagster approve {incident_id} --as NAME`.",
            ]
        )
        return answer(ProposedFix(incident_id=incident_id, plan=status, text=text))


def _moved(change: dict[str, Any]) -> str:
    parts = []
    for name, value in change.items():
        if isinstance(value, dict) and "before" in value:
            parts.append(f"{name} {value['before']:,.0f} → {value['after']:,.0f}")
        else:
            parts.append(f"{name} {value}")
    return "; ".join(parts)
