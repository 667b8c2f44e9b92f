"""Unit, scale and sign changes, localised to the subset that carries them.

A total moved; which rows did it? The measure's source columns (the total's measure traced through column
lineage to its Source table) are compared, per row, between tonight's business date and the last good
night's, within every low-cardinality column of the source (a version, a channel, a type, a key): the value
whose rows' average moved by a factor while every other value held is the subset, and the factor is
measured from the data (tonight's average over the last good night's; any factor, 3.7 as well as 100), beyond
the sampling noise of that many rows (a few dozen heavy-tailed amounts move x1.5 on their own). A
factor below zero is a sign change. Two statements: a profile (which columns partition by day, which are
low-cardinality) and the drill-down itself.

The day is told by a time column the pipeline itself selects days by (a WHERE of a node reading the
source, or of a total over it). A source reloaded whole each night (a snapshot) is not selected by day and
keeps no rows of the last good night; there the subsets are the groups of the recorded total's history, and a group whose value moved by a factor while the table's
row count held is the subset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from statistics import median

from dw_dagster.checks.history import Recorded
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.coalesce.transforms import PER_KEY
from dw_dagster.context.lineage import Column
from dw_dagster.incidents.evidence import (
    HISTORY_DAYS,
    DiagnosisContext,
    counted_on,
    feeders,
    measure_column,
    measure_columns,
    node_joins,
)
from dw_dagster.incidents.structure import (
    day_columns,
    is_numeric,
    is_time,
    nearest,
    source_column,
    source_columns,
    source_pairs,
    sources_upstream,
    table,
)
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.records.keys import plain, split_label
from dw_dagster.sql import placeholders, quote_identifier

MAX_LEVELS = 50
"""A column with more distinct values than this is not a subset to drill into."""
MOVED = math.log(1.5)
"""A subset's average moved when it changed by more than x1.5 (or /1.5), or flipped sign."""
HELD = math.log(1.15)
"""The rest of the rows held when their average changed by less than 15%."""
MIN_ROWS = 5
LOST = 0.8
"""A subset lost rows when under this share of its usual rows arrived, at the level of the day the other
subsets show (a fifth of one seller's lines missing while the other sellers' are complete)."""
EXPLAINS_ALL = 0.85
"""A subset explains (nearly) all of a move when it carries this share of the units (or rows) of the subset
that carries most: a finer subset whose coarser one's other rows held."""
MAX_KEYS = 5
NOISE_Z = 3.0
"""A subset's average moved only beyond this many standard errors of its own rows' spread: a few dozen
heavy-tailed payments (a tax, a few hundred dollars to tens of thousands) average x1.5 apart from one night to
the next by chance, a unit change of x0.25 on as many is four or five standard errors."""


@dataclass
class Moved:
    """A subset of rows whose values moved by a factor."""

    column: str
    value: str | None
    measure: str
    """The source column whose values moved."""
    factor: float
    rows: int
    """Tonight's rows in the subset."""
    asset: str
    """The source table's asset key (or the total's, from the recorded groups)."""
    before: float
    after: float
    """The subset's total of ``measure`` on the last good night and tonight."""
    from_history: bool = False

    @property
    def sign(self) -> bool:
        return self.factor < 0

    @property
    def shown(self) -> str:
        return f"x{self.factor:.3g}"


def _ratio(s1: float, n1: int, s0: float, n0: int) -> float | None:
    if n0 < MIN_ROWS or n1 < MIN_ROWS or not s0:
        return None
    return (s1 / n1) / (s0 / n0)


def _log(r: float) -> float:
    return abs(math.log(abs(r))) if r else math.inf


def relative_error(total: float, squares: float, n: int) -> float:
    """The standard error of a subset's per-row average relative to it (its rows' coefficient of variation over
    the square root of their number), from the rows' sum and sum of squares; inf for an average of zero."""
    if n < 2 or not total:
        return math.inf
    mean = total / n
    variance = max(squares / n - mean * mean, 0.0) * n / (n - 1)
    return math.sqrt(variance / n) / abs(mean)


