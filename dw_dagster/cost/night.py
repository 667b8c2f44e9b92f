"""One business night's Snowflake cost: which nights are due, what each spender spent, each node judged
against its own nights.

A night reads its attributed queries (``history.py``), sums them per spender, records each node's credits in
the ops schema's ``METRIC_HISTORY`` (series ``cost:<asset>``, the credits per statement as its groups),
judges each node against its own nights (``jump.py``) and makes a finding for the node's owners on a jump.
A night is due once the views' latency has passed since it ended and a Coalesce node was built that night;
an idle night (nothing ran) is never due.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import dagster as dg

from dw_dagster.checks.history import HistorySession, HistoryStore, Reading
from dw_dagster.checks.metrics import BusinessDay, MetricsFile
from dw_dagster.cost import COST_CHECK
from dw_dagster.cost.attribution import Attribution, Spend, attribute, by_night
from dw_dagster.cost.history import AccountUsage, read_query_costs
from dw_dagster.cost.jump import CostJump, CostJumpConfig, judge_cost
from dw_dagster.records.incidents import Finding
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

COST_JOB = "cost_attribution"
COST_KEY = dg.AssetKey(["dw", "cost"])
# Snowflake's QUERY_ATTRIBUTION_HISTORY lags up to 8 hours (QUERY_HISTORY up to 45 minutes).
DEFAULT_LATENCY_HOURS = 8


def cost_series(asset_or_node: str) -> str:
    return f"cost:{asset_or_node}"


def night_window(business_day: BusinessDay, night: date) -> tuple[datetime, datetime]:
    """The UTC interval of one business night: from its cutoff hour to the next day's."""
    tz = ZoneInfo(business_day.timezone)
    start = datetime.combine(night, time(business_day.cutoff_hour), tz)
    end = datetime.combine(night + timedelta(days=1), time(business_day.cutoff_hour), tz)
    return start.astimezone(UTC), end.astimezone(UTC)


def latency_from_env(env: dict[str, str] | None = None) -> timedelta:
    raw = (env if env is not None else os.environ).get("DW_COST_LATENCY_HOURS", "").strip()
    if not raw:
        return timedelta(hours=DEFAULT_LATENCY_HOURS)
    try:
        hours = float(raw)
    except ValueError:
        hours = -1
    if hours < 0:
        from dw_dagster.config import DwConfigError

        raise DwConfigError(f"DW_COST_LATENCY_HOURS: expected a number of hours >= 0, got {raw!r}")
    return timedelta(hours=hours)


def nights_due(
    last_done: date | None, now: datetime, latency: timedelta, business_day: BusinessDay, had_work
) -> list[date]:
    """The nights after ``last_done`` whose views are complete at ``now`` and on which something ran
    (``had_work(start, end)``); without a ``last_done``, only the latest complete night."""
    latest = business_day.of(now - latency) - timedelta(days=1)
    first = last_done + timedelta(days=1) if last_done else latest
    nights = []
    night = first
    while night <= latest:
        if had_work(*night_window(business_day, night)):
            nights.append(night)
        night += timedelta(days=1)
    return nights


def label(spend: Spend, assets_by_node: dict[str, str]) -> str:
    """A node by its asset key when the code location knows it, else as its query tag names it."""
    asset = assets_by_node.get(spend.node_id or "") if spend.kind == "coalesce" and spend.node else None
    return f"node {asset}" if asset else spend.spender


def cost_metadata(
    attribution: Attribution, jumps: Sequence[CostJump], assets_by_node: dict[str, str]
) -> dict:
    """Float metadata per spender (plotted night by night) and the night's table as markdown."""
    md: dict[str, object] = {
        "total_credits": dg.MetadataValue.float(round(attribution.total_credits, 6)),
        "queries": dg.MetadataValue.int(attribution.queries),
    }
    for spend in [*attribution.nodes, *attribution.dw_dagster, *attribution.jobs]:
        md[f"credits: {label(spend, assets_by_node)}"] = dg.MetadataValue.float(round(spend.credits, 6))
    lines = ["| spender | credits | queries | runs |", "|---|---:|---:|---|"]
    for spend in attribution.top(20):
        lines.append(
            f"| {label(spend, assets_by_node)} | {spend.credits:.4f} | {spend.queries} | {', '.join(spend.runs[:3])} |"
        )
    md["top_spenders"] = dg.MetadataValue.md("\n".join(lines))
    jumped = [j for j in jumps if j.is_jump]
    md["cost_jumps"] = dg.MetadataValue.int(len(jumped))
    if jumped:
        md["cost_jump_series"] = ", ".join(j.series for j in jumped)
    return md


