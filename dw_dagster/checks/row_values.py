"""A subset of a total's rows whose per-row values moved by a common factor while the other subsets held: a
unit or scale change of that subset, whatever the factor (x0.25 as well as x100).

A subset's *total* is the wrong series to see it in when the measure is heavy-tailed: a few dozen payments
of a few hundred to tens of thousands of dollars sum to twice or half as much from one night to the next on
their own, so a quarter of them is within their record. Their *typical row* is not: the mean of the
logarithm of the measure over the subset's rows moves with the spread of a log-value over the square root of
its rows (a lognormal's 1.4 over 84 rows: 0.15), and a factor of 0.25 is 1.39 in those terms. So each night
the total's own table, filtered as the total filters it, is read again grouped by each subset key (a part of
the night's one statement: the table is read anyway), with the geometric mean of the summed expression's
absolute value per row, recorded as the series ``row_value:<total>:<COLUMN>``. The subset keys are those the
pipeline names: the total's ``item_key``, its group keys, the other totals' keys on its table, and the
dimension attributes its table carries from a reference table (``attributes.py``). When the lineage names a
basis that takes the rows' mix out (``RowBases``), the same is read on it: the measure per unit of a companion
converted at a joined factor (``PER``), and each row against the same item's rows in the other subsets
(``AMONG``).

Each subset is judged in units of its own record's spread, against a threshold the key's own record sets:
its largest subset move of each ordinary night, read at the table's false-alarm rate (``judge_row_values``;
docs/watch.md, "A subset's typical row"), and raised when its typical row moved beyond that, by more than
rounding, while the others, pooled by their rows, held within 15% (a common move is the business or the
calendar, not one subset's unit). A subset new or too new for its own baseline is not judged; a month-to-date total is not
read this way (its rows grow through the month).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from statistics import NormalDist, median
from typing import Any

from pydantic import BaseModel
from sqlglot import exp

from dw_dagster.checks.attributes import outer_select, projected, regrouped, root_columns
from dw_dagster.checks.baseline import (
    MAD_TO_SIGMA,
    MIN_RESIDUALS,
    false_alarm_alpha,
    inflation,
    relative_noise,
    tail_threshold,
)
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.measure import Part
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.records.keys import key_label, plain

MAX_SUBSETS = 50
"""A key with more values than this is not judged value by value."""
MIN_ROWS = 20
"""A subset with fewer rows tonight, or usually, is not judged: the mean of a handful of log-values is not near
normal."""
MIN_NIGHTS = 14
"""A subset is judged once it has this many nights on record."""
ROWS_HELD = 0.25
"""A subset's rows held when within a quarter of its usual share of the night's rows (or three times the
sampling error of its count)."""
NEGLIGIBLE = math.log(1.001)
"""A move within 0.1% is the rounding of the stored values, never a unit: a subset whose measure is exact on its
basis (every row at its item's value, every row at the same rate) has a record of rounding alone."""
EXACT = NEGLIGIBLE / 10
"""The least spread of a subset's record: a tenth of a negligible move."""
HELD = math.log(1.15)
"""The other subsets held when their typical row, pooled by their rows, changed by less than 15%."""
MATERIAL = HELD
"""The least factor a subset's per-row values must move by to be a unit change on a matched basis (per unit of
a companion measure, or against the same items elsewhere): beyond the band within which the other subsets are
said to hold. Within it a key's own record can be exact enough to call a price or a business moving a unit."""
MIXED = math.log(1.5)
"""The same on the plain basis, a subset's typical row over whatever items it holds tonight: that moves with its
mix (a benign new org mapped the same night moved another org's on-hand rows x0.85 at z -7.6), so only a factor
no mix makes is a unit there."""
NUMERIC = (
    "NUMBER",
    "DEC",
    "NUMERIC",
    "INT",
    "BIGINT",
    "SMALLINT",
    "TINYINT",
    "BYTEINT",
    "FLOAT",
    "DOUBLE",
    "REAL",
)
"""Snowflake's numeric types by how their names begin (DEC: DECIMAL, DEC and DECFLOAT;
https://docs.snowflake.com/en/sql-reference/data-types-numeric)."""
_COUNT = re.compile(r"(NUMBER|DECIMAL|NUMERIC)(\(\s*\d+\s*(,\s*0\s*)?\))?|(BIG|SMALL|TINY)?INT(EGER)?")
"""A Snowflake type of whole numbers (a scale of 0, Snowflake's default)."""
SCALE = 1e6
"""The geometric mean is recorded in millionths of the measure's unit: the judge reads a series as
log(1 + x), which is log x for a series far above 1 (a per-row value of a few cents as well as of millions)."""


PER = "per "
"""A basis ``per <COLUMN>``: the measure per unit of a companion measure the same rows carry."""
AMONG = "among "
"""A basis ``among <ITEM>``: each row's measure against its item's rows in the other subsets tonight."""


def row_value_series(total: str, column: str, basis: str = "") -> str:
    """The typical row per subset of ``column``; on a ``basis`` (``PER``, ``AMONG``), of the paired measure."""
    return f"row_value:{total}:{column}" + (f":{basis}" if basis else "")


def row_count_series(total: str, column: str) -> str:
    """The rows of each subset whose typical row ``row_value_series`` records."""
    return f"row_count:{total}:{column}"


class RowBases(BaseModel):
    """What the lineage and the other totals on a total's table add to its subsets' typical rows."""

    keys: list[str] = []
    """The group and item keys of the other totals on the same table (columns it has): subsets too."""
    item: str | None = None
    """The table's item key (the total's own, or another total's on the table): each row is paired with its
    item's rows in the other subsets tonight."""
    companion: str | None = None
    """A measure the same rows carry that the summed one is derived from: the summed one is read per unit of
    it against the same items elsewhere (a line's cost per pack)."""
    joined: bool = False
    """Whether the rest of the summed measure is joined from another table (an amount converted at a joined
    rate): then it is also read per unit of its companion on its own (``PER``)."""


def row_bases(
    graph: LineageGraph, total: RecordedTotal, measures: Sequence[str], totals: Sequence[RecordedTotal]
) -> RowBases:
    """The other totals' keys on the total's table, its item key and its measure's companion (``RowBases``).

    The companion is a numeric column whose source columns are part of the measure's: the one whose other
    source columns all come from other tables (the measure is it converted by a factor joined on: a rate, a
    price; the largest such, when one), else the one count (an integer column: the measure is per unit of it,
    a line's cost per pack), when one. Two candidates alike: which the factor multiplies is not read."""
    if total.asset not in graph:
        return RowBases()
    info = graph.info(total.asset)
    by_upper = {c.upper(): c for c in info.columns}
    siblings = [t for t in totals if t.asset == total.asset and t.name != total.name]
    keys = [
        by_upper[k.upper()]
        for t in siblings
        for k in [*t.group_keys, *([t.item_key] if t.item_key else [])]
        if k.upper() in by_upper
    ]
    item = next(
        (k for k in [total.item_key, *(t.item_key for t in siblings)] if k and k.upper() in by_upper), None
    )
    wanted = {m.upper() for m in measures}
    if len(wanted) != 1 or next(iter(wanted)) not in by_upper:
        return RowBases(keys=keys, item=item)
    measure = root_columns(graph, (total.asset, by_upper[next(iter(wanted))]))
    joined: dict[int, list[str]] = {}
    counts = []
    for column in info.columns:
        kind = info.type_of(column).upper()
        if column.upper() in wanted or not kind.startswith(NUMERIC):
            continue
        base = root_columns(graph, (total.asset, column))
        rest = measure - base
        if not base or not rest or not base < measure:
            continue
        if not {a for a, _ in base} & {a for a, _ in rest}:
            joined.setdefault(len(base), []).append(column)
        elif _COUNT.fullmatch(kind):
            counts.append(column)
    largest = joined.get(max(joined)) if joined else None
    if largest and len(largest) == 1:
        return RowBases(keys=keys, item=item, companion=largest[0], joined=True)
    return RowBases(keys=keys, item=item, companion=counts[0] if len(counts) == 1 else None)


def subset_keys(total: RecordedTotal, attributes: Sequence[str], others: Sequence[str] = ()) -> list[str]:
    """The columns whose values are subsets of the total's rows: its item key, group keys, the other totals'
    keys on its table and its carried attributes, each once, in that order (the first key that raises is the
    one reported: a key a total groups by before an attribute of a coarser grain)."""
    out: dict[str, str] = {}
    for column in [*([total.item_key] if total.item_key else []), *total.group_keys, *others, *attributes]:
        out.setdefault(column.upper(), column)
    return list(out.values())


def _log_of(measure: exp.Expression) -> tuple[exp.Expression, exp.Expression]:
    """``ABS(measure)`` with a zero as NULL, and its log. A zero has no logarithm and no unit: left out of the
    rows counted and of the mean (both skip NULL)."""
    nonzero = exp.Nullif(this=exp.Abs(this=measure.copy()), expression=exp.Literal.number(0))
    return nonzero, exp.Ln(this=nonzero.copy())


def _moments(key: exp.Expression, counted: exp.Expression, log: exp.Expression) -> list[exp.Expression]:
    return [
        exp.alias_(key, "SUBSET", quoted=True),
        exp.alias_(exp.Count(this=counted), "ROWS", quoted=True),
        exp.alias_(exp.Avg(this=log.copy()), "LOG_ROW", quoted=True),
        exp.alias_(exp.Avg(this=exp.Mul(this=log.copy(), expression=log.copy())), "LOG_SQ", quoted=True),
    ]


_NAMES = ("SUBSET", "ROWS", "LOG_ROW", "LOG_SQ")


def row_value_part(
    total: RecordedTotal,
    sql: str,
    column: str,
    companion: str | None = None,
    more: tuple[Sequence[str], Callable[[exp.Column], list[exp.Expression]]] | None = None,
) -> Part | None:
    """Per value of ``column``: the rows and the mean log (and mean squared log) of the absolute value of what
    the total's VALUE sums (with a ``companion``: of it per unit of the companion, ``PER``) over the rows the
    total reads; None when its SQL is not one SELECT over one table or VALUE is not a ``SUM`` (a count has no
    per-row value). ``more``: the names and the builder of more aggregates of the same rows by the same key,
    after those (without a companion: the signs of ``signs.py``)."""
    names, added = more if more is not None and companion is None else ((), None)

    def projections(key: exp.Column, value: exp.Alias) -> list[exp.Expression] | None:
        if not isinstance(value.this, exp.Sum):
            return None
        nonzero, log = _log_of(value.this.this)
        if companion is None:
            return [*_moments(key, nonzero, log), *(added(key) if added else ())]
        other = exp.column(exp.to_identifier(companion, quoted=True), table=key.args.get("table"))
        base, base_log = _log_of(other)
        ratio = exp.Paren(this=exp.Sub(this=log, expression=base_log))
        return _moments(key, exp.Mul(this=nonzero, expression=base), ratio)

    # One value beyond MAX_SUBSETS says the key is not judged value by value: a key of every row (a time stamp,
    # an order id) would otherwise send back thousands of subsets a night only to be dropped.
    query = regrouped(sql, column, [*_NAMES, *names], "r", projections, MAX_SUBSETS + 1)
    basis = f"{PER}{companion}" if companion else ""
    shape = f"row_value+{len(names)}" if names else "row_value"
    return None if query is None else Part(("row_value", total.name, column, basis), query, shape=shape)


def paired_part(
    total: RecordedTotal, sql: str, column: str, item: str, companion: str | None = None
) -> Part | None:
    """Per value of ``column``: the rows and the mean log (and mean squared log) of each row's measure (per unit
    of its ``companion``, when one) against the mean log of the same ``item``'s rows in the other subsets
    tonight, over the rows the total reads (``AMONG``). An item's value is its own (a product's pack cost, a
    tariff), whichever subset its rows fall in: a subset whose rows of the same items moved against the
    others' moved by a factor, though its mix of heavy-tailed items hides it in its own typical row. An item
    no other subset has tonight has nothing to pair with: its rows count, and are left out of the mean. None
    when ``row_value_part`` would be."""

    def projections(key: exp.Column, value: exp.Alias) -> list[exp.Expression] | None:
        if not isinstance(value.this, exp.Sum):
            return None
        _, log = _log_of(value.this.this)
        if companion is not None:
            other = exp.column(exp.to_identifier(companion, quoted=True), table=key.args.get("table"))
            log = exp.Paren(this=exp.Sub(this=log, expression=_log_of(other)[1]))
        paired = exp.column(exp.to_identifier(item, quoted=True), table=key.args.get("table"))
        return [
            exp.alias_(key, "SUBSET", quoted=True),
            exp.alias_(paired, "ITEM", quoted=True),
            exp.alias_(log, "L", quoted=True),
        ]

    found = projected(sql, column, projections)
    if found is None:
        return None

    def col(name: str) -> exp.Column:
        return exp.column(exp.to_identifier(name, quoted=True))

    def over(agg: type[exp.AggFunc], *by: str) -> exp.Window:
        return exp.Window(this=agg(this=col("L")), partition_by=[col(b) for b in by])

    # The other subsets' rows of the item: the item's, less the subset's own.
    elsewhere = exp.Div(
        this=exp.Paren(this=exp.Sub(this=over(exp.Sum, "ITEM"), expression=over(exp.Sum, "ITEM", "SUBSET"))),
        expression=exp.Nullif(
            this=exp.Sub(this=over(exp.Count, "ITEM"), expression=over(exp.Count, "ITEM", "SUBSET")),
            expression=exp.Literal.number(0),
        ),
    )
    against = exp.select(
        col("SUBSET"), col("L"), exp.alias_(exp.Sub(this=col("L"), expression=elsewhere), "P", quoted=True)
    ).from_(found[0].subquery(exp.to_identifier("i", quoted=True)))
    by_subset = exp.select(*_moments(col("SUBSET"), col("L"), col("P"))).from_(
        against.subquery(exp.to_identifier("p", quoted=True))
    )
    by_subset.set("group", exp.Group(expressions=[col("SUBSET")]))
    query = outer_select(by_subset.limit(MAX_SUBSETS + 1), _NAMES, "r")
    return Part(("row_value", total.name, column, f"{AMONG}{item}"), query, shape="row_value")


class RowValues(BaseModel):
    """Tonight's typical row per value of one subset key (in millionths), each value's rows and the spread of
    its rows' log-values."""

    column: str
    typical: dict[str, float]
    rows: dict[str, int]
    spread: dict[str, float] = {}
    """The standard deviation of the log of the measure over the subset's rows tonight."""
    measure: str = ""
    """The columns the total's VALUE sums."""
    basis: str = ""
    """What each row's measure is read against (``PER``, ``AMONG``); "": itself."""

    @property
    def value(self) -> float:
        """The typical row over every subset (the rows-weighted geometric mean)."""
        n = sum(self.rows.get(g, 0) for g in self.typical)
        if not n:
            return 0.0
        return math.exp(sum(self.rows.get(g, 0) * math.log(v) for g, v in self.typical.items()) / n)


def take_row_values(
    column: str, rows: Sequence[tuple[Any, ...]], measure: str = "", basis: str = ""
) -> RowValues | None:
    """The part's rows as subsets (None: too many values to judge one by one)."""
    if len(rows) > MAX_SUBSETS:
        return None
    typical, counted, spread = {}, {}, {}
    for subset, n, log_row, log_sq in rows:
        if log_row is None or not n:
            continue
        label = key_label(column, plain(subset))
        typical[label] = SCALE * math.exp(float(log_row))
        counted[label] = int(n)
        if log_sq is not None and n > 1:
            spread[label] = math.sqrt(max(float(log_sq) - float(log_row) ** 2, 0.0) * n / (n - 1))
    return RowValues(
        column=column, typical=typical, rows=counted, spread=spread, measure=measure, basis=basis
    )


class RowValueMove(BaseModel):
    column: str
    subset: str
    """The subset's label (``COLUMN=value``)."""
    factor: float
    others: float
    """How the other subsets' typical rows moved tonight (the median of their factors)."""
    z: float
    """The move, less the record's usual one, in units of the larger of the record's spread and tonight's
    sampling error."""
    threshold: float
    """The |z| beyond which the key's own record puts a move at the false-alarm rate."""
    nights: int = 0
    """The nights of the key's record the threshold was read from."""
    rows: int
    before: float
    after: float
    """The subset's typical row (in the measure's unit) usually and tonight."""
    basis: str = ""
    """What each row's measure was read against (``RowValues.basis``)."""

    def describe(self, measure: str) -> str:
        if self.basis.startswith(PER):
            what = f"{measure} {self.basis} of {self.subset}"
        elif self.basis.startswith(AMONG):
            what = f"per-row {measure} of {self.subset} against the same {self.basis[len(AMONG) :]} elsewhere"
        else:
            what = f"per-row {measure} of {self.subset}"
        return (
            f"{what} moved x{self.factor:.3g} (a typical row {self.before:,.4g} -> "
            f"{self.after:,.4g}, {self.rows:,} rows; z {self.z:+.1f}, threshold {self.threshold:.1f} from "
            f"{self.nights} nights of {self.column}'s record) while every "
            f"other {self.column} held (x{self.others:.3g}): that subset's values scaled (a unit change, or its source rows counted more than once)"
        )


def _row_shares(past_rows: Mapping[date, Recorded], nights: Sequence[date]) -> list[dict[str, float]]:
    """Each night's share of its rows per subset."""
    out = []
    for d in nights:
        r = past_rows.get(d)
        groups = {g: v for g, v in (r.groups if r else {}).items() if v is not None}
        whole = sum(groups.values())
        if whole:
            out.append({g: v / whole for g, v in groups.items()})
    return out


def _rows_held(n: int, whole: int, shares: Sequence[float]) -> bool:
    """Whether ``n`` rows of ``whole`` are the subset's usual share (no record of its rows: not judged)."""
    if len(shares) < MIN_NIGHTS:
        return False
    expected = median(shares) * whole
    return abs(n - expected) <= max(ROWS_HELD * expected, 3 * math.sqrt(expected))


def _errors(
    g: str,
    known: Mapping[str, Mapping[date, float]],
    centre: Mapping[str, float],
    past_rows: Mapping[date, Recorded],
) -> tuple[dict[date, float], float]:
    """Subset ``g``'s record of the measure it is judged on, night by night: its log typical row from its median,
    less the other subsets' median move that night, each brought to the subset's usual rows as a mean of that
    many log-values spreads (``relative_noise``: a night of a quarter of the rows, twice as much); and those
    usual rows."""
    moves: dict[date, tuple[float, float]] = {}
    for d, v in known[g].items():
        others = [known[h][d] - centre[h] for h in known if h != g and d in known[h]]
        if others:
            r = past_rows.get(d)
            moves[d] = (v - centre[g] - median(others), (r.groups.get(g) if r else None) or 0.0)
    counted = [n for _, n in moves.values() if n > 0]
    usual = median(counted) if counted else 0.0
    return {d: m / relative_noise(n or usual, usual) for d, (m, n) in moves.items()}, usual


def _beyond(z: float) -> float:
    """P(|N| > z) for a standard normal N (erfc keeps it exact far out, where 1 - cdf is 0; beyond 38 it is 0 and a
    deviation is taken as itself)."""
    return math.erfc(z / math.sqrt(2))


def as_one(z: float, subsets: int) -> float:
    """The deviation of one normal error as rare as the largest of ``subsets`` independent ones being ``z``
    (Sidak's correction): P(|N| > as_one) = 1 - (1 - P(|N| > z))^subsets."""
    if z <= 0:
        return 0.0
    tail = -math.expm1(subsets * math.log1p(-_beyond(z)))
    return -NormalDist().inv_cdf(tail / 2) if tail > 0 else z


def of_one(z: float, subsets: int) -> float:
    """The inverse of ``as_one``: the largest of ``subsets`` deviations as rare as one deviation ``z``."""
    if z <= 0:
        return 0.0
    tail = -math.expm1(math.log1p(-_beyond(z)) / subsets)
    return -NormalDist().inv_cdf(tail / 2) if tail > 0 else z


def judge_row_values(
    total: RecordedTotal,
    day: date,
    tonight: RowValues,
    past: Mapping[date, Recorded],
    past_rows: Mapping[date, Recorded],
    *,
    excluded_days: set[date],
    share: int,
) -> RowValueMove | None:
    """The subset whose typical row moved by a factor beyond the key's own record while the others held, if any
    (the largest move when several did).

    Each subset's move is its log typical row against its own median, less the median move of the other
    subsets that night (what moved every subset alike is the day, not a unit), in units of its spread: the
    larger of its record's (1.4826 x MAD of the same measure on the nights before, each night's brought to the
    usual rows, widened for tonight's rows and for tonight being out of the record) and tonight's own sampling
    error (the spread of its rows' log-values over the square root of their number).

    The threshold is the key's own record of its largest such move each night: the ordinary nights' largest
    subset move, read as one normal deviation as rare (``as_one``), at the table's false-alarm rate split over
    its series (``share``), by ``baseline.tail_threshold`` (the conformal quantile, or its tail extrapolated on
    a short record, never below a normal one), then back to what one of this many subsets may reach
    (``of_one``). One rate for the key, whatever its number of subsets, spent where its record says moves of
    that size happen.

    The subset's rows must have held too: its share of tonight's rows within its record's (by a quarter, or
    three times the sampling error of its count). A key newly mapped into a subset (a warehouse opened in a
    region) changes its typical row by what the newcomer's rows are like, and brings rows: that is the
    business, not a unit."""
    nights = sorted(d for d in past if d < day and d not in excluded_days)
    logs: dict[str, dict[date, float]] = {}
    for g in tonight.typical:
        logs[g] = {d: math.log(v) for d in nights if (v := past[d].groups.get(g)) is not None and v > 0}
    # Subsets with a record long enough to judge; a subset new or too new is not judged.
    known = {g: s for g, s in logs.items() if len(s) >= MIN_NIGHTS}
    if len(known) < 2:
        return None
    if tonight.basis.startswith(AMONG) and len(known) < len(logs):
        # Each row is read against the same items in the other subsets: a subset new tonight (a key mapped
        # today) is one of those others, so every known subset's reading moved with it (a benign new org
        # moved another's by x0.88, z -6.3): no record compares with tonight's.
        return None
    centre = {g: median(s.values()) for g, s in known.items()}
    # A measure per unit of its companion is the factor joined onto each row (a rate), not a mean of
    # heavy-tailed log-values: a subset of one aggregated row a night has it as well as one of thousands.
    least = 1 if tonight.basis.startswith(PER) else MIN_ROWS
    moves = {g: math.log(tonight.typical[g]) - centre[g] for g in known}
    # Each subset's record in units of its own spread, and the key's largest of them each night.
    records: dict[str, tuple[float, float, float, int]] = {}
    largest: dict[date, list[float]] = {}
    for g in known:
        errors, usual = _errors(g, known, centre, past_rows)
        # A subset of a handful of rows is never judged: its strays are no measure of the others'.
        if len(errors) < MIN_NIGHTS or usual < least:
            continue
        bias = median(errors.values())
        # A record exact on its basis (every pack of a product at its price, wherever dispensed) is one of
        # rounding: any move beyond it (NEGLIGIBLE) is many of its spreads.
        sigma = max(MAD_TO_SIGMA * median(abs(e - bias) for e in errors.values()), EXACT)
        records[g] = (bias, sigma, usual, len(errors))
        for d, e in errors.items():
            largest.setdefault(d, []).append(abs(e - bias) / sigma)
    record = [as_one(max(z), len(z)) for z in largest.values()]
    if len(records) < 2 or len(record) < MIN_RESIDUALS:
        return None
    alpha = false_alarm_alpha(total.baseline, share)
    # Never below a normal tail (the record is in spreads): a record exact on its basis is all zeros.
    threshold = of_one(max(tail_threshold(record, alpha), NormalDist().inv_cdf(1 - alpha / 2)), len(records))
    best: RowValueMove | None = None
    shares = _row_shares(past_rows, nights)
    tonight_rows = sum(tonight.rows.values())
    for g, (bias, sigma, usual, points) in records.items():
        n = tonight.rows.get(g, 0)
        if n < least or not _rows_held(n, tonight_rows, [s[g] for s in shares if g in s]):
            continue
        common = median(m for h, m in moves.items() if h != g)
        moved = moves[g] - common
        if abs(moved) < (MATERIAL if tonight.basis.startswith((PER, AMONG)) else MIXED) or abs(common) > HELD:
            continue
        # Tonight is out of the record (the median of the nights before), spread for tonight's rows.
        widen = inflation(points) * relative_noise(n, usual)
        scale = max(sigma * widen, tonight.spread.get(g, 0.0) / math.sqrt(n))
        z = (moved - bias * widen) / scale
        if abs(z) < threshold:
            continue
        if best is None or abs(moved) > abs(math.log(best.factor)):
            best = RowValueMove(
                column=tonight.column,
                subset=g,
                factor=math.exp(moved),
                others=math.exp(common),
                z=z,
                threshold=threshold,
                nights=len(record),
                rows=n,
                before=math.exp(centre[g]) / SCALE,
                after=tonight.typical[g] / SCALE,
                basis=tonight.basis,
            )
    return best