def beyond_noise(r: float, before: tuple[float, float, int], tonight: tuple[float, float, int]) -> bool:
    """Whether the ratio ``r`` of tonight's per-row average to the good nights' is beyond ``NOISE_Z`` standard
    errors of the two averages ((sum, sum of squares, rows) each): the log ratio's error is about the root sum
    of their relative errors."""
    se = math.hypot(relative_error(*before), relative_error(*tonight))
    return _log(r) >= NOISE_Z * se


def source_texts(ctx: DiagnosisContext, src: str) -> list[str]:
    """The SQL that reads the source: its children's join text and the totals over it, refs resolved."""
    from dw_dagster.coalesce.sql import resolve_refs

    out = []
    for child in ctx.graph.assets.successors(src):
        join = ctx.graph.info(child).join
        if join:
            try:
                out.append("SELECT * " + resolve_refs(join, ctx.resolve_table))
            except ValueError:
                continue
    for total in ctx.metrics.totals:
        if total.asset == src:
            out.append(resolve_refs(total.sql, ctx.resolve_table))
    return out


def profile_source(
    ctx: DiagnosisContext, src: str, measures: list[str], day: date, before: list[date], empty: bool = False
):
    """(time column, low-cardinality columns) of a source table, or None when the pipeline does not select
    its rows by business day (a snapshot) or it has no rows of both days. ``empty``: a source with no rows
    of ``day`` that had rows on each of the nights ``before`` is profiled too (an input that delivered
    nothing tonight: all of its rows are the subset lost)."""
    tbl = table(ctx.graph, src)
    info = ctx.graph.info(src)
    times = day_columns(ctx.graph, src, source_texts(ctx, src))
    dims = [c for c in info.columns if c not in measures and not is_time(ctx.graph, src, c)]
    if tbl is None or not times:
        return None
    parts, params = [], []
    for t in times:
        d = f"CAST({quote_identifier(t)} AS DATE)"
        parts.append(f"SUM(CASE WHEN {d} = ? THEN 1 ELSE 0 END)")
        parts.append(f"SUM(CASE WHEN {d} IN ({placeholders(len(before))}) THEN 1 ELSE 0 END)")
        parts.append(f"COUNT(DISTINCT CASE WHEN {d} IN ({placeholders(len(before))}) THEN {d} END)")
        params += [day, *before, *before]
    parts += [f"COUNT(DISTINCT {quote_identifier(c)})" for c in dims]
    rows = ctx.rows(
        f"which columns of {src} partition by day and which are low-cardinality",
        f"SELECT COUNT(*), {', '.join(parts)} FROM {tbl}",
        tuple(params),
    )
    if not rows:
        return None
    row = rows[0]
    total = int(row[0] or 0)
    time_col = None
    for i, t in enumerate(times):
        tonight, last, nights = (int(v or 0) for v in row[1 + 3 * i : 4 + 3 * i])
        # A day's rows, not the whole table: the column partitions the rows by business day.
        delivered = tonight >= MIN_ROWS or (empty and tonight == 0 and nights == len(before))
        if delivered and last >= MIN_ROWS and tonight < 0.9 * total:
            time_col = t
            break
    counts = row[1 + 3 * len(times) :]
    low = [c for c, n in zip(dims, counts, strict=True) if 2 <= int(n or 0) <= MAX_LEVELS]
    return (time_col, low) if time_col else None


@dataclass
class Lost:
    """Values of one column of a source whose rows did not all arrive tonight while the other values' did."""

    column: str
    values: list[tuple[str | None, float]]
    """Each value with the rows it is short (at the level of the day the other values show), most first."""
    asset: str
    kept: float
    """The share of the values' usual rows that arrived, at the other values' level."""
    share: float
    """The rows short as a share of the source's usual day."""


@dataclass
class Drill:
    """What the drill-down of a total's source rows found: a subset whose per-row values moved by a factor,
    a subset whose rows fell, either, or neither."""

    moved: Moved | None = None
    lost: Lost | None = None


@dataclass
class _Candidate:
    rank: tuple
    moved: Moved
    excess: float
    """The units the subset's move explains: tonight's total against its rows at the good nights' average."""


