"""Diagnosis: from an incident's findings to its cause, by evidence measured in the warehouse.

The walk starts at the failing total or table and goes upstream through the lineage graph. Each class is
decided by a measurement, never by the words of an alert, and only from the pipeline's own structure
(nodes, joins, column lineage, keys, the metrics file's group keys, the sources' columns):

- a failed Coalesce node is a schema change or a failed load, unless a *test* failed it on bad data
  (``failed_load.py``: duplication behind a unique test, a sign or unit change behind a value test);
- an input whose latest load is older than the build is stale input, named per source table
  (``staleness.py``);
- a gap to the source that a join or a filter on the path explains is value loss, or a reference-data
  change when the key used to match (``value_loss.py``, ``origins.py``);
- exact duplicate rows are duplication, with their keys and load (``duplication.py``);
- a subset whose values moved by a measured factor, or flipped sign, is a unit or sign change
  (``drilldown.py``);
- a night whose numbers repeat the last good night's on a stopped source is stale input;
- rows missing where the input is fresh is volume loss.

Every statement is recorded in the diagnosis (``queries``) and held to ``audit.QUERY_BUDGET``. What could
not be measured (a join sqlglot cannot parse, a failed query) is said in ``notes`` and the diagnosis goes
on: it never fails the job, so the incident is always alerted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, time, timedelta

from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.coalesce.sql import quote_identifier
from dw_dagster.incidents.audit import AuditTrail
from dw_dagster.incidents.drilldown import Moved, drill_groups, drill_source
from dw_dagster.incidents.duplication import find_duplicates
from dw_dagster.incidents.evidence import (
    HISTORY_DAYS,
    DiagnosisContext,
    feeders,
    last_good_night,
    measure_column,
    measure_columns,
    total_of,
)
from dw_dagster.incidents.failed_load import diagnose_failed
from dw_dagster.incidents.keys import split_label
from dw_dagster.incidents.models import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.incidents.staleness import feeding_systems, stopped
from dw_dagster.incidents.structure import source_column, source_columns, sources_upstream, table
from dw_dagster.incidents.value_loss import diagnose_gap

__all__ = ["DiagnosisContext", "by_priority", "diagnose"]


def by_priority(findings: Sequence[Finding]) -> list[Finding]:
    """Findings with the likeliest root first: failed load, stale input, reconciliation, totals, volume."""

    def rank(f: Finding) -> int:
        if f.check_name == "coalesce_run":
            return 0
        if f.check_name == "input_freshness":
            return 1
        if f.evidence.get("reconciliation", {}).get("passed") is False:
            return 2
        if f.check_name.startswith("total_"):
            return 3
        return 4

    return sorted(findings, key=rank)


def diagnose(incident: Incident, findings: Sequence[Finding], ctx: DiagnosisContext) -> Diagnosis:
    """The incident's diagnosis, with the statements it ran. Never raises for what it could not measure."""
    if not findings:
        return Diagnosis(
            incident_id=incident.incident_id, classification=CauseClass.UNKNOWN, cause="no findings"
        )
    trail = AuditTrail()
    actx = ctx.audited(trail)
    primary = by_priority(findings)[0]
    try:
        diagnosis = _classify(incident, primary, actx)
    except Exception as e:  # noqa: BLE001 - a diagnosis that cannot finish must not cost the alert
        actx.note(f"the diagnosis stopped: {type(e).__name__}: {e}")
        known = primary.asset_key in actx.graph
        diagnosis = Diagnosis(
            incident_id=incident.incident_id,
            classification=CauseClass.UNKNOWN,
            cause=f"{primary.summary} (the cause could not be measured: {type(e).__name__}: {e})",
            path=[*sorted(actx.graph.upstream(primary.asset_key)), primary.asset_key] if known else [],
            owners=actx.graph.owners_on([primary.asset_key]) if known else [],
        )
    return diagnosis.model_copy(update={"queries": list(trail.records), "notes": list(actx.notes)})


