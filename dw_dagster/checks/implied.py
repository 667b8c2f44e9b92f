"""Reconciliations the pipeline implies (``docs/watch.md``, "Reconciliations nobody declared").

A recorded total whose measure is built, through column lineage, from nothing but the measures of recorded
totals upstream (one source, or the inputs of a UNION each carrying part) keeps a ratio to their sum: on a
lossless pipeline the fact's megabytes are its feeds' megabytes, night after night, to the unit. An inner join
that drops 7% of the rows is a step in that ratio, glaring against its own near-zero spread, where the total's
level (heavy-tailed, a few percent of daily noise) hides it. Nobody declared the pair (``reconcile_with``): the
structure names it, and the ratio's own record decides whether it is one to judge (steady) or not (too short a
history, or a ratio that wanders: other grains, other filters, a price joined in). Both sides move together,
so the calendar needs no modelling. Recorded values only: it costs the warehouse nothing. Judged on the
values and, where the totals count their ``ROWS``, on the rows.

A measure converted by a factor joined in from a table no total sums (an amount at the day's exchange rate, a
quantity at a price) keeps no ratio of values to its sources: the factor moves it. Its rows still flow from
the sources, so such a total is reconciled on its rows alone (:func:`implied_row_reconciliations`): an inner
join that drops a new customer's lines is the same step there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from statistics import median
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from dw_dagster.checks.history import Rebase, Recorded, group_rows_series, left_out, total_series
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.reconcile import change_pct, previous_recorded
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue
from dw_dagster.context.joins import equated
from dw_dagster.context.lineage import Column, LineageGraph

REFERENCES = 7
"""Tonight's usual ratio: the median of the last clean nights' (as a declared reconciliation's usual gap)."""
MIN_NIGHTS = 14
"""Nights with both sides on record before the ratio is judged: two of each weekday."""
WINDOW = 56
"""The nights the ratio's spread is read from."""
WIDE = 0.01
"""A ratio whose ordinary nights stray more than this (the 90th percentile of its one-step relative errors)
is not a reconciliation: its sides are on different grains or filters, and the totals' own checks judge them."""
FLOOR = 0.01
"""The smallest step judged, whatever the spread: an exact ratio's rounding is not a loss."""
SPREADS = 4
"""A step beyond this many of the ratio's usual errors (their 90th percentile: about six standard ones)."""


def _measure(graph: LineageGraph, total: RecordedTotal, columns: Sequence[str]) -> set[Column]:
    """The columns of the total's table its VALUE is computed from, as the column lineage names them."""
    if total.asset not in graph:
        return set()
    by_upper = {c.upper(): c for c in graph.info(total.asset).columns}
    found = {(total.asset, by_upper[c.upper()]) for c in columns if c.upper() in by_upper}
    return found if len(found) == len({c.upper() for c in columns}) else set()


def built_from(
    graph: LineageGraph,
    total: RecordedTotal,
    totals: Sequence[RecordedTotal],
    measures: Mapping[str, Sequence[str]],
    *,
    factored: bool = False,
) -> tuple[str, ...]:
    """The recorded totals upstream whose measures the total's measure is built from, and from nothing else
    (``measures``: each total's measure columns): each one's measure columns are ancestors of the total's
    (column lineage, not merely a table on the path: a total of another column of the same table is not
    one), on another table, the nearest ones (a source whose measure feeds another candidate's gives way to
    it), and every column the total's measure is first derived from is one of theirs or feeds one (a price
    joined from a table no total sums: none, unless ``factored``, which allows such columns where each is a
    factor joined in: it meets the rest in a node whose join equates its input with theirs, never in a
    UNION). The one answer to the question, for the implied reconciliation and for the diagnosis's share of
    the sources' rows a total kept."""
    own = _measure(graph, total, measures.get(total.name, ()))
    above = graph.column_ancestors(*own)
    if not above:
        return ()
    candidates: dict[str, set[Column]] = {}
    for t in totals:
        if t.name == total.name or t.asset == total.asset:
            continue
        cols = _measure(graph, t, measures.get(t.name, ()))
        if cols and cols <= above:
            candidates[t.name] = cols
    fed = {n: graph.column_ancestors(*cols) for n, cols in candidates.items()}
    nearest = {
        n: cols for n, cols in candidates.items() if not any(cols & fed[m] for m in candidates if m != n)
    }
    roots = {c for c in above if graph.columns.in_degree(c) == 0}
    covered = set().union(*(cols | fed[n] for n, cols in nearest.items()))
    if not nearest:
        return ()
    if not roots <= covered and not (
        factored and all(_joined_factor(graph, c, roots - covered) for c in own)
    ):
        return ()
    return tuple(sorted(nearest))


def _joined_factor(graph: LineageGraph, column: Column, factors: set[Column]) -> bool:
    """Whether ``factors`` (root columns) reach ``column`` only as a factor looked up: where they first meet
    the other columns it is built from, their input is joined to the others' on a key (an exchange rate on
    the currency and day), not a second stream of rows beside them (a UNION of adjustments)."""
    sources = graph.column_sources(column)
    carrying = [s for s in sources if s in factors or graph.column_ancestors(s) & factors]
    rest = [s for s in sources if s not in carrying]
    if not carrying:
        return True
    if not rest:
        return len(sources) == 1 and _joined_factor(graph, sources[0], factors)
    linked = {frozenset((left[0], right[0])) for left, right in equated(graph, column[0])}
    return all(f[0] != o[0] and frozenset((f[0], o[0])) in linked for f in carrying for o in rest)


def implied_sources(
    graph: LineageGraph,
    total: RecordedTotal,
    totals: Sequence[RecordedTotal],
    measures: Mapping[str, Sequence[str]],
) -> tuple[str, ...]:
    """The totals the total's measure is ``built_from``, to reconcile with; none when the total declares a
    reconciliation with one of them: declared wins."""
    sources = built_from(graph, total, totals, measures)
    if total.reconcile_with is not None and total.reconcile_with.total in sources:
        return ()
    return sources


def implied_reconciliations(
    graph: LineageGraph, totals: Sequence[RecordedTotal], measures: Mapping[str, Sequence[str]]
) -> dict[str, tuple[str, ...]]:
    """Each total the pipeline implies a reconciliation for -> its source totals."""
    out = {}
    for t in totals:
        if sources := implied_sources(graph, t, totals, measures):
            out[t.name] = sources
    return out


def implied_row_reconciliations(
    graph: LineageGraph,
    totals: Sequence[RecordedTotal],
    measures: Mapping[str, Sequence[str]],
    valued: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, tuple[str, ...]]:
    """Each total whose measure is its sources' converted by a factor joined in (no value reconciliation is
    implied: the factor moves the ratio) -> the source totals its rows are reconciled with. ``valued``: the
    ``implied_reconciliations`` already found, not walked again."""
    if valued is None:
        valued = implied_reconciliations(graph, totals, measures)
    out = {}
    for t in totals:
        if t.name in valued:
            continue
        sources = built_from(graph, t, totals, measures, factored=True)
        if sources and not (t.reconcile_with is not None and t.reconcile_with.total in sources):
            out[t.name] = sources
    return out


class ImpliedGap(BaseModel):
    """Tonight's ratio of a total to the sum of its implied sources, on one basis, against its own record."""

    basis: Literal["value", "rows"]
    sources: list[str]
    target: float
    source_sum: float
    usual_ratio: float | None
    """The median ratio of the last clean nights (None: none on record)."""
    spread: float | None
    """The 90th percentile of the ratio's one-step relative errors over its record."""
    threshold: float | None
    nights: int
    judged: bool
    passed: bool
    why: str = ""
    """Why the ratio was not judged tonight."""

    @property
    def ratio(self) -> float | None:
        return self.target / self.source_sum if self.source_sum > 0 else None

    @property
    def shortfall(self) -> float:
        """The units the target lacks against its usual ratio to the sources (negative: a surplus)."""
        return 0.0 if self.usual_ratio is None else self.usual_ratio * self.source_sum - self.target

    def describe(self, target: str) -> str:
        theirs = " + ".join(self.sources)
        what = f"{target}'s rows" if self.basis == "rows" else target
        if not self.judged:
            return f"{what} against {theirs}: not judged, {self.why}"
        pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
        return (
            f"{what} {'are' if self.basis == 'rows' else 'is'} {pct(self.ratio or 0.0)} of {theirs} tonight ({self.target:,.0f} of "
            f"{self.source_sum:,.0f}), against {pct(self.usual_ratio or 0.0)} on the last clean nights "
            f"(the ratio's own spread {pct(self.spread or 0.0)} over {self.nights} nights, threshold "
            f"{pct(self.threshold or 0.0)})"
        )


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def judge_ratio(
    day: date,
    basis: Literal["value", "rows"],
    target_now: float,
    sources_now: Mapping[str, float],
    target_past: Mapping[date, Recorded],
    sources_past: Mapping[str, Mapping[date, Recorded]],
    excluded: set[date],
    since: date | None = None,
) -> ImpliedGap:
    """Tonight's ratio of the target to the sum of its sources against the ratio's own clean nights (none
    flagged or excluded, every side on record, from ``since``): its usual value is the median of the last
    ``REFERENCES``, its spread the 90th percentile of each night's relative error against the median of the
    nights before it. Not judged while the record is shorter than ``MIN_NIGHTS`` or wider than ``WIDE``."""
    ratios: list[float] = []
    for d in sorted(target_past):
        if d >= day or d in excluded or (since is not None and d < since):
            continue
        t = target_past[d]
        sides = [sources_past[s].get(d) for s in sources_now]
        if t.flagged or t.value is None or any(r is None or r.flagged or r.value is None for r in sides):
            continue
        total = sum(r.value for r in sides)  # type: ignore[union-attr,misc]
        if total > 0:
            ratios.append(t.value / total)
    ratios = ratios[-WINDOW:]
    source_sum = sum(sources_now.values())
    usual = median(ratios[-REFERENCES:]) if ratios else None
    gap = ImpliedGap(
        basis=basis,
        sources=list(sources_now),
        target=target_now,
        source_sum=source_sum,
        usual_ratio=usual,
        spread=None,
        threshold=None,
        nights=len(ratios),
        judged=False,
        passed=True,
    )
    if len(ratios) < MIN_NIGHTS:
        return gap.model_copy(
            update={"why": f"{len(ratios)} clean nights with both on record, {MIN_NIGHTS} needed"}
        )
    errors = []
    for i in range(3, len(ratios)):
        ref = median(ratios[max(0, i - REFERENCES) : i])
        if ref > 0:
            errors.append(abs(ratios[i] / ref - 1))
    spread = _quantile(errors, 0.9) if errors else math.inf
    gap = gap.model_copy(update={"spread": spread})
    if spread > WIDE or not usual or usual <= 0:
        return gap.model_copy(
            update={
                "why": f"the ratio moves {100 * spread:.1f}% on an ordinary night (its own record over "
                f"{len(ratios)} nights), more than the {100 * WIDE:.0f}% a reconciliation keeps"
            }
        )
    if source_sum <= 0:
        return gap.model_copy(update={"why": "the sources sum to nothing tonight"})
    threshold = max(FLOOR, SPREADS * spread)
    passed = abs(target_now / source_sum / usual - 1) <= threshold
    return gap.model_copy(update={"threshold": threshold, "judged": True, "passed": passed})


class Record(Protocol):
    """What the ratio is judged against: a checks run's ``Night``, or the ``NightContext`` verification reads
    for the night a fix rebuilt (the same judgement, on the same record)."""

    @property
    def levels(self) -> Mapping[str, Sequence[Rebase]]: ...

    @property
    def incident_days(self) -> set[date]: ...

    @property
    def past(self) -> Mapping[str, Mapping[date, Recorded]]: ...


def reconcile_implied(
    day: date,
    record: Record,
    total: RecordedTotal,
    sources: Sequence[str],
    values: Mapping[str, TotalValue],
    *,
    rows_only: bool = False,
) -> list[ImpliedGap]:
    """The total against its implied sources on ``day``: on the values (unless ``rows_only``: a factor joined
    in moves them), and on the rows where every side counts them. A source not measured in this run leaves
    the pair unjudged (reading it would cost a scan)."""
    missing = [s for s in sources if s not in values]
    value = values[total.name]
    counted = bool(value.rows) and all(values[s].rows for s in sources if s in values)
    why = (
        f"{', '.join(missing)} not measured in this run"
        if missing
        else "not every side counts its ROWS"
        if rows_only and not counted
        else ""
    )
    if why:
        return [
            ImpliedGap(
                basis="rows" if rows_only else "value", sources=list(sources), target=value.value,
                source_sum=0.0, usual_ratio=None, spread=None, threshold=None, nights=0, judged=False,
                passed=True, why=why,
            )
        ]  # fmt: skip
    # A level an owner accepted for the total starts its ratio's record again.
    accepted = [
        r.from_date
        for r in record.levels.get(total_series(total.name), ())
        if r.kind == "accepted" and r.from_date <= day
    ]
    since = max(accepted, default=None)
    # Left out: the nights of incidents, and those either side's total flagged.
    past = record.past
    excluded = set().union(*(left_out(past.get(n, {}), record.incident_days) for n in (total.name, *sources)))
    out = (
        []
        if rows_only
        else [
            judge_ratio(
                day,
                "value",
                value.value,
                {s: values[s].value for s in sources},
                past.get(total.name, {}),
                {s: past.get(s, {}) for s in sources},
                excluded,
                since,
            )
        ]
    )
    if counted:
        out.append(
            judge_ratio(
                day,
                "rows",
                float(sum(value.rows.values())),
                {s: float(sum(values[s].rows.values())) for s in sources},
                past.get(group_rows_series(total.name), {}),
                {s: past.get(group_rows_series(s), {}) for s in sources},
                excluded,
                since,
            )
        )
    return out


def implied_evidence(
    total: str, gaps: Sequence[ImpliedGap], values: Mapping[str, TotalValue], night: Night
) -> dict[str, Any]:
    """The finding's ``reconciliation`` evidence, in a declared one's terms (the diagnosis traces the joins
    between the sources and the total the same way): the gap's change in the total's units (reconciled on
    its rows alone: the rows short at tonight's value a row)."""
    by_value = next((g for g in gaps if g.basis == "value"), gaps[0])
    per_row = values[total].value / by_value.target if by_value.basis == "rows" and by_value.target else 1.0
    sources = sorted(by_value.sources, key=lambda s: -values[s].value)
    before = [previous_recorded(night.past.get(s, {}), night.day) for s in sources]
    prev_sum = sum(r.value for r in before if r is not None and r.value is not None) if all(before) else None
    prev_t = previous_recorded(night.past.get(total, {}), night.day)
    return {
        "inferred": True,
        "source": sources[0],
        "sources": sources,
        "passed": False,
        "gap_change": by_value.shortfall * per_row,
        "tolerance": (by_value.threshold or FLOOR)
        * (by_value.usual_ratio or 1.0)
        * by_value.source_sum
        * per_row,
        "groups": [],
        "source_change_pct": change_pct(by_value.source_sum, prev_sum),
        "target_change_pct": None if prev_t is None else change_pct(by_value.target, prev_t.value),
        "bases": [g.model_dump(mode="json") for g in gaps],
    }


def implied_problem(total: str, gaps: Sequence[ImpliedGap]) -> str | None:
    """The finding's sentence when a judged ratio stepped outside its own spread, else None."""
    failed = [g for g in gaps if g.judged and not g.passed]
    if not failed:
        return None
    by = next((g for g in gaps if g.basis == "value"), None)
    if by is None:
        rows = next(g.shortfall for g in gaps if g.basis == "rows")
        return (
            "; ".join(g.describe(total) for g in failed)
            + f": {abs(rows):,.0f} rows {'short' if rows >= 0 else 'over'} (a reconciliation the pipeline "
            f"implies: {total}'s rows come from theirs, its measure converted by a factor joined in)"
        )
    return (
        "; ".join(g.describe(total) for g in failed)
        + f": {abs(by.shortfall):,.0f} units {'short' if by.shortfall >= 0 else 'over'} (a reconciliation the "
        f"pipeline implies: {total}'s measure is built from theirs alone)"
    )


def implied_note(total: str, gaps: Sequence[ImpliedGap]) -> str:
    """What the check shows of the implied reconciliation, judged or not (why not, when not)."""
    return "; ".join(g.describe(total) for g in gaps)