def drill_source(
    ctx: DiagnosisContext, total: RecordedTotal, day: date, before: list[date], group_keys: list[str]
) -> Drill:
    """The subsets of the total's source rows whose values moved by a factor, or whose rows fell, between the
    good nights ``before`` (the last few, for an average that one night's noise does not move) and ``day``."""
    if not before:
        return Drill()
    by_source: dict[str, list[str]] = {}
    for column in measure_columns(total):
        for key, col in source_columns(ctx.graph, (total.asset, column)):
            if is_numeric(ctx.graph, key, col):
                by_source.setdefault(key, []).append(col)
    moved: list[_Candidate] = []
    lost: list[Lost] = []
    empty: list[Lost] = []
    delivered = False
    for src, measures in by_source.items():
        measures = list(dict.fromkeys(measures))
        profiled = profile_source(ctx, src, measures, day, before, empty=len(by_source) > 1)
        if profiled is None:
            continue
        time_col, dims = profiled
        if not dims:
            continue
        # A column the total's lineage counts (a distinct count of people per group, which the total sums) is
        # drilled in that count: a sum of the counted ids is no number of anything, and its per-row average
        # moves with whichever ids arrived (one source's ids numbered in the millions, another's in the
        # thousands), which read as a unit change of the ids.
        counted = {m: c for m in measures if (c := counted_on(ctx, total, src, m)) is not None}
        cells = _cells(ctx, src, time_col, dims, measures, day, before, counted)
        if not cells:
            continue
        if not any(1 in days for values in cells.values() for days in values.values()):
            empty.append(_delivered_nothing(cells, dims, src, len(before), group_keys))
            continue
        delivered = True
        moved += _moved(cells, dims, measures, src, len(before), group_keys)
        found = _lost(cells, dims, src, len(before), group_keys)
        if found is not None:
            lost.append(found)
    # An input of several that delivered nothing tonight while another delivered is the subset lost; the
    # only source of a total delivering nothing is the total's own fall, no subset of it.
    if delivered:
        lost += empty
    return Drill(
        moved=_sharpest(moved).moved if moved else None,
        lost=max(lost, key=lambda x: x.share, default=None),
    )


def by_value(
    ctx: DiagnosisContext,
    src: str,
    time_col: str,
    dims: list[str],
    aggregates: str,
    day: date,
    before: list[date],
    what: str,
) -> list | None:
    """(column's index in ``dims``, value, 1 for ``day``'s rows and 0 for the nights ``before``, rows,
    ``aggregates``...) of the source's rows, per value of each of ``dims``: one statement."""
    tbl = table(ctx.graph, src)
    t = f"CAST({quote_identifier(time_col)} AS DATE)"
    parts, params = [], []
    for i, d in enumerate(dims):
        parts.append(
            f"SELECT {i} AS DIM, CAST({quote_identifier(d)} AS VARCHAR) AS V,"
            f" CASE WHEN {t} = ? THEN 1 ELSE 0 END AS TONIGHT, COUNT(*) AS N, {aggregates}"
            f" FROM {tbl} WHERE {t} IN ({placeholders(1 + len(before))}) GROUP BY 1, 2, 3"
        )
        params += [day, day, *before]
    return ctx.rows(
        f"{what} by {', '.join(dims)}, tonight against the last good nights",
        "\nUNION ALL\n".join(parts),
        tuple(params),
    )


Cells = dict[int, dict[str | None, dict[int, tuple[int, list[tuple[float, int, float]]]]]]
"""cells[dim][value][tonight] = (rows, [(sum, negatives, sum of squares) per measure])"""
Cell = tuple[float, float, int]
"""(sum, sum of squares, rows) of a subset's measure on the good nights or tonight."""


def _cells(ctx, src, time_col, dims, measures, day, before, counted: dict[str, str]) -> Cells:
    """The cells of ``measures`` by value of each of ``dims``; a measure in ``counted`` in the count the total's
    lineage makes of it (``PER_KEY``), each night's on its own."""
    sums = ", ".join(_aggregates(j, m, counted.get(m), time_col) for j, m in enumerate(measures))
    rows = by_value(ctx, src, time_col, dims, sums, day, before, f"{src}'s values")
    cells: Cells = {}
    for r in rows or []:
        per = [
            (float(r[4 + 3 * j] or 0), int(r[5 + 3 * j] or 0), float(r[6 + 3 * j] or 0))
            for j in range(len(measures))
        ]
        value = plain(r[1]) if r[1] is not None else None
        cells.setdefault(int(r[0]), {}).setdefault(value, {})[int(r[2])] = (int(r[3]), per)
    return cells


