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
- exact duplicate rows are duplication, with their keys and load, and so is a declared business key that
  repeats (``duplication.py``);
- a subset whose values moved by a measured factor, or flipped sign, is a unit or sign change
  (``drilldown.py``);
- a night whose numbers repeat the last good night's on a stopped source is stale input;
- rows missing where the input is fresh is volume loss.

Every statement is recorded in the diagnosis (``queries``) and held to ``audit.QUERY_BUDGET``. What could
not be measured (a join sqlglot cannot parse, a failed query) is said in ``notes`` and the diagnosis goes
on: it never fails the job, so the incident is always alerted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date, timedelta
from statistics import median

from dw_dagster.checks.business_keys import BUSINESS_KEY_CHECK
from dw_dagster.checks.calendar import ROUTINE_NIGHTS
from dw_dagster.checks.history import Recorded, group_rows_series
from dw_dagster.checks.implied import built_from
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.cost import COST_CHECK
from dw_dagster.governance.diagnosis import sensitive_column_diagnosis
from dw_dagster.governance.watch import CHECK_NAME as SENSITIVE_COLUMN
from dw_dagster.incidents.audit import AuditTrail
from dw_dagster.incidents.cost_increase import cost_diagnosis
from dw_dagster.incidents.drilldown import (
    Lost,
    drill_groups,
    drill_source,
    from_finding,
    rows_held,
    unit_or_sign_diagnosis,
)
from dw_dagster.incidents.duplication import copy_candidates, find_duplicates, key_repeats_diagnosis
from dw_dagster.incidents.evidence import (
    HISTORY_DAYS,
    DiagnosisContext,
    feeders,
    good_nights,
    last_good_night,
    measure_columns,
    total_of,
)
from dw_dagster.incidents.failed_load import diagnose_failed
from dw_dagster.incidents.group_shift import (
    attribute_shift_diagnosis,
    judged_groups,
    shift_diagnosis,
    trace_shift,
)
from dw_dagster.incidents.run_findings import RUN_FINDINGS
from dw_dagster.incidents.shortfall import null_subset, null_value_diagnosis, shortfall_keys
from dw_dagster.incidents.staleness import stale_diagnosis
from dw_dagster.incidents.structure import source_columns, table
from dw_dagster.incidents.value_loss import diagnose_fall, diagnose_gap
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.records.keys import split_label

__all__ = ["DiagnosisContext", "by_priority", "diagnose"]

KEPT_STEADY = 0.02
"""The share of its sources' rows a total keeps is steady within this on its good nights (as ``rows_held``
judges a row count), and fell tonight when it is below every good night's by more than this."""


def _tier(f: Finding) -> int:
    if f.check_name == "coalesce_run":
        return 0
    if f.check_name == "input_freshness":
        return 1
    if f.evidence.get("reconciliation", {}).get("passed") is False:
        return 2
    if f.check_name.startswith("total_"):
        return 3
    return 4


def by_priority(findings: Sequence[Finding]) -> list[Finding]:
    """Findings with the likeliest root first: failed load, stale input, reconciliation, totals, volume."""
    return sorted(findings, key=_tier)