def _classify(incident: Incident, primary: Finding, ctx: DiagnosisContext) -> Diagnosis:
    if primary.check_name == "coalesce_run":
        return diagnose_failed(
            incident, primary, ctx, lambda t, m: _unit_or_sign(incident, primary, t, m, ctx, {})
        )
    if primary.check_name == "input_freshness":
        return _stale_input(incident, primary, ctx) or _unknown(incident, primary, ctx)
    total = total_of(primary, ctx.metrics)
    if (
        total is not None
        and total.reconcile_with
        and primary.evidence.get("reconciliation", {}).get("passed") is False
    ):
        found = diagnose_gap(incident, primary, total, ctx)
        if found is not None:
            return found
        rec = primary.evidence["reconciliation"]
        extra = {"gap_units": float(rec["gap_change"])}
        return _total_anomaly(incident, primary, total, ctx, extra)
    if total is not None:
        return _total_anomaly(incident, primary, total, ctx)
    return _volume(incident, primary, ctx)


def _built_at(finding: Finding, ctx: DiagnosisContext) -> datetime:
    """When the night's build ran: the finding's, else the morning after the business date at the cutoff."""
    for name in ("built_at", "run_end_time", "run_start_time"):
        value = finding.evidence.get(name)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
                return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
            except ValueError:
                pass
    tz = ctx.metrics.business_day
    from zoneinfo import ZoneInfo

    day = finding.business_date + timedelta(days=1)
    return datetime.combine(day, time(tz.cutoff_hour), ZoneInfo(tz.timezone)).astimezone(UTC)


def _stale_input(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis | None:
    """Stale input, per source table: the tables that stopped, by how long, and who feeds them; None when
    no source stopped and no freshness rule says the input is stale."""
    rule = next((r for r in ctx.metrics.freshness.inputs if r.asset == finding.asset_key), None)
    built = _built_at(finding, ctx)
    stale = stopped(ctx, finding.asset_key, built)
    if not stale and (rule is None or finding.check_name != "input_freshness"):
        return None
    keys = [a.asset for a in stale] or [rule.input]  # type: ignore[union-attr]
    systems = feeding_systems(ctx, keys)
    path = ctx.graph.path(systems[0], finding.asset_key) if systems else [*keys, finding.asset_key]
    age = finding.evidence.get("input_age_hours")
    named = "; ".join(a.shown for a in stale)
    cause = f"{finding.asset_key} was rebuilt on stale input: " + (
        named if stale else f"the latest load of {keys[0]} is {age:.1f} h older than the build"
        if isinstance(age, float) else finding.summary
    ) + (f". {', '.join(systems)} has delivered nothing new (replication stalled?)." if systems else ".")  # fmt: skip
    evidence = {k: v for k, v in finding.evidence.items() if isinstance(v, int | float | str)}
    evidence["stale_tables"] = ", ".join(a.asset for a in stale) or keys[0]
    if stale and stale[0].age_hours is not None:
        evidence.setdefault("input_age_hours", round(max(a.age_hours or 0 for a in stale), 1))
    first = stale[0] if stale else None
    column = first.column if first else rule.input_column  # type: ignore[union-attr]
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.STALE_INPUT,
        cause=cause,
        evidence=evidence,
        keys=[
            KeyGap(
                column=a.column,
                value=str(a.latest),
                units=0.0,
                rows=0,
                change=f"{a.asset}: no rows since {a.latest} ({a.age_hours:.1f} h before the build)",
            )
            for a in stale
            if a.latest is not None
        ],  # fmt: skip
        upstream_change=f"no new rows from {', '.join(systems or keys)}",
        path=path,
        owners=ctx.graph.owners_on(systems or keys),
        test_query=f"SELECT MAX({quote_identifier(column)}) AS LATEST_LOAD FROM {table(ctx.graph, keys[0])}",
    )


def _unknown(
    incident: Incident, finding: Finding, ctx: DiagnosisContext, evidence=None, path=None
) -> Diagnosis:
    known = finding.asset_key in ctx.graph
    return Diagnosis(
        incident_id=incident.incident_id, classification=CauseClass.UNKNOWN, cause=finding.summary,
        evidence=evidence or {}, path=path or ([*sorted(ctx.graph.upstream(finding.asset_key)), finding.asset_key] if known else []),
        owners=ctx.graph.owners_on([finding.asset_key]) if known else [],
    )  # fmt: skip


def _gap(group: str, tonight, before) -> KeyGap:
    column, value = split_label(group)
    return KeyGap(
        column=column, value=value, rows=0,
        units=tonight.groups.get(group, 0.0) - before.groups.get(group, 0.0),
    )  # fmt: skip