def _aggregates(j: int, measure: str, count: str | None, time_col: str) -> str:
    """Measure ``j``'s (units, negative rows, sum of squares) in a subset: its sum, or its ``count``. A count
    over the good nights is each night's count added up (a person back every night is one a night, not one
    over the week); each row adds at most one unit, so the rows' units spread as a share does (their squares
    are the units themselves) and none is negative. Named, so that no two columns are one."""
    m = quote_identifier(measure)
    if count is None:
        units, squares = f"SUM({m})", f"SUM(CAST({m} AS DOUBLE) * CAST({m} AS DOUBLE))"
        negatives = f"SUM(CASE WHEN {m} < 0 THEN 1 ELSE 0 END)"
    else:
        night = f"CAST(CAST({quote_identifier(time_col)} AS DATE) AS VARCHAR) || '|' || CAST({m} AS VARCHAR)"
        units = squares = PER_KEY[count].format(night)
        negatives = "0"
    return f"{units} AS U{j}, {negatives} AS NEG{j}, {squares} AS SQ{j}"


def _moved(cells: Cells, dims, measures, src, nights: int, group_keys) -> list[_Candidate]:
    """Every subset whose per-row average moved by a factor beyond its rows' noise while the rest held."""
    found = []
    for i, values in cells.items():
        # A subset whose rows fell lost rows: what is left of it averages apart from its usual rows when the
        # load kept a part of them that is not like the whole (the night's first files), no unit change.
        gone = (_short(values, nights) or ({}, {}, []))[2]
        for j, measure in enumerate(measures):
            for value, days in values.items():
                if 0 not in days or 1 not in days or value in gone:
                    continue
                (n0, p0), (n1, p1) = days[0], days[1]
                s0, neg0, q0 = p0[j]
                s1, neg1, q1 = p1[j]
                r = _ratio(s1, n1, s0, n0)
                if r is None:
                    continue
                flipped = neg1 > 0.5 * n1 and neg0 < 0.05 * n0
                if not flipped and (_log(r) < MOVED or not beyond_noise(r, (s0, q0, n0), (s1, q1, n1))):
                    continue
                rest = [v for v in values.values() if v is not days and 0 in v and 1 in v]
                rest0, rest1 = _pooled(rest, 0, j), _pooled(rest, 1, j)
                others = _ratio(rest1[0], rest1[2], rest0[0], rest0[2]) if rest else 1.0
                if others is None or not _rest_held(r, others, ((s0, q0, n0), (s1, q1, n1)), (rest0, rest1)):
                    continue
                moved = Moved(dims[i], value, measure, r, n1, src, s0 / max(1, nights), s1)
                # Best: the rest held most closely; then a key the metrics group by; then the smaller subset.
                rank = (round(_log(others), 2), dims[i].upper() not in group_keys, n1)
                found.append(_Candidate(rank, moved, s1 - s0 / n0 * n1))
    return found


def _pooled(cells: list, night: int, j: int) -> Cell:
    """(sum, sum of squares, rows) of measure ``j`` over ``cells`` on ``night`` (1 tonight, 0 the good nights)."""
    return (
        sum(c[night][1][j][0] for c in cells),
        sum(c[night][1][j][2] for c in cells),
        sum(c[night][0] for c in cells),
    )


def _rest_held(r: float, others: float, subset: tuple[Cell, Cell], rest: tuple[Cell, Cell]) -> bool:
    """Whether the rest of the rows held while a subset's per-row average moved by ``r``: their own average
    moved by ``others`` within ``HELD``, or within the sampling noise of their rows (``NOISE_Z`` standard
    errors, as ``beyond_noise`` judges the subset) while the subset moved by a factor against them: a few
    hundred heavy-tailed rows of the one other subset average x1.3 apart from night to night by chance, and
    a fixed 15% rejected a glaring x1024 beside them. Beyond ``HELD``, the rest must also not have
    taken the opposite of what the subset gained or lost (half of its units or more): units moving between
    subsets are a shift, not a unit change."""
    if _log(others) <= HELD:
        return True
    if beyond_noise(others, *rest) or _log(r / others) < MOVED:
        return False
    change, opposite = (now[0] - then[0] / then[2] * now[2] for then, now in (subset, rest))
    return not (change * opposite < 0 and abs(opposite) >= 0.5 * abs(change))


