"""After the rerun: did the fix work? Each expectation is measured in the warehouse or read from Coalesce.

- ``reconciles``: the recorded total is back in line with its source total (the same reconciliation the
  nightly check runs, on the tables as rebuilt);
- ``node_test_passed``: the node test the change added ran in the rerun and passed;
- ``back_to_baseline``: a total the incident moved (a flagged list's row count) is back within its
  baseline's band around its value before the incident;
- ``rows_restored``: the fixed node holds the night's rows plus exactly the rows its join used to drop;
- ``no_duplicates``: the de-duplicated table holds no exact duplicate rows any more;
- ``input_fresh``: the rebuilt table holds its source's latest load (within the rule's allowed lag).

Every reconciliation that raised the incident (its findings') is checked again, listed in the plan or not:
a declared one as ``reconciles``; one the pipeline implies (``checks/implied.py``) by the same judgement
the nightly check made, the total's ratio to the sum of the sources its finding named, on the tables as
rebuilt, against the ratio's own record before the night.

A check that cannot run is reported as errored (``passed=None``) and fails the verification; so is an
implied ratio that cannot be judged again on a basis (value, rows) its finding judged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, timedelta
from typing import Any, NamedTuple

from dw_dagster.checks.history import HistorySession, group_rows_series
from dw_dagster.checks.implied import implied_note, reconcile_implied
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.recorded_totals import HISTORY_DAYS, compute_total, reconcile
from dw_dagster.coalesce.run_models import CoalesceRunResults
from dw_dagster.incidents.evidence import total_of
from dw_dagster.records.incidents import Finding
from dw_dagster.records.remediation import Expectation, VerificationResult
from dw_dagster.sql import quote_identifier


def verify(
    expectations: list[Expectation],
    *,
    day: date,
    metrics: MetricsFile,
    resolve_table: Callable[[str, str], str],
    cursor: Any,
    history: HistorySession,
    run_results: CoalesceRunResults | None,
    findings: Sequence[Finding] = (),
) -> list[VerificationResult]:
    """Each expectation of the plan checked, and each reconciliation the incident's ``findings`` failed."""
    raised = _reconciliations_raised(findings, metrics)
    listed = {e.subject for e in expectations if e.kind == "reconciles"}
    checks = [*expectations, *(Expectation(kind="reconciles", subject=n) for n in raised if n not in listed)]
    out = []
    for e in checks:
        implied = raised.get(e.subject) if e.kind == "reconciles" else None
        if implied is not None:
            out.append(_checked(_implied, e, implied, day, metrics, resolve_table, cursor, history))
        if implied is None or metrics.get(e.subject).reconcile_with is not None:
            out.append(_checked(_one, e, day, metrics, resolve_table, cursor, history, run_results))
    return out


def _checked(check: Callable[..., VerificationResult], e: Expectation, *args: Any) -> VerificationResult:
    try:
        return check(e, *args)
    except Exception as exc:  # noqa: BLE001 - an expectation that cannot be checked is errored, not passed
        return VerificationResult(expectation=e, passed=None, detail=f"could not be checked: {exc}")


class _Implied(NamedTuple):
    sources: tuple[str, ...]
    bases: frozenset[str]
    """The bases (value, rows) the finding judged: each must be judged again."""


def _reconciliations_raised(findings: Sequence[Finding], metrics: MetricsFile) -> dict[str, _Implied | None]:
    """Each total whose reconciliation a finding failed -> the implied reconciliation's sources and judged
    bases, or None for a declared one (``reconcile_with``)."""
    out: dict[str, _Implied | None] = {}
    for f in findings:
        rec = f.evidence.get("reconciliation") or {}
        total = total_of(f, metrics)
        if total is None or rec.get("passed") is not False:
            continue
        if not rec.get("inferred"):
            out.setdefault(total.name, None)
            continue
        bases = frozenset(b["basis"] for b in rec.get("bases") or [] if b.get("judged"))
        if out.get(total.name) is None:
            out[total.name] = _Implied(tuple(rec.get("sources") or ()), bases)
    return out