def _measure_sources(ctx: DiagnosisContext, total: RecordedTotal) -> list[str]:
    """The tables to look for copies in: the sources the total's measure is read from, then the total's own."""
    keys = [k for c in measure_columns(total) for k, _ in source_columns(ctx.graph, (total.asset, c))]
    keys = list(dict.fromkeys([*keys, total.asset]))
    return [k for k in keys if table(ctx.graph, k)]


def _total_anomaly(
    incident: Incident,
    finding: Finding,
    total: RecordedTotal,
    ctx: DiagnosisContext,
    evidence_extra: dict[str, float | int | str] | None = None,
) -> Diagnosis:
    day = finding.business_date
    history = ctx.history.metric_history(total.name, day + timedelta(days=1), HISTORY_DAYS)
    tonight = history.get(day)
    before = last_good_night(ctx, history, day)
    evidence: dict[str, float | int | str] = dict(evidence_extra or {})
    path = sorted(ctx.graph.upstream(total.asset)) + [total.asset]
    if tonight is None or before is None:
        return _unknown(incident, finding, ctx, evidence, path)
    evidence.update(
        {"total": total.name, "value": tonight.value or 0.0, "last_good_value": before.value or 0.0}
    )
    expected = (finding.evidence.get("baseline") or {}).get("expected")
    if isinstance(expected, int | float):
        evidence["baseline_expected"] = float(expected)
    copies = find_duplicates(ctx, _measure_sources(ctx, total))
    if copies is not None:
        evidence.update({"duplicate_rows": copies.extra_rows, "duplicates_in": copies.asset})
        if copies.load:
            evidence["duplicate_load"] = copies.load
        load = f", brought by {copies.load}" if copies.load else ""
        moved = {
            g
            for g in tonight.groups
            if g in before.groups
            and before.groups[g]
            and abs(tonight.groups[g] / before.groups[g] - 1) > 0.05
        }
        return Diagnosis(
            incident_id=incident.incident_id,
            classification=CauseClass.DUPLICATION,
            cause=f"{copies.asset} holds {copies.extra_rows:,} exact duplicate rows tonight{load}: "
            f"{total.name} is {tonight.value:,.0f} against {before.value:,.0f} on the last good night.",
            evidence=evidence,
            keys=copies.keys[:10] or [_gap(g, tonight, before) for g in sorted(moved)[:5]],
            upstream_change=f"duplicate rows loaded into {copies.asset}{load}",
            path=ctx.graph.path(copies.asset, total.asset) if copies.asset != total.asset else path,
            owners=ctx.graph.owners_on(feeders(ctx, copies.asset)),
            test_query=copies.query,
        )  # fmt: skip
    group_keys = [g.upper() for t in ctx.metrics.totals for g in t.group_keys]
    moved = drill_source(ctx, total, day, before.business_date, group_keys)
    if moved is None:
        rows = _rows_held(ctx, total.asset, day, before.business_date)
        moved = drill_groups(tonight, before, rows, total.asset)
    if moved is not None:
        return _unit_or_sign(incident, finding, total, moved, ctx, evidence)
    if tonight.value == before.value and tonight.groups == before.groups:
        # The same number to the unit as the last good night: nothing new reached it.
        stale = _stale_input(incident, finding, ctx)
        if stale is not None:
            return stale
    missing = [g for g in before.groups if g not in tonight.groups]
    if missing or (tonight.value or 0) < (before.value or 0):
        return Diagnosis(
            incident_id=incident.incident_id,
            classification=CauseClass.VOLUME_LOSS,
            cause=f"{total.name} fell to {tonight.value:,.0f} from {before.value:,.0f}"
            + (f"; keys missing tonight: {', '.join(missing[:5])}" if missing else ""),
            evidence=evidence,
            keys=[_gap(g, tonight, before) for g in missing[:5]],
            path=path,
            owners=ctx.graph.owners_on([total.asset]),
        )
    return _unknown(incident, finding, ctx, evidence, path)