def diagnose(incident: Incident, findings: Sequence[Finding], ctx: DiagnosisContext) -> Diagnosis:
    """The incident's diagnosis, with the statements it ran. Never raises for what it could not measure.

    The findings are read in priority order (``by_priority``) and the first that a classifier explains
    gives the diagnosis: a finding that explains nothing (a false alarm riding on the night, a lag with no
    stopped input) does not hide a real fault among the others. Only when none explains anything is the
    incident ``unknown``, with the top finding's account of what was checked. Each finding tried has the
    statement budget of its own (``audit.QUERY_BUDGET``), so a finding that explained nothing does not
    starve the next; every statement of every attempt is in the audit trail."""
    if not findings:
        return Diagnosis(
            incident_id=incident.incident_id, classification=CauseClass.UNKNOWN, cause="no findings"
        )
    ranked = _distinct(_upstream_first(findings, ctx))
    records: list = []
    notes: list[str] = []
    first: Diagnosis | None = None
    nulls_tried = False
    for i, finding in enumerate(ranked):
        trail = AuditTrail()
        actx = ctx.audited(trail)
        try:
            # A group whose value is NULL and whose last good value explains the fall names the keys,
            # whichever finding came first; a failed build or stale input still leads.
            nulls = None
            if not nulls_tried and (
                finding.check_name.startswith("total_") or finding.check_name == "volume"
            ):
                nulls_tried = True
                nulls = null_value_diagnosis(incident, findings, actx)
            found = nulls or _classify(incident, finding, actx)
        except Exception as e:  # noqa: BLE001 - a diagnosis that cannot finish must not cost the alert
            # The error in full in the notes (the run's log and the incident's record); the people reading
            # the alert get one short sentence, never an exception's text.
            actx.note(f"the diagnosis stopped: {type(e).__name__}: {e}")
            known = finding.asset_key in actx.graph
            found = Diagnosis(
                incident_id=incident.incident_id,
                classification=CauseClass.UNKNOWN,
                cause=f"{finding.summary} (the cause could not be measured: the diagnosis stopped on an error, "
                "recorded in its notes)",
                path=[*sorted(actx.graph.upstream(finding.asset_key)), finding.asset_key] if known else [],
                owners=actx.graph.owners_on([finding.asset_key]) if known else [],
            )
        records.extend(trail.records)
        where = finding.named
        notes.extend(actx.notes if i == 0 else [f"{where}: {n}" for n in actx.notes])
        if found.classification is not CauseClass.UNKNOWN:
            if i > 0:
                notes.append(
                    f"explained by {where}; the findings before it explained nothing: "
                    + "; ".join(f.named for f in ranked[:i])
                )
                found = found.model_copy(update={"evidence": {**found.evidence, "explained_by": where}})
            return found.model_copy(update={"queries": records, "notes": notes})
        first = first or found
    assert first is not None
    return first.model_copy(update={"queries": records, "notes": notes})


def _upstream_first(findings: Sequence[Finding], ctx: DiagnosisContext) -> list[Finding]:
    """Findings by priority (``by_priority``'s tiers) and, within one, the table nearer the cause first: a
    table above another in the lineage has fewer tables above it (a rate card's wrong row moves the billed
    fact's per-row values, and every total built from it after; the billed fact's own finding names the
    subset and its factor)."""

    def depth(f: Finding) -> int:
        return len(ctx.graph.upstream(f.asset_key)) if f.asset_key in ctx.graph else 0

    return sorted(findings, key=lambda f: (_tier(f), depth(f)))  # stable: ties keep their order


