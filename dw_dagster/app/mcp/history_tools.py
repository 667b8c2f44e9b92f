"""A check's history: what dw-dagster recorded night by night (the ops schema's ``METRIC_HISTORY``: a total
under its name, a table's row count as ``volume:<asset>``), which nights were left out of the baseline, and
the levels accepted since."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from dw_dagster.app.mcp.answers import Answer, answer, table
from dw_dagster.app.mcp.incident_tools import READ_ONLY
from dw_dagster.app.mcp.workspace import Workspace
from dw_dagster.checks.history import Rebase, Recorded, total_series, volume_series
from dw_dagster.checks.metrics import MetricsFile

VOLUME = "volume"


class Night(BaseModel):
    business_date: date
    value: float | None = Field(description="The recorded total or row count (None: NULL that night).")
    groups: dict[str, float | None] = Field(default_factory=dict)
    left_out: bool = Field(description="Left out of the baseline (an incident's night).")
    incident_night: bool = Field(description="An incident was opened for this business date.")


class CheckHistory(Answer):
    check: str
    asset_key: str
    series: str
    nights: list[Night]
    new_levels: list[Rebase] = Field(description="Levels accepted, explained or set by a verified fix.")


def resolve_check(metrics: MetricsFile, check: str, asset: str | None) -> tuple[str, str, str | None]:
    """``(check name, asset key, total name)``: ``volume`` (of ``asset``) or a recorded total, named as its
    check is (``total_<name>``) or by its name."""
    if check == VOLUME:
        if not asset:
            raise ToolError("the volume check is per asset: give asset (an asset key path)")
        return VOLUME, asset, None
    name = check.removeprefix("total_")
    total = next((t for t in metrics.totals if t.name == name), None)
    if total is None or (asset and total.asset != asset):
        known = [VOLUME, *(f"total_{t.name}" for t in metrics.totals if not asset or t.asset == asset)]
        where = f" on {asset}" if asset else ""
        raise ToolError(f"{check!r}: no such check{where} (checks: {', '.join(known)})")
    return f"total_{total.name}", total.asset, total.name


def history_answer(
    check: str,
    asset: str,
    series: str,
    recorded: dict[date, Recorded],
    rebases: list[Rebase],
    incident_days: set[date],
) -> CheckHistory:
    nights = [
        Night(
            business_date=d,
            value=r.value,
            groups=r.groups,
            left_out=r.flagged,
            incident_night=d in incident_days,
        )
        for d, r in sorted(recorded.items())
    ]
    lines = [f"### {check} on {asset}: {len(nights)} night{'s' if len(nights) != 1 else ''} recorded", ""]
    if nights:
        groups = sorted({g for n in nights for g in n.groups})[:8]
        lines.append(
            table(
                ["night", "value", *groups, "note"],
                [
                    [
                        n.business_date,
                        _num(n.value),
                        *(_num(n.groups.get(g)) for g in groups),
                        "incident night, left out of the baseline"
                        if n.left_out
                        else "incident night"
                        if n.incident_night
                        else "",
                    ]
                    for n in nights
                ],
            )
        )
    else:
        lines.append("nothing recorded in these nights")
    if rebases:
        lines += ["", "New levels:", *(f"- {r.describe()}" for r in rebases)]
    return CheckHistory(
        check=check, asset_key=asset, series=series, nights=nights, new_levels=rebases, text="\n".join(lines)
    )


def _num(v: float | None) -> str:
    if v is None:
        return "NULL"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}"


def register(server: MCPServer, ws: Workspace) -> None:
    @server.tool(annotations=READ_ONLY)
    def check_history(
        check: Annotated[
            str, Field(description="'volume' or a recorded total's check, e.g. 'total_<name>'.")
        ],
        asset: Annotated[str | None, Field(description="The asset key path (required for volume).")] = None,
        nights: Annotated[int, Field(ge=1, le=400)] = 14,
    ) -> Annotated[CallToolResult, CheckHistory]:
        """What a check recorded night by night up to its latest night: the total (and its groups) or the
        row count, which nights were incident nights left out of the baseline, and the new levels accepted
        or set by a verified fix."""
        from dw_dagster.checks.history import HistoryStore

        name, key, total = resolve_check(ws.metrics, check, asset)
        series = volume_series(key) if total is None else total_series(total)
        with ws.warehouse_read(f"the history of {name}"):
            ops = ws.ops
            with HistoryStore(ops.warehouse, ops.ops, check="mcp").session("mcp.check_history") as h:
                last = (
                    h.latest_volume(key)
                    if total is None
                    else getattr(h.latest_metric(total), "business_date", None)
                )
                if last is None:
                    raise ToolError(f"{name} on {key}: nothing recorded yet")
                before = last + timedelta(days=1)
                recorded = (
                    h.volume_history(key, before, nights)
                    if total is None
                    else h.metric_history(total, before, nights)
                )
                since = before - timedelta(days=nights)
                rebases = [
                    r
                    for s, rs in h.rebases(since).items()
                    if s == series or s.startswith(f"{series}|")
                    for r in rs
                ]
                days = h.incident_days(since)
        return answer(history_answer(name, key, series, recorded, rebases, days))