def _rows_held(ctx: DiagnosisContext, asset: str, day, before) -> bool | None:
    """Whether the table's row count tonight is within 2% of the last good night's (None: not recorded)."""
    history = ctx.history.volume_history(asset, day + timedelta(days=1), HISTORY_DAYS)
    now, then = history.get(day), history.get(before)
    if now is None or then is None or not then.value or now.value is None:
        return None
    return abs(now.value / then.value - 1) <= 0.02


def _unit_or_sign(
    incident: Incident, finding: Finding, total: RecordedTotal, moved: Moved, ctx: DiagnosisContext,
    evidence: dict[str, float | int | str],
) -> Diagnosis:  # fmt: skip
    sign = moved.sign
    key_source = moved.column
    if moved.from_history:
        # A recorded group moved: the measure and the subset's key as the source table holds them.
        src = source_column(ctx.graph, (total.asset, measure_column(total) or ""))
        key_src = source_column(ctx.graph, (total.asset, moved.column))
        if src is not None:
            moved.asset, moved.measure = src
            key_source = key_src[1] if key_src is not None and key_src[0] == src[0] else ""
    measure = moved.measure or measure_column(total) or "the measure"
    key = KeyGap(
        column=moved.column, value=moved.value, rows=moved.rows, units=moved.after - moved.before,
        factor=round(moved.factor, 4),
        change=f"{measure} {'flipped sign' if sign else 'scaled'} ({moved.shown}) for {moved.column}"
        f"{' IS NULL' if moved.value is None else '=' + moved.value}",
    )  # fmt: skip
    evidence = {**evidence, "total": total.name, "factor": round(moved.factor, 4), "key": key.label, "measure": measure,
                "measure_source": moved.asset, "key_source_column": key_source, "subset_rows": moved.rows, "subset_before": moved.before,
                "subset_after": moved.after}  # fmt: skip
    where = moved.asset
    what = "flipped sign" if sign else f"moved by a factor of {moved.factor:.3g}"
    basis = (
        "per row, against the last good night" if not moved.from_history else "against the last good night"
    )
    cause = (
        f"{measure} in {where} {what} for {key.label} ({basis}) while every other {moved.column} held: "
        + ("the source now posts that key's values with the opposite sign." if sign else
           "the source now posts that key's values in another unit or scale.")
    )  # fmt: skip
    source_feeders = sources_upstream(ctx.graph, where) if where in ctx.graph else []
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.SIGN_CHANGE if sign else CauseClass.UNIT_CHANGE,
        cause=cause,
        evidence=evidence,
        keys=[key],
        upstream_change=f"{measure} {'sign' if sign else 'unit'} changed for {key.label} ({moved.shown})",
        path=ctx.graph.path(where, total.asset) if where in ctx.graph and where != total.asset else
        sorted(ctx.graph.upstream(total.asset)) + [total.asset],
        owners=ctx.graph.owners_on(feeders(ctx, source_feeders[0] if source_feeders else total.asset)),
        test_query=(
            f"SELECT {quote_identifier(moved.column)}, COUNT(*), AVG({quote_identifier(measure)}) FROM {table(ctx.graph, where)}"
            f" GROUP BY {quote_identifier(moved.column)}"
            if moved.measure and table(ctx.graph, where) else None
        ),
    )  # fmt: skip


def _volume(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    rows = finding.evidence.get("row_count")
    expected = (finding.evidence.get("baseline") or {}).get("expected")
    up = isinstance(rows, int | float) and isinstance(expected, int | float) and rows > expected
    key = finding.asset_key
    copies = (
        find_duplicates(ctx, [*sources_upstream(ctx.graph, key)[:3], key])
        if up and key in ctx.graph
        else None
    )
    evidence = {"row_count": rows or 0, "expected_rows": expected or 0,
                "duplicate_rows": copies.extra_rows if copies else 0}  # fmt: skip
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.DUPLICATION if copies else CauseClass.VOLUME_LOSS,
        cause=finding.summary + (f"; {copies.asset} holds {copies.extra_rows:,} exact duplicate rows" if copies else ""),
        evidence=evidence,
        keys=copies.keys[:10] if copies else [],
        path=sorted(ctx.graph.upstream(key)) + [key] if key in ctx.graph else [key],
        owners=ctx.graph.owners_on([key]) if key in ctx.graph else [],
        test_query=copies.query if copies else None,
    )  # fmt: skip