def _distinct(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per check and asset (the first, in the order given): the same check on the same table
    classifies the same way."""
    seen: set[tuple[str, str]] = set()
    out = []
    for f in findings:
        if (f.check_name, f.asset_key) not in seen:
            seen.add((f.check_name, f.asset_key))
            out.append(f)
    return out


def _classify(incident: Incident, primary: Finding, ctx: DiagnosisContext) -> Diagnosis:
    if primary.check_name == SENSITIVE_COLUMN:
        return sensitive_column_diagnosis(incident, primary)
    if primary.check_name in RUN_FINDINGS:
        return RUN_FINDINGS[primary.check_name](incident, primary, ctx)
    if primary.check_name == "coalesce_run":
        return diagnose_failed(incident, primary, ctx)
    if primary.check_name == "input_freshness":
        return stale_diagnosis(incident, primary, ctx) or _unknown(incident, primary, ctx)
    if primary.check_name == BUSINESS_KEY_CHECK:
        return key_repeats_diagnosis(incident, primary, ctx)
    if primary.check_name == COST_CHECK:  # a cost jump is not a data fault: its finding says what grew
        return cost_diagnosis(incident, primary, ctx)
    total = total_of(primary, ctx.metrics)
    # Declared (reconcile_with) or implied by the lineage (checks/implied.py): the evidence names the sources.
    if total is not None and primary.evidence.get("reconciliation", {}).get("passed") is False:
        found = diagnose_gap(incident, primary, total, ctx)
        if found is not None:
            return _null_keys_subset(found, total, ctx, primary.business_date)
        rec = primary.evidence["reconciliation"]
        extra = {"gap_units": float(rec["gap_change"])}
        return _total_anomaly(incident, primary, total, ctx, extra)
    if total is not None:
        shifted = attribute_shift_diagnosis(incident, primary, total, ctx)
        return shifted or _total_anomaly(incident, primary, total, ctx)
    return _volume(incident, primary, ctx)


def _unknown(
    incident: Incident,
    finding: Finding,
    ctx: DiagnosisContext,
    evidence=None,
    path=None,
    checked: Sequence[str] = (),
) -> Diagnosis:
    """No cause the evidence shows: an unexplained deviation, saying what was checked (the incident is then a
    WARN, ``triage.py``)."""
    known = finding.asset_key in ctx.graph
    cause = finding.summary
    if checked:
        cause = f"Unexplained deviation: {finding.summary}. Checked, and not the cause: {'; '.join(checked)}."
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.UNKNOWN,
        cause=cause,
        evidence=evidence or {},
        path=path or ([*sorted(ctx.graph.upstream(finding.asset_key)), finding.asset_key] if known else []),
        owners=ctx.graph.owners_on([finding.asset_key]) if known else [],
    )


def _gap(group: str, tonight, before) -> KeyGap:
    column, value = split_label(group)
    return KeyGap(
        column=column,
        value=value,
        rows=0,
        units=tonight.groups.get(group, 0.0) - before.groups.get(group, 0.0),
    )


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
    checked: list[str] = []
    sources = _measure_sources(ctx, total)
    # Above its sources (a reconciliation's gap below its usual): copies in any table the total is built
    # through multiply its rows (a lookup or a bridge loaded twice fans them out), not only in those its
    # measure is read from, before the total's own table (whose copies a fan-out made); they are named by the
    # key the table is joined on.
    surplus = float(evidence.get("gap_units") or 0) < 0
    if surplus:
        sources = [s for s in sources if s != total.asset] + copy_candidates(ctx, total.asset)
    # Every copy in the table is counted, an older load's too: a replicated snapshot's rows keep the stamp of
    # their last change, so the night's copies of old rows carry old stamps (no stamp tells tonight's copies).
    copies = find_duplicates(ctx, sources, by_join=surplus)
    checked.append(f"exact duplicate rows in {', '.join(sources)}: none")
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
            cause_asset=copies.asset,
            # From the table that holds the copies to the total (the total's own table alone, when they are
            # there: a source total read first, the table's upstream systems are its owners, not its path).
            path=ctx.graph.path(copies.asset, total.asset) if copies.asset in ctx.graph else path,
            owners=ctx.graph.owners_on(feeders(ctx, copies.asset)),
            test_query=copies.query,
        )
    group_keys = [g.upper() for t in ctx.metrics.totals for g in t.group_keys]
    nights = good_nights(ctx, history, day)
    drill = drill_source(ctx, total, day, nights, group_keys)
    # A subset's column that switched sign, as the check read it, before any drill by sizes: the drill reads
    # the summed expression, in which the other columns' rows hide it.
    moved = (from_finding(finding, total) if "sign_flipped" in finding.evidence else None) or drill.moved
    held = None
    if moved is None:
        held = rows_held(ctx, total.asset, day, before.business_date)
        moved = drill_groups(tonight, before, held, total.asset, _group_rows(ctx, total, day, before))
    if moved is None:
        moved = from_finding(finding, total)
    if moved is not None:
        return unit_or_sign_diagnosis(incident, finding, total, moved, ctx, evidence)
    checked.append(
        f"per-row values of {', '.join(measure_columns(total)) or 'the measure'} against the last good nights, "
        "by every low-cardinality column of the source, and the recorded groups: no subset moved by a factor"
    )
    judged = judged_groups(
        finding.evidence.get("groups_moved") or [],
        finding.evidence.get("reconciliation"),
        lambda: [history[d] for d in nights],
        tonight,
    )
    shift = trace_shift(ctx, total, tonight, before, judged)
    if shift is not None:
        return shift_diagnosis(incident, total, shift, ctx, evidence)
    if total.group_keys:
        checked.append("shares of the groups: no shift traced to a reference row")
    if held is None:
        held = rows_held(ctx, total.asset, day, before.business_date)
    # A subset of the source whose rows fell while the others' arrived: rows are missing, however closely
    # the whole table's count held (one group's lines within the day-to-day noise of all of them).
    held = held and drill.lost is None
    fell = (tonight.value or 0) < (before.value or 0) or _rows_fell(finding)
    if held or (tonight.value == before.value and tonight.groups == before.groups):
        # The rows are all there (or the number repeats the last good night's to the unit): a source that
        # stopped, a lookup included, before anything else.
        stale = stale_diagnosis(incident, finding, ctx)
        if stale is not None:
            return stale
        checked.append("the source tables' latest loads: none stopped")
    missing = [g for g in before.groups if g not in tonight.groups]
    if not held and (missing or fell):
        # Rows went (whole groups, or the total's rows fell): an input that delivered nothing tonight, though
        # its own record says it loads on every night like this one, before volume loss.
        stale = stale_diagnosis(incident, finding, ctx, stalled_only=True)
        if stale is not None:
            return stale
        checked.append("the inputs' latest loads: each advanced tonight, or its record shows it skips nights")
    # The sources delivered their rows and the total kept fewer of them than on its good nights: the rows
    # went inside the pipeline (a join on NULL or unknown keys), not at the source.
    kept = None if held or drill.lost is not None else _kept_share(ctx, total, day, nights)
    if kept is not None:
        evidence.update({"kept_share": kept[0], "kept_share_good_nights": kept[1]})
    if (held or kept is not None) and fell and not evidence.get("gap_units"):
        # No source total to reconcile with, yet the rows held (or the sources delivered what the total
        # lost): a join on the path drops value.
        found = diagnose_fall(
            incident, finding, total, ctx, (before.value or 0) - (tonight.value or 0), evidence
        )
        if found is not None:
            return _null_keys_subset(found, total, ctx, day, nights)
        checked.append("every join and filter the total is built through: none drops the fall")
    if missing or fell:
        # The source's values whose rows did not arrive, else the groups that hold the fall, ranked by how
        # much of it each explains (a group gone counts all).
        lost = _lost_keys(drill.lost)
        keys = lost or (shortfall_keys(tonight, before) if tonight.groups else [])
        held_by = ", ".join(
            f"{k.label} ({-k.rows:+,} rows)" if lost else f"{k.label} ({k.units:+,.0f})" for k in keys
        )
        return Diagnosis(
            incident_id=incident.incident_id,
            classification=CauseClass.VOLUME_LOSS,
            cause=_level_phrase(total, tonight.value or 0.0, before.value or 0.0, finding)
            + (f"; keys missing tonight: {', '.join(missing[:5])}" if missing else "")
            + (f"; the fall is in {held_by}" if held_by else ""),
            evidence=evidence,
            keys=keys,
            cause_asset=total.asset,
            path=path,
            owners=ctx.graph.owners_on([total.asset]),
        )
    return _unknown(incident, finding, ctx, evidence, path, checked)


def _kept_share(
    ctx: DiagnosisContext, total: RecordedTotal, day: date, nights: Sequence[date]
) -> tuple[float, float] | None:
    """The share of its sources' rows the total kept tonight and on its good nights (their median), when it
    fell beyond ``KEPT_STEADY`` below a share steady within it on every good night; None otherwise, or when
    it is not on record. The sources are the recorded totals the total's measure is built from alone
    (``checks.implied.built_from``, the implied reconciliation's own answer), each with its rows on record
    (its SQL's ``ROWS``); a total's and its sources' rows rise and fall together with the day, so their ratio
    shows rows lost between them however much the day varies."""
    if not total.group_keys:
        return None
    totals = ctx.metrics.totals
    names = built_from(ctx.graph, total, totals, {t.name: measure_columns(t) for t in totals})
    feeding = [ctx.metrics.get(n) for n in names]
    if not feeding or not all(t.group_keys for t in feeding):
        return None
    rows = [
        ctx.history.metric_history(group_rows_series(t.name), day + timedelta(days=1), HISTORY_DAYS)
        for t in [total, *feeding]
    ]

    def share(d: date) -> float | None:
        found = [r.get(d) for r in rows]
        if any(f is None or f.value is None for f in found):
            return None
        delivered = sum(f.value for f in found[1:])  # type: ignore[misc, union-attr]
        return found[0].value / delivered if delivered else None  # type: ignore[union-attr, operator]

    tonight = share(day)
    good = [s for d in nights if (s := share(d)) is not None]
    if tonight is None or len(good) < ROUTINE_NIGHTS:
        return None
    low, high = min(good), max(good)
    if high > low * (1 + KEPT_STEADY) or tonight >= low * (1 - KEPT_STEADY):
        return None
    return round(tonight, 4), round(median(good), 4)


def _null_keys_subset(
    found: Diagnosis,
    total: RecordedTotal,
    ctx: DiagnosisContext,
    day: date,
    nights: Sequence[date] | None = None,
) -> Diagnosis:
    """A join's value loss on rows whose key arrives NULL, named by the source subset that holds tonight's
    new NULL keys (``shortfall.null_subset``: per low-cardinality column of the source, the value whose rows
    got them while the others got none): the region whose lookup failed, not ``KEY IS NULL``. Whichever
    finding led there (the total's own check, or its reconciliation, declared or implied); ``nights``: the
    total's good nights (read when not given)."""
    nulls = [k for k in found.keys if k.value is None]
    if found.classification is not CauseClass.VALUE_LOSS or not nulls:
        return found
    if nights is None:
        history = ctx.history.metric_history(total.name, day + timedelta(days=1), HISTORY_DAYS)
        nights = good_nights(ctx, history, day)
    subset = null_subset(ctx, total, [k.label for k in nulls], day, list(nights))
    if subset is None:
        return found
    key = KeyGap(
        column=subset.column,
        value=subset.value,
        rows=subset.nulls,
        units=sum(k.units for k in nulls),
        change=f"{' or '.join(subset.nulled)} NULL on {subset.nulls:,} of its {subset.rows:,} rows tonight, "
        f"on no other {subset.column}'s",
    )
    nulled = " or ".join(subset.nulled)
    return found.model_copy(
        update={
            "keys": [key, *found.keys],
            "cause": f"{found.cause} The rows arrived; their keys did not: {nulled} arrives NULL in "
            f"{subset.asset} for {key.label} ({subset.nulls:,} of its {subset.rows:,} rows tonight) and for no "
            f"other {subset.column}.",
            "upstream_change": f"{nulled} arrives empty in {subset.asset} for {key.label}",
            "cause_asset": subset.asset,
            "evidence": {**found.evidence, "null_source": subset.asset, "null_rows": subset.nulls},
        }
    )


def _group_rows(ctx: DiagnosisContext, total: RecordedTotal, day, before) -> tuple[Recorded, Recorded] | None:
    """The total's rows by group (its SQL's ``ROWS``) tonight and on the night ``before``, when on record."""
    if not total.group_keys:
        return None
    history = ctx.history.metric_history(group_rows_series(total.name), day + timedelta(days=1), HISTORY_DAYS)
    now, then = history.get(day), history.get(before.business_date)
    return (now, then) if now is not None and then is not None else None


def _level_phrase(total: RecordedTotal, now: float, then: float, finding: Finding) -> str:
    """Where the total stands tonight, for a volume loss's cause. Below the last good night it fell; on a night
    that usually rises (a month-end) rows can go missing while it stands above that night, even above tonight's
    expectation, and saying "fell" would contradict its own figures: it is put against tonight's expectation
    instead, its rows' where they fell against theirs, its value's where the judgement was of the value itself
    (a month-to-date total is judged on its increment, whose expectation is no level of the total)."""
    if now < then:
        return f"{total.name} fell to {now:,.0f} from {then:,.0f}"
    last = f"{then:,.0f} on the last good night"
    if _rows_fell(finding):
        rows = finding.evidence["rows_baseline"]
        return (
            f"{total.name} is {now:,.0f} ({last}), its rows {rows['value']:,.0f} against {rows['expected']:,.0f} "
            "expected tonight"
        )
    judged = finding.evidence.get("baseline") or {}
    expected = judged.get("expected")
    value = judged.get("value")
    if (
        isinstance(expected, int | float)
        and isinstance(value, int | float)
        and math.isclose(value, now, rel_tol=1e-4)
    ):
        return f"{total.name} is {now:,.0f} ({expected:,.0f} expected tonight, {last})"
    return f"{total.name} is {now:,.0f} ({last})"


def _rows_fell(finding: Finding) -> bool:
    """Whether the finding's own judgement of the total's rows (against its calendar-aware expectation: a
    month-end night's usual level, not the ordinary night before it) says they fell."""
    judged = finding.evidence.get("rows_baseline") or {}
    rows, expected = judged.get("value"), judged.get("expected")
    return isinstance(rows, int | float) and isinstance(expected, int | float) and rows < expected


def _lost_keys(lost: Lost | None) -> list[KeyGap]:
    if lost is None:
        return []
    return [
        KeyGap(
            column=lost.column,
            value=value,
            rows=round(short),
            units=0.0,
            change=f"{lost.column}{' IS NULL' if value is None else '=' + value} is {short:,.0f} rows short in "
            f"{lost.asset} (at the level of the day its other values show)",
        )
        for value, short in lost.values
    ]


def _volume(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    """A row count that fell is volume loss; one that rose is duplication where copies are found, else
    nothing measured explains it (a rise is no volume loss): unknown, saying what was checked."""
    rows = finding.evidence.get("row_count")
    expected = (finding.evidence.get("baseline") or {}).get("expected")
    up = isinstance(rows, int | float) and isinstance(expected, int | float) and rows > expected
    key = finding.asset_key
    candidates = copy_candidates(ctx, key)
    copies = find_duplicates(ctx, candidates) if up and candidates else None
    evidence = {
        "row_count": rows or 0,
        "expected_rows": expected or 0,
        "duplicate_rows": copies.extra_rows if copies else 0,
    }
    path = sorted(ctx.graph.upstream(key)) + [key] if key in ctx.graph else [key]
    if up and copies is None:
        checked = [f"exact duplicate rows in {', '.join(candidates)}: none"] if candidates else []
        return _unknown(
            incident, finding, ctx, evidence, path, checked or ["nothing: the table is not in the lineage"]
        )
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.DUPLICATION if copies else CauseClass.VOLUME_LOSS,
        cause=finding.summary
        + (f"; {copies.asset} holds {copies.extra_rows:,} exact duplicate rows" if copies else ""),
        evidence=evidence,
        keys=copies.keys[:10] if copies else [],
        cause_asset=copies.asset if copies else key,
        path=path,
        owners=ctx.graph.owners_on([key]) if key in ctx.graph else [],
        test_query=copies.query if copies else None,
    )