def node_assets(specs: Sequence[dg.AssetSpec]) -> dict[str, str]:
    """Coalesce node id -> asset key (``coalesce/node_id`` metadata of the integration's specs)."""
    return {
        str(s.metadata["coalesce/node_id"]): s.key.to_user_string()
        for s in specs
        if "coalesce/node_id" in s.metadata
    }


def attribute_night(
    warehouse: WarehouseResource,
    ops: OpsSchema,
    metrics: MetricsFile,
    assets_by_node: dict[str, str],
    night: date,
    *,
    backfill_nights: int = 0,
    views: AccountUsage | None = None,
    config: CostJumpConfig | None = None,
    run_id: str | None = None,
) -> tuple[Attribution, list[CostJump], list[Finding]]:
    """Reads, records and judges one night; returns the attribution, each node's judgement and a WARN
    finding per jump, for the node's owners, which the caller records on its incident. ``backfill_nights``: also record that many nights
    before it from the same read (the views keep a year), so that a first run has a baseline at once."""
    views = views or AccountUsage.from_env()
    config = config or CostJumpConfig()
    start, _ = night_window(metrics.business_day, night - timedelta(days=backfill_nights))
    _, end = night_window(metrics.business_day, night)
    with warehouse.tagged_connection("job.cost", job=COST_JOB, dagster_run_id=run_id) as conn:
        costs = read_query_costs(conn.cursor(), views, start, end)
    nights = by_night(costs, lambda c: metrics.business_day.of(c.start_time))
    attribution = nights.get(night) or attribute([])
    jumps: list[CostJump] = []
    findings: list[Finding] = []
    store = HistoryStore(warehouse, ops, job=COST_JOB, dagster_run_id=run_id)
    with store.session("job.cost.history") as history:
        for earlier, spent in nights.items():
            if earlier < night:
                _record(history, earlier, spent.nodes, assets_by_node, run_id)
        _record(history, night, attribution.nodes, assets_by_node, run_id)
        excluded = history.incident_days(night - timedelta(days=config.lookback_days))
        pasts = history.metric_histories(
            [_series(s, assets_by_node) for s in attribution.nodes], night, config.lookback_days
        )
        for spend in attribution.nodes:
            series = _series(spend, assets_by_node)
            past = pasts[series]
            flagged = {d for d, r in past.items() if r.flagged}
            jump = judge_cost(
                series,
                night,
                spend.credits,
                spend.by_stage,
                {d: r.value for d, r in past.items()},
                {d: {k: v for k, v in r.groups.items() if v is not None} for d, r in past.items()},
                config,
                excluded_days=excluded | flagged,
            )
            jumps.append(jump)
            if jump.is_jump and spend.credits >= config.min_credits:
                history.flag_metric(series, night)
                findings.append(cost_finding(night, spend, series.removeprefix("cost:"), jump, run_id))
    return attribution, jumps, findings


def _series(spend: Spend, assets_by_node: dict[str, str]) -> str:
    return cost_series(assets_by_node.get(spend.node_id or "") or spend.spender.removeprefix("node "))


def _record(
    history: HistorySession,
    night: date,
    spends: Sequence[Spend],
    assets_by_node: dict[str, str],
    run_id: str | None,
) -> None:
    """One night's credits of every node, in one statement per Coalesce run: a first run's backfill of 70
    nights is 70 statements, not one per node and night."""
    by_run: dict[str | None, dict[str, Reading]] = defaultdict(dict)
    for spend in spends:
        reading = Reading(value=spend.credits, groups=dict(spend.by_stage))
        by_run[spend.runs[0] if spend.runs else None][_series(spend, assets_by_node)] = reading
    for coalesce_run, readings in by_run.items():
        history.record_night(night, readings, run_id, coalesce_run)


def cost_finding(night: date, spend: Spend, asset: str, jump: CostJump, run_id: str | None) -> Finding:
    """A WARN finding on the node's asset, for its owners, with the statements that grew."""
    grown = "; ".join(g.describe() for g in jump.grown)
    return Finding(
        check_name=COST_CHECK,
        asset_key=asset,
        business_date=night,
        summary=jump.summary(spend.node or asset) + (f"; grew: {grown}" if grown else ""),
        severity="WARN",
        evidence={
            "credits": spend.credits,
            "expected_credits": jump.judgement.result.expected,
            "robust_z": jump.judgement.result.robust_z,
            "grown_queries": [g.model_dump() for g in jump.grown],
            "top_query_ids": spend.top_query_ids,
            "coalesce_runs": spend.runs,
            "job": spend.job,
        },
        cause_scope=f"cost:{asset}",
        dagster_run_id=run_id,
        coalesce_run_id=spend.runs[0] if spend.runs else None,
    )
