"""Which groups of a total hold tonight's shortfall, ranked by how much of it each explains, and the groups
whose value is NULL: the keys a diagnosis names come from the evidence that explains the gap, not from the
first finding's wording.

- :func:`group_shortfalls`: each group tonight against the last good night, at the day's common level (the
  median ratio of the groups, so a Saturday compared with a Wednesday is not a loss everywhere): the groups
  that lost what the others did not, largest first.
- :func:`null_value_diagnosis`: a total whose group's VALUE is NULL tonight (a column the source stopped
  filling, a lookup that found nothing) while that group's last good value explains most of the total's
  fall: value loss, on the source subset that holds tonight's new NULLs (:func:`null_subset`) where one
  does, else on that group's key, with the rows and columns the check named.
- :func:`null_subset`: the NULL traced back through column lineage to the Source columns it arrives in (the
  measure's, and a group key recorded NULL), and the low-cardinality value of the source whose rows hold
  (nearly) all tonight's new NULLs while the other values' rows hold none: the subset the source stopped
  filling, however the total groups (one site under the region the total groups by; the rows of one channel
  whose lookup key arrives NULL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from statistics import median

from dw_dagster.checks.history import Recorded, group_rows_series
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.incidents.drilldown import MIN_ROWS, by_value, profile_source, source_texts
from dw_dagster.incidents.evidence import (
    HISTORY_DAYS,
    DiagnosisContext,
    feeders,
    good_nights,
    last_good_night,
    measure_columns,
)
from dw_dagster.incidents.structure import day_columns, nearest, source_columns, sources_upstream, table
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.records.keys import plain, split_label, split_labels
from dw_dagster.sql import quote_identifier

EXPLAINS = 0.5
"""Keys are named until they explain this share of the shortfall (and at most ``MAX_KEYS``)."""
MAX_KEYS = 5
NEARLY_ALL = 0.9
"""A source subset holds tonight's new NULLs when it holds this share of them, and the rest of the source's
rows got new NULLs at under ``1 - NEARLY_ALL`` (a tenth) of its rate: the subset, not the whole column."""


def _key(group: str, units: float, change: str) -> KeyGap:
    column, value = split_label(group)
    return KeyGap(column=column, value=value, rows=0, units=units, change=change)


def group_shortfalls(tonight: Recorded, before: Recorded) -> list[tuple[str, float]]:
    """(group, units short) of the groups that lost beyond the day's common level, largest first, until
    they explain half the shortfall (a group gone counts all it had)."""
    common = [
        tonight.groups[g] / v
        for g, v in before.groups.items()
        if v and v > 0 and tonight.groups.get(g) is not None and g in tonight.groups
    ]
    level = median(common) if common else 1.0
    level = min(level, 1.0) if (tonight.value or 0) < (before.value or 0) else level
    short = {
        g: level * v - (tonight.groups.get(g) or 0.0)
        for g, v in before.groups.items()
        if v is not None and v > 0
    }
    lost = sorted(((g, u) for g, u in short.items() if u > 0), key=lambda gu: -gu[1])
    total = sum(u for _, u in lost)
    out: list[tuple[str, float]] = []
    covered = 0.0
    for g, u in lost:
        if out and (covered >= EXPLAINS * total or len(out) >= MAX_KEYS):
            break
        out.append((g, u))
        covered += u
    return out


def shortfall_keys(tonight: Recorded, before: Recorded) -> list[KeyGap]:
    """The groups that hold a fall, as keys, with what each lost."""
    return [
        _key(g, -u, f"{g} lost {u:,.0f} units against the last good night ({before.business_date})")
        for g, u in group_shortfalls(tonight, before)
    ]


@dataclass
class NullSubset:
    """The rows of one value of a source's column that hold tonight's new NULLs."""

    asset: str
    """The source table."""
    nulled: list[str]
    """Its columns that arrive NULL (any of them on a row makes the total's value NULL)."""
    column: str
    value: str | None
    rows: int
    """Tonight's rows of the subset."""
    nulls: int
    """Of them, the rows with a NULL the good nights' rows of the subset did not have."""


def null_subset(
    ctx: DiagnosisContext, total: RecordedTotal, labels: Sequence[str], day: date, before: list[date]
) -> NullSubset | None:
    """The finest source subset holding (nearly) all of tonight's new NULLs behind ``total``'s NULL-valued
    groups ``labels``: their value's and NULL keys' Source columns, by column lineage, and per low-cardinality
    column of each source (``drilldown.profile_source``: a source the pipeline selects by business day), the
    value whose rows got the new NULLs while the other values' rows got none. The finest is the one with the
    fewest rows (a site, not the region that holds it); among as many rows, a key the metrics group by,
    then the column with more values."""
    if not before:
        return None
    wanted = list(measure_columns(total))
    wanted += [c for label in labels for c, v in map(split_label, split_labels(label)) if v is None]
    by_source: dict[str, list[str]] = {}
    for column in wanted:
        for key, col in source_columns(ctx.graph, (total.asset, column)):
            by_source.setdefault(key, []).append(col)
    group_keys = {g.upper() for t in ctx.metrics.totals for g in t.group_keys}
    best: tuple[tuple, NullSubset] | None = None
    for src in nearest(ctx.graph, total.asset, by_source):
        nulled = list(dict.fromkeys(by_source[src]))
        latest = _latest_day(ctx, src, day)
        if latest is None:
            continue
        # A run after the business day's cutoff builds the day before (the pipeline selects the latest day
        # the source holds): the source's nights are the business dates moved back as far.
        shift = day - latest
        nights = [d - shift for d in before]
        profiled = profile_source(ctx, src, nulled, latest, nights)
        if profiled is None or not profiled[1]:
            continue
        found = _null_cells(ctx, src, nulled, *profiled, latest, nights, group_keys)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return best[1] if best else None


def _latest_day(ctx: DiagnosisContext, src: str, day: date) -> date | None:
    """The latest day, up to ``day``, that the source holds rows of by a column the pipeline selects its days
    by; None when it is not selected by day or holds none."""
    times = day_columns(ctx.graph, src, source_texts(ctx, src))
    if not times or table(ctx.graph, src) is None:
        return None
    latest = ", ".join(
        f"MAX(CASE WHEN CAST({quote_identifier(t)} AS DATE) <= ? THEN CAST({quote_identifier(t)} AS DATE) END)"
        for t in times
    )
    rows = ctx.rows(
        f"the latest day {src} holds up to the business date",
        f"SELECT {latest} FROM {table(ctx.graph, src)}",
        tuple(day for _ in times),
    )
    found = [v.date() if isinstance(v, datetime) else v for v in (rows[0] if rows else ()) if v is not None]
    return max(found) if found else None


def _null_cells(
    ctx: DiagnosisContext,
    src: str,
    columns: list[str],
    time_col: str,
    dims: list[str],
    day: date,
    before: list[date],
    group_keys: set[str],
) -> tuple[tuple, NullSubset] | None:
    nulls = [f"SUM(CASE WHEN {quote_identifier(c)} IS NULL THEN 1 ELSE 0 END)" for c in columns]
    anywhere = " OR ".join(f"{quote_identifier(c)} IS NULL" for c in columns)
    rows = by_value(
        ctx,
        src,
        time_col,
        dims,
        ", ".join([f"SUM(CASE WHEN {anywhere} THEN 1 ELSE 0 END)", *nulls]),
        day,
        before,
        f"{src}'s rows with no {' or '.join(columns)}",
    )
    # cells[dim][value][tonight] = (rows, rows with a NULL in any column, rows with a NULL per column)
    cells: dict[int, dict[str | None, dict[int, tuple[int, int, list[int]]]]] = {}
    for r in rows or []:
        value = plain(r[1]) if r[1] is not None else None
        per = [int(x or 0) for x in r[5 : 5 + len(columns)]]
        cells.setdefault(int(r[0]), {}).setdefault(value, {})[int(r[2])] = (int(r[3]), int(r[4] or 0), per)

    def beyond(n1: int, z1: float, n0: int, z0: float) -> float:
        # The NULLs beyond the value's own rate on the good nights (a value new tonight: all of them).
        return max(0.0, z1 - n1 * z0 / n0) if n0 else float(z1)

    best = None
    for i, values in cells.items():
        new: dict[str | None, tuple[int, float]] = {}
        for value, days in values.items():
            (n1, z1, _), (n0, z0, _) = days.get(1, (0, 0, [])), days.get(0, (0, 0, []))
            new[value] = (n1, beyond(n1, z1, n0, z0))
        everything = sum(z for _, z in new.values())
        tonight = sum(n for n, _ in new.values())
        if everything < MIN_ROWS:
            continue
        for value, (n1, z) in new.items():
            rest_n, rest_z = tonight - n1, everything - z
            if z < NEARLY_ALL * everything or rest_n < MIN_ROWS:
                continue
            if rest_z / rest_n > (1 - NEARLY_ALL) * z / n1:
                continue
            rank = (n1, dims[i].upper() not in group_keys, -len(values), dims[i])
            if best is None or rank < best[0]:
                (_, _, c1), (n0, _, c0) = values[value][1], values[value].get(0, (0, 0, [0] * len(columns)))
                nulled = [c for c, a, b in zip(columns, c1, c0, strict=True) if beyond(n1, a, n0, b) > 0]
                best = (rank, NullSubset(src, nulled or columns, dims[i], value, n1, round(z)))
    return best


def null_value_diagnosis(
    incident: Incident, findings: Sequence[Finding], ctx: DiagnosisContext
) -> Diagnosis | None:
    """Value loss on the groups whose VALUE is NULL tonight, when their last good value explains most of the
    total's fall (ranked by how much each explains), named by the source subset that holds the new NULLs
    where one does (:func:`null_subset`); None when no finding names NULL groups, or they explain little of
    it."""
    found = []
    for finding in findings:
        named = finding.evidence.get("null_groups") or {}
        for name, groups in named.items():
            total = next((t for t in ctx.metrics.totals if t.name == name), None)
            if total is None or not groups:
                continue
            day = finding.business_date
            history = ctx.history.metric_history(name, day + timedelta(days=1), HISTORY_DAYS)
            tonight, before = history.get(day), last_good_night(ctx, history, day)
            if tonight is None or before is None or not before.value:
                continue
            fall = (before.value or 0.0) - (tonight.value or 0.0)
            worth = _null_worth(ctx, name, groups, day, before, fall)
            units = sorted(worth.items(), key=lambda gu: -gu[1])
            lost = sum(u for _, u in units)
            if lost <= 0 or (fall > 0 and lost < EXPLAINS * fall):
                continue
            found.append(
                (
                    fall > 0,
                    lost / before.value,
                    name,
                    total,
                    groups,
                    day,
                    history,
                    tonight,
                    before,
                    fall,
                    units,
                    lost,
                )
            )
    if not found:
        return None
    # The total the NULLs explain best: one that fell, the largest share of its value (a quarter to date
    # grows whatever a night lost).
    *_, name, total, groups, day, history, tonight, before, fall, units, lost = max(
        found, key=lambda f: f[:2]
    )
    what = " or ".join(measure_columns(total)) or "VALUE"
    labels = ", ".join(g for g, _ in units[:MAX_KEYS])
    cause = (
        f"{name}: {labels} has no value tonight (NULL, not zero): {lost:,.0f} units, "
        f"{100 * lost / (before.value or 1):.0f}% of {name} on the last good night ({before.business_date})."
    )
    subset = null_subset(ctx, total, groups, day, good_nights(ctx, history, day))
    if subset is not None:
        key = KeyGap(
            column=subset.column,
            value=subset.value,
            rows=subset.nulls,
            units=-lost,
            change=f"{' or '.join(subset.nulled)} NULL on {subset.nulls:,} of its {subset.rows:,} rows "
            f"tonight, on no other {subset.column}'s",
        )
        keys, source = [key], subset.asset
        cause += (
            f" The rows arrived; the values did not: {' or '.join(subset.nulled)} arrives NULL in "
            f"{subset.asset} for {key.label} ({subset.nulls:,} of its {subset.rows:,} rows tonight) and "
            f"for no other {subset.column}."
        )
        change = f"{' or '.join(subset.nulled)} arrives empty in {subset.asset} for {key.label}"
    else:
        keys = [
            _key(g, -u, f"its {what} is NULL tonight: {u:,.0f} units on the last good night")
            for g, u in units[:MAX_KEYS]
        ]
        sources = sources_upstream(ctx.graph, total.asset) if total.asset in ctx.graph else []
        source = sources[0] if sources else total.asset
        cause += " The rows arrived; the values did not."
        change = f"{what} arrives empty for {', '.join(k.label for k in keys)}"
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.VALUE_LOSS,
        cause=cause,
        evidence={
            "total": name,
            "value": tonight.value or 0.0,
            "last_good_value": before.value,
            "null_units": lost,
            "fall_units": fall,
            **({"null_source": subset.asset, "null_rows": subset.nulls} if subset else {}),
        },
        keys=keys,
        upstream_change=change,
        cause_asset=source if subset is not None else total.asset,
        path=ctx.graph.path(source, total.asset)
        if source in ctx.graph and source != total.asset
        else [total.asset],
        owners=ctx.graph.owners_on(feeders(ctx, source)),
    )


def _null_worth(
    ctx: DiagnosisContext, name: str, groups: Sequence[str], day: date, before: Recorded, fall: float
) -> dict[str, float]:
    """What each NULL-valued group's value was worth: its last good value; for a group whose key is NULL as
    well and that the last good night did not have (a lookup's key arriving NULL moves rows out of every
    group into it), tonight's rows at the last good night's value per row where the total records its rows,
    else what the fall leaves unexplained."""
    worth = {g: before.groups.get(g) or 0.0 for g in groups}
    new = [
        g
        for g in groups
        if g not in before.groups and any(split_label(p)[1] is None for p in split_labels(g))
    ]
    if not new:
        return worth
    rows = ctx.history.metric_history(group_rows_series(name), day + timedelta(days=1), HISTORY_DAYS)
    now, then = rows.get(day), rows.get(before.business_date)
    rest = max(0.0, fall - sum(worth.values())) / len(new)
    for g in new:
        counted = now.groups.get(g) if now is not None else None
        if counted and then is not None and then.value:
            worth[g] = counted * (before.value or 0.0) / then.value
        else:
            worth[g] = rest
    return worth