def _sharpest(found: list[_Candidate]) -> _Candidate:
    """The subset that explains the move most sharply. Subsets of several columns carry the same move when
    the columns are correlated (a seller that sells in one currency only): of those that explain nearly all
    of it (``EXPLAINS_ALL`` of the largest, the rest of the coarser subset held), the one whose rows moved
    by the largest factor, as the moved rows moved entirely and the coarser subset's average is diluted by
    the rows of it that held; within ``HELD`` of that factor, by ``rank``. Units of different measures are
    not compared: each measure's sharpest, then by ``rank``."""
    picks = []
    for measure in dict.fromkeys((c.moved.asset, c.moved.measure) for c in found):
        same = [c for c in found if (c.moved.asset, c.moved.measure) == measure]
        top = max(same, key=lambda c: abs(c.excess))
        explain = [
            c for c in same if c.excess * top.excess > 0 and abs(c.excess) >= EXPLAINS_ALL * abs(top.excess)
        ] or [top]
        sharp = max(_log(c.moved.factor) for c in explain)
        picks.append(min((c for c in explain if _log(c.moved.factor) >= sharp - HELD), key=lambda c: c.rank))
    return min(picks, key=lambda c: c.rank)


def _short(values: dict, nights: int) -> tuple[dict, dict, list] | None:
    """(usual rows a night, tonight's rows, the values whose rows fell) of one column's values: under
    ``LOST`` of their usual rows at the level of the day the other values show (their median), beyond the
    rows' counting noise (``NOISE_Z``); None with fewer than two values of ``MIN_ROWS`` usual rows."""
    usual = {v: d[0][0] / nights for v, d in values.items() if 0 in d}
    now = {v: values[v][1][0] if 1 in values[v] else 0 for v in usual}
    ratios = [now[v] / usual[v] for v in usual if usual[v] >= MIN_ROWS]
    if len(ratios) < 2:
        return None
    level = median(ratios)
    gone = [
        v
        for v in usual
        if usual[v] >= MIN_ROWS
        and now[v] < LOST * level * usual[v]
        and level * usual[v] - now[v] >= NOISE_Z * math.sqrt(level * usual[v])
    ]
    return usual, now, gone


def _lost(cells: Cells, dims, src, nights: int, group_keys) -> Lost | None:
    """The values of a column whose rows fell tonight (at most ``MAX_KEYS``; under ``LOST`` of their usual
    rows at the level of the day the other values show, beyond the rows' counting noise) while the other
    values held. Of the columns whose values explain nearly all of the rows short (``EXPLAINS_ALL``), the
    one whose values lost the largest share of their rows (a seller's lines, not the currency it sells in);
    within ``HELD`` of it, the fewest values, then a key the metrics group by."""
    found = []
    for i, values in cells.items():
        short = _short(values, nights)
        if short is None:
            continue
        usual, now, gone = short
        rest = [v for v in usual if v not in gone]
        held = sum(usual[v] for v in rest)
        at = sum(now[v] for v in rest) / held if held else 0.0
        if not gone or len(gone) > MAX_KEYS or not at:
            continue
        kept = sum(now[v] for v in gone) / (at * sum(usual[v] for v in gone))
        if kept > LOST:
            continue
        missing = sorted(((v, at * usual[v] - now[v]) for v in gone), key=lambda vs: -vs[1])
        found.append(
            Lost(dims[i], missing, src, kept, sum(s for _, s in missing) / (at * sum(usual.values())))
        )
    if not found:
        return None
    top = max(sum(s for _, s in x.values) for x in found)
    explain = [x for x in found if sum(s for _, s in x.values) >= EXPLAINS_ALL * top]
    sharp = max(_log(x.kept) for x in explain)
    return min(
        (x for x in explain if _log(x.kept) >= sharp - HELD),
        key=lambda x: (len(x.values), x.column.upper() not in group_keys, -x.share),
    )