def _implied(e, implied: _Implied, day, metrics, resolve_table, cursor, history) -> VerificationResult:
    """The total's ratio to its implied sources' sum on the rebuilt tables, judged as the nightly check
    judges it (``reconcile_implied``) on the record before the night."""
    assert implied.sources, f"{e.subject}: its finding names no source totals"
    total = metrics.get(e.subject)
    values = {
        t.name: compute_total(cursor, t, resolve_table) for t in [total, *map(metrics.get, implied.sources)]
    }
    since = day - timedelta(days=HISTORY_DAYS)
    series = [s for n in values for s in (n, group_rows_series(n))]
    record = history.night_context(since, day, dict.fromkeys(series, since))
    gaps = reconcile_implied(day, record, total, implied.sources, values)
    judged = {g.basis for g in gaps if g.judged}
    missing = sorted((implied.bases or {"value"}) - judged)
    failed = [g for g in gaps if g.judged and not g.passed]
    return VerificationResult(
        expectation=e,
        passed=None if missing else not failed,
        observed={
            "sources": list(implied.sources),
            **{n: v.value for n, v in values.items()},
            **{f"{g.basis}_ratio": g.ratio for g in gaps},
            **{f"{g.basis}_usual_ratio": g.usual_ratio for g in gaps},
        },
        detail=implied_note(total.name, gaps)
        + (f" (could not be judged again on its {', '.join(missing)})" if missing else ""),
    )


def _one(e, day, metrics, resolve_table, cursor, history, run_results) -> VerificationResult:
    if e.kind == "reconciles":
        total = metrics.get(e.subject)
        assert total.reconcile_with is not None, f"{e.subject} has no reconcile_with"
        source = metrics.get(total.reconcile_with.total)
        target_now = compute_total(cursor, total, resolve_table)
        source_now = compute_total(cursor, source, resolve_table)
        rec = reconcile(
            day,
            target_now,
            source_now,
            history.metric_history(total.name, day, HISTORY_DAYS),
            history.metric_history(source.name, day, HISTORY_DAYS),
            total.reconcile_with,
        )
        return VerificationResult(
            expectation=e,
            passed=rec.passed,
            observed={
                total.name: target_now.value,
                source.name: source_now.value,
                "gap_change": rec.gap_change,
                "tolerance": rec.tolerance,
            },
            detail=f"{total.name} {target_now.value:,.0f} against {source.name} {source_now.value:,.0f}: gap "
            f"{rec.gap_change:+,.0f} from the usual (tolerance {rec.tolerance:,.0f})",
        )
    if e.kind == "node_test_passed":
        if run_results is None:
            return VerificationResult(expectation=e, passed=None, detail="no Coalesce run results to read")
        results = [q for n in run_results.data for q in n.query_results if q.name == e.subject]
        if not results:
            return VerificationResult(
                expectation=e, passed=False, detail=f"node test {e.subject} did not run in the rerun"
            )
        passed = all(q.success for q in results)
        return VerificationResult(
            expectation=e,
            passed=passed,
            observed={"runs": len(results)},
            detail=f"node test {e.subject} {'passed' if passed else 'failed'} in the rerun",
        )
    if e.kind == "rows_restored":
        assert e.target is not None
        cursor.execute(f"SELECT COUNT(*) FROM {e.table}")
        rows = int(cursor.fetchone()[0])
        passed = abs(rows - e.target) <= (e.tolerance or 0)
        return VerificationResult(
            expectation=e,
            passed=passed,
            observed={"value": rows, "expected": e.target},
            detail=f"{e.subject} has {rows:,} rows; the night's rows plus those the join dropped are {e.target:,.0f}",
        )
    if e.kind == "no_duplicates":
        assert e.columns
        cols = ", ".join(quote_identifier(c) for c in e.columns)
        cursor.execute(
            f"SELECT COALESCE(SUM(N - 1), 0) FROM (SELECT COUNT(*) AS N FROM {e.table} GROUP BY {cols} HAVING COUNT(*) > 1)"
        )
        copies = int(cursor.fetchone()[0] or 0)
        return VerificationResult(
            expectation=e,
            passed=copies == 0,
            observed={"value": copies},
            detail=f"{e.subject} holds {copies:,} duplicate rows",
        )
    if e.kind == "input_fresh":
        assert len(e.columns) == 2
        cursor.execute(
            f"SELECT (SELECT MAX({quote_identifier(e.columns[0])}) FROM {e.table}),"
            f" (SELECT MAX({quote_identifier(e.columns[1])}) FROM {e.source_table})"
        )
        held, latest = cursor.fetchone()
        lag = (latest - held).total_seconds() / 60 if held is not None and latest is not None else None
        passed = lag is not None and lag <= (e.max_lag_minutes or 0)
        return VerificationResult(
            expectation=e,
            passed=passed,
            observed={"value": str(held), "source_latest": str(latest)},
            detail=f"{e.subject} holds loads up to {held}; its source's latest is {latest}",
        )
    total = metrics.get(e.subject)
    now = compute_total(cursor, total, resolve_table).value
    assert e.target is not None and e.tolerance is not None
    passed = abs(now - e.target) <= e.tolerance
    return VerificationResult(
        expectation=e,
        passed=passed,
        observed={"value": now, "baseline": e.target},
        detail=f"{total.name} is {now:,.0f}, {'back to' if passed else 'not back to'} {e.target:,.0f} (±{e.tolerance:,.0f})",
    )
