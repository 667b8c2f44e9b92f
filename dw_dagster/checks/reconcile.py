"""Reconciliation of a total with its source total: the gap between them must not change, in total or in
any group (``docs/watch.md``). The usual gap is read from the last clean nights as the model that holds
them: a share of the source (a filter keeping 80% of the rows leaves a gap that grows with the volume) or a
fixed number of units (an allowance), so a steady share holds on a high-volume night and a real drop fails."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from statistics import median

from pydantic import BaseModel

from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import Reconciliation
from dw_dagster.checks.total_value import TotalValue

GAP_BASELINE_DAYS = 7


class GroupGap(BaseModel):
    group: str
    source: float
    target: float
    gap_change: float
    missing_in_target: bool


class Reconciled(BaseModel):
    passed: bool
    gap: float
    usual_gap: float
    """The gap tonight's source volume makes usual (``expected_gap``)."""
    gap_change: float
    tolerance: float
    target_change_pct: float | None
    source_change_pct: float | None
    groups: list[GroupGap]
    """Groups whose gap changed, largest change first."""


def change_pct(now: float, before: float | None) -> float | None:
    """The change from ``before`` in percent (None without a ``before``)."""
    return None if not before else (now - before) / before * 100


def previous_recorded(history: Mapping[date, Recorded], day: date) -> Recorded | None:
    """The latest night before ``day`` with a value on record."""
    earlier = [d for d in history if d < day and history[d].value is not None]
    return history[max(earlier)] if earlier else None


def expected_gap(nights: Sequence[tuple[float, float]], source_now: float) -> float:
    """Tonight's usual gap from the clean nights' (source, target) values: the median share of the source the
    gap is, times tonight's source, or the median gap, whichever model is nearer the nights themselves (the
    sum of their distances from it). A gap that is a share moves with the volume, and a fixed one does not:
    judging either by the other alarms on a night of another volume. A tie (a gap of 0) is the share."""
    if not nights:
        return 0.0
    gaps = [s - t for s, t in nights]
    fixed = median(gaps)
    shares = [(s - t) / s for s, t in nights if s]
    if not shares:
        return fixed
    share = median(shares)
    off_share = sum(abs(g - share * s) for g, (s, _) in zip(gaps, nights, strict=True))
    off_fixed = sum(abs(g - fixed) for g in gaps)
    return share * source_now if off_share <= off_fixed else fixed


def reconcile(
    day: date,
    target: TotalValue,
    source: TotalValue,
    target_history: Mapping[date, Recorded],
    source_history: Mapping[date, Recorded],
    rule: Reconciliation,
) -> Reconciled:
    """Compares today's gap (source - target) with the usual gap of the last clean nights (``expected_gap``)."""
    clean = sorted(
        d
        for d in target_history
        if d < day
        and d in source_history
        and not target_history[d].flagged
        and not source_history[d].flagged
        and target_history[d].value is not None
        and source_history[d].value is not None
    )[-GAP_BASELINE_DAYS:]
    usual_gap = expected_gap(
        [(source_history[d].value, target_history[d].value) for d in clean],  # type: ignore[misc]
        source.value,
    )
    gap = source.value - target.value
    tolerance = rule.tolerance(source.value)

    groups = []
    # Group by group only when both totals are grouped: a source summed as one value (a raw feed's whole
    # day) has no group to set against the target's, and reading its absent groups as 0 fails every night.
    grouped = set(source.groups) | set(target.groups) if source.groups and target.groups else set()
    for g in sorted(grouped):
        s, t = source.groups.get(g, 0.0), target.groups.get(g, 0.0)
        if s is None or t is None:
            continue  # a NULL value is a finding of its own (groups.null_groups_problem), not a gap of 0
        usual = expected_gap(
            [(source_history[d].groups.get(g) or 0.0, target_history[d].groups.get(g) or 0.0) for d in clean],
            s,
        )
        change = (s - t) - usual
        if abs(change) > 0 or (g in source.groups and g not in target.groups):
            groups.append(
                GroupGap(
                    group=g, source=s, target=t, gap_change=change, missing_in_target=g not in target.groups
                )
            )
    groups.sort(key=lambda x: -abs(x.gap_change))
    prev_t, prev_s = previous_recorded(target_history, day), previous_recorded(source_history, day)
    return Reconciled(
        # Group by group too: a key pointed at the wrong group moves the gap between groups, not in total.
        passed=abs(gap - usual_gap) <= tolerance and all(abs(g.gap_change) <= tolerance for g in groups),
        gap=gap,
        usual_gap=usual_gap,
        gap_change=gap - usual_gap,
        tolerance=tolerance,
        target_change_pct=change_pct(target.value, prev_t.value if prev_t else None),
        source_change_pct=change_pct(source.value, prev_s.value if prev_s else None),
        groups=groups,
    )