def _delivered_nothing(cells: Cells, dims, src, nights: int, group_keys) -> Lost:
    """A source with no rows tonight as the subset lost: all of its values of one column (a key the metrics
    group by, else the column with the fewest values), each its usual rows short."""
    i = min(cells, key=lambda i: (dims[i].upper() not in group_keys, len(cells[i]), i))
    usual = sorted(((v, d[0][0] / nights) for v, d in cells[i].items() if 0 in d), key=lambda vs: -vs[1])
    return Lost(dims[i], usual[:MAX_KEYS], src, 0.0, 1.0)


def drill_groups(
    tonight: Recorded,
    before: Recorded,
    rows_held: bool | None,
    asset: str,
    rows: tuple[Recorded, Recorded] | None = None,
) -> Moved | None:
    """The recorded group whose value moved by a factor while the others held (and the table's row count
    held: otherwise rows went missing, which is not a unit change). With the groups' rows on record
    (``rows``: tonight's and the last good night's), the group's value per row must have moved as well: a
    group whose rows fell with its value lost rows (a partial load of its partition) however closely the
    whole table's count held."""
    if rows_held is False:
        return None
    # Only groups valued on both nights take part: a group NULL tonight lost its values (a value loss,
    # which the shortfall traces), it did not change unit.
    ratios = {
        g: tonight.groups[g] / v for g, v in before.groups.items() if v and tonight.groups.get(g) is not None
    }
    best = None
    for g, r in ratios.items():
        if _log(r) < MOVED or (rows_held is None and _log(r) < math.log(3)):
            continue
        rest = [h for h in ratios if h != g]
        b = sum(before.groups[h] for h in rest)
        others = sum(tonight.groups[h] for h in rest) / b if b else 1.0
        if _log(others) > HELD or _offset(tonight, before, ratios, g):
            continue
        per_row = _per_row(r, g, rows)
        if per_row is not None and _log(per_row) < MOVED:
            continue
        if best is None or _log(r) > _log(best[1]):
            best = (g, r)
    if best is None:
        return None
    column, value = split_label(best[0])
    return Moved(column, value, "", best[1], 0, asset, before.groups[best[0]], tonight.groups[best[0]], True)


def _per_row(r: float, group: str, rows: tuple[Recorded, Recorded] | None) -> float | None:
    """A group's value ratio ``r`` per row: over its rows' ratio, each against the other groups' (the day's
    level); None when its rows are not on record."""
    if rows is None:
        return None
    now, then = rows
    n1, n0 = now.groups.get(group), then.groups.get(group)
    rest1 = sum(v or 0 for h, v in now.groups.items() if h != group)
    rest0 = sum(v or 0 for h, v in then.groups.items() if h != group)
    if not n1 or not n0 or not rest1 or not rest0:
        return None
    return r / ((n1 / n0) / (rest1 / rest0))


def from_finding(finding: Finding, total: RecordedTotal) -> Moved | None:
    """The subset the total's own check measured moving by a factor (``row_values_moved``: its typical row
    against its record while the other subsets held), when the drill-down did not find it against the last
    good nights (a heavy-tailed subset's average is noisier than its typical row); or whose values of a
    column switched sign (``sign_flipped``, ``checks/signs.py``: a factor of -1 on the column's rows)."""
    found = finding.evidence.get("row_values_moved") or finding.evidence.get("sign_flipped")
    if not isinstance(found, dict) or not found.get("subset") or not found.get("factor"):
        return None
    column, value = split_label(str(found["subset"]))
    rows = int(found.get("rows") or 0)
    # Its total before and after, as tonight's rows at its usual and tonight's typical row.
    before, after = (rows * float(found.get(k) or 0.0) for k in ("before", "after"))
    # A column switched sign: that column moved, not the whole summed expression (``row_values_moved`` names
    # none: its ``column`` is the subset's key).
    measure = str(found.get("measure") or "")
    return Moved(
        column, value, measure, float(found["factor"]), rows, total.asset, before, after, from_history=True
    )


def _offset(tonight: Recorded, before: Recorded, ratios: dict[str, float], moved: str) -> bool:
    """Whether another group took the opposite of what ``moved`` gained or lost (at least half of it, at the
    level of the groups that held): units moving between groups, not a unit change."""
    for other in ratios:
        if other == moved:
            continue
        steady = [ratios[h] for h in ratios if h not in (moved, other)]
        level = sorted(steady)[len(steady) // 2] if steady else 1.0
        change = tonight.groups[moved] - level * before.groups[moved]
        opposite = tonight.groups[other] - level * before.groups[other]
        if change and opposite * change < 0 and abs(opposite) >= 0.5 * abs(change):
            return True
    return False


def rows_held(ctx: DiagnosisContext, asset: str, day, before) -> bool | None:
    """Whether the table's row count tonight is within 2% of the last good night's; a table whose count is
    not recorded (a source) is judged by the nearest monitored table built from it (None: none is)."""
    near = nearest(ctx.graph, asset, ctx.graph.downstream(asset)) if asset in ctx.graph else []
    for key in [asset, *near]:
        history = ctx.history.volume_history(key, day + timedelta(days=1), HISTORY_DAYS)
        now, then = history.get(day), history.get(before)
        if now is not None and then is not None and then.value and now.value is not None:
            return abs(now.value / then.value - 1) <= 0.02
    return None


def _holding_source(ctx: DiagnosisContext, where: str, columns: list[str]) -> str | None:
    """The source table upstream of ``where`` (itself, if it is one) whose values most likely moved: the one
    holding most of ``columns`` (the subset's key and the measure) by name, the nearest along the lineage
    among equals; None when no source is upstream. Without column lineage the moved values are placed on the
    total's own table, and the first source by name was an unrelated lookup's whenever one sorted first."""
    found = sources_upstream(ctx.graph, where) if where in ctx.graph else []
    wanted = {c.upper() for c in columns}
    ranked = nearest(ctx.graph, where, found)
    ranked += sorted(set(found) - set(ranked))
    return max(
        ranked, key=lambda k: len(wanted & {c.upper() for c in ctx.graph.info(k).columns}), default=None
    )


def _group_source(ctx: DiagnosisContext, total: RecordedTotal, moved: Moved) -> tuple[Column, Column] | None:
    """The union input's (measure, key) columns a recorded group's value moved in: of the sources feeding
    both the total's measure and its group column (``source_pairs``), the one whose key column holds the
    group's value in most rows. A union of two inputs feeds the one column from both, and the first by name
    was the wrong input whenever it sorted first; None when fewer than two sources feed both."""
    pairs = source_pairs(
        ctx.graph, (total.asset, moved.measure or measure_column(total) or ""), (total.asset, moved.column)
    )
    if len(pairs) < 2:
        return None
    parts, params = [], []
    for i, (_, (src, key)) in enumerate(pairs):
        if table(ctx.graph, src) is None:
            continue
        if moved.value is None:
            match = f"{quote_identifier(key)} IS NULL"
        else:
            match = f"CAST({quote_identifier(key)} AS VARCHAR) = ?"
            params.append(moved.value)
        parts.append(f"SELECT {i}, COUNT(*) FROM {table(ctx.graph, src)} WHERE {match}")
    if not parts:
        return pairs[0]
    rows = ctx.rows(
        f"which input of {total.asset} holds {moved.column}={moved.value}",
        "\nUNION ALL\n".join(parts),
        tuple(params),
    )
    held = {int(r[0]): int(r[1] or 0) for r in rows or []}
    return pairs[max(range(len(pairs)), key=lambda i: (held.get(i, 0), -i))]


def _edited_lookup_row(ctx: DiagnosisContext, where: str, column: str, target: str) -> bool:
    """Whether ``where``'s rows reach ``target`` through a lookup join on ``column`` alone, no date among its
    keys: one row per key, edited in place (a rate card, a price list), not a feed of dated rows (a day's rates
    joined on the currency and the date) whose new rows came in another unit."""
    if where not in ctx.graph or target not in ctx.graph:
        return False
    path = ctx.graph.path(where, target)
    for node in path[1:]:
        for join in node_joins(ctx, node):
            right = ctx.graph.key_for_table(join.right_table)
            if right not in path or join.relations:
                continue
            keys = [r for _, r in join.on]
            derived = ctx.graph.column_ancestors(*((right, k) for k in keys)) | {(right, k) for k in keys}
            if (where, column) in derived and not any(is_time(ctx.graph, right, k) for k in keys):
                return True
    return False


def unit_or_sign_diagnosis(
    incident: Incident,
    finding: Finding,
    total: RecordedTotal,
    moved: Moved,
    ctx: DiagnosisContext,
    evidence: dict[str, float | int | str],
) -> Diagnosis:
    sign = moved.sign
    key_source = moved.column
    if moved.from_history:
        # A recorded group moved: the measure and the subset's key as the source table holds them, the key
        # named in that source's column (a union's input calls the group by its own name).
        pair = _group_source(ctx, total, moved)
        src = (
            pair[0]
            if pair
            else source_column(ctx.graph, (total.asset, moved.measure or measure_column(total) or ""))
        )
        key_src = pair[1] if pair else source_column(ctx.graph, (total.asset, moved.column))
        if src is not None:
            moved.asset, moved.measure = src
            key_source = ""
            if key_src is not None and key_src[0] == src[0]:
                moved.column = key_source = key_src[1]
    measure = moved.measure or measure_column(total) or "the measure"
    key = KeyGap(
        column=moved.column,
        value=moved.value,
        rows=moved.rows,
        units=moved.after - moved.before,
        factor=round(moved.factor, 4),
        change=f"{measure} {'flipped sign' if sign else 'scaled'} ({moved.shown}) for {moved.column}"
        f"{' IS NULL' if moved.value is None else '=' + moved.value}",
    )
    evidence = {
        **evidence,
        "total": total.name,
        "factor": round(moved.factor, 4),
        "key": key.label,
        "measure": measure,
        "measure_source": moved.asset,
        "key_source_column": key_source,
        "subset_rows": moved.rows,
        "subset_before": moved.before,
        "subset_after": moved.after,
    }
    where = moved.asset
    what = "flipped sign" if sign else f"moved by a factor of {moved.factor:.3g}"
    basis = (
        "per row, against the last good night" if not moved.from_history else "against the last good night"
    )
    # A lookup's row for the key (joined on it alone) was edited: reference data changed, not a unit.
    edited = not sign and _edited_lookup_row(ctx, where, moved.column, total.asset)
    cause = (
        f"{measure} in {where} {what} for {key.label} ({basis}) while every other {moved.column} held: "
        + (
            "the source now posts that key's values with the opposite sign."
            if sign
            else f"its row in {where}, a lookup joined on {moved.column}, was edited."
            if edited
            else "the source now posts that key's values in another unit or scale."
        )
    )
    klass = CauseClass.SIGN_CHANGE if sign else CauseClass.UNIT_CHANGE
    # The proof shows each key's rows beside its units as the drill measured them: a counted column's count
    # (its ids averaged are no number of anything), else the measure's average per row.
    count = counted_on(ctx, total, where, moved.measure) if moved.measure else None
    units = PER_KEY[count].format(quote_identifier(measure)) if count else f"AVG({quote_identifier(measure)})"
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.REFERENCE_DATA_CHANGE if edited else klass,
        cause=cause,
        evidence=evidence,
        keys=[key],
        upstream_change=f"{measure} of {key.label}'s row edited in {where} ({moved.shown})"
        if edited
        else f"{measure} {'sign' if sign else 'unit'} changed for {key.label} ({moved.shown})",
        cause_asset=where if where in ctx.graph else total.asset,
        path=ctx.graph.path(where, total.asset)
        if where in ctx.graph and where != total.asset
        else sorted(ctx.graph.upstream(total.asset)) + [total.asset],
        owners=ctx.graph.owners_on(
            feeders(ctx, _holding_source(ctx, where, [moved.column, measure]) or total.asset)
        ),
        test_query=(
            f"SELECT {quote_identifier(moved.column)}, COUNT(*), {units} FROM {table(ctx.graph, where)}"
            f" GROUP BY {quote_identifier(moved.column)}"
            if moved.measure and table(ctx.graph, where)
            else None
        ),
    )
