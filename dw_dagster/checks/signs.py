"""A subset of a total's rows whose values of one column switched sign wholesale: a unit change by -1 of
that subset, which no total and no typical row can see.

A meter model's export register read with the opposite sign after a firmware update turns its solar
customers' net energy from credit to charge; the model's other meters export nothing, so the model's total
and its typical row (``row_values.py``, which reads the absolute value) hold, and the tariff's total moves
within what an overcast day does. The column's signs tell it: the rows of one subset (one meter model)
whose export is not zero were positive on every night on record, and tonight every one is negative.

So each night the total's own table, filtered as the total filters it, is read again grouped by each subset
key (``row_values.subset_keys``: the pipeline's own keys; in the key's typical-row part of the night's one
statement, the same rows by the same key, at most ``MAX_SUBSETS`` + 1 values read), with, for each numeric column the total's VALUE sums as a number (not one a
condition in it reads), the count and sum of its negative and of its positive values, recorded as the series
``signs:<total>:<KEY>``. A subset value is flipped when its non-zero values of the column had one sign on
every night of its record (``MIN_NIGHTS`` with any at least, an incident's nights left out) with a median of
``MIN_FLIPPED`` rows, and tonight at least ``MIN_FLIPPED`` of them, half its usual count at least, have the
other sign and at most ``STRAY`` of them (or one row) the old one; the key's other subsets held their sign,
and the flip moves the total by ``MIN_SHARE`` of it. A column that takes both signs in a subset (a refund
beside a sale, a month-end reversal) is never judged in it; a new subset has no record to judge. Of the keys
that show a flip, the coarsest (the fewest values holding it) is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import date
from statistics import median
from typing import Any

from pydantic import BaseModel
from sqlglot import exp

from dw_dagster.checks.attributes import one_table
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.row_values import MAX_SUBSETS, MIN_NIGHTS, NUMERIC
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.records.keys import key_label, plain

MIN_FLIPPED = 10
"""Rows of the other sign tonight (and of the usual sign on a usual night) from which a subset is judged: a
few reversals in a small subset on a quiet night are no flip."""
MIN_SHARE = 0.01
"""How much of the total the flip must move (twice the flipped amount): a flip that moves nothing is none."""
STRAY = 0.02
"""The part of tonight's non-zero rows that may keep the old sign (one row at least: a late row of
yesterday's)."""
_NEGATIVE, _POSITIVE = "<0", ">0"


def numeric_columns(graph: LineageGraph, asset: str, names: Sequence[str]) -> list[str]:
    """Of ``names`` (the columns a total's VALUE sums), those the table's schema says are numbers, as the
    schema spells them."""
    if asset not in graph:
        return []
    info = graph.info(asset)
    by_upper = {c.upper(): c for c in info.columns}
    found = [by_upper[n.upper()] for n in names if n.upper() in by_upper]
    return [c for c in found if info.type_of(c).upper().startswith(NUMERIC)]


def signs_series(total: str, key: str) -> str:
    return f"signs:{total}:{key}"


def signed_by(
    columns: Sequence[str],
) -> tuple[list[str], Callable[[exp.Column], list[exp.Expression]]] | None:
    """What a typical-row part adds to read ``columns``' signs (its ``more``); None for no column."""
    return (sign_names(columns), lambda subset: sign_projections(subset, columns)) if columns else None


def sign_names(columns: Sequence[str]) -> list[str]:
    """The names of :func:`sign_projections`' columns, in their order."""
    return [f"{n}{i}" for i in range(len(columns)) for n in ("N", "SN", "P", "SP")]


def sign_projections(subset: exp.Column, columns: Sequence[str]) -> list[exp.Expression]:
    """For each of ``columns`` (qualified as ``subset`` is), the count and sum of its negative values and of
    its positive ones: added to a subset key's typical-row part (``row_values.row_value_part``), which reads
    the same rows by the same key, so the signs cost no scan of their own."""
    out: list[exp.Expression] = []
    for i, name in enumerate(columns):
        column = exp.column(exp.to_identifier(name, quoted=True), table=subset.args.get("table"))
        for sign, compare in (("N", exp.LT), ("P", exp.GT)):
            holds = compare(this=column.copy(), expression=exp.Literal.number(0))
            for alias, then in ((f"{sign}{i}", exp.Literal.number(1)), (f"S{sign}{i}", column.copy())):
                counted = exp.If(this=holds.copy(), true=then, false=exp.Literal.number(0))
                out.append(exp.alias_(exp.Sum(this=counted), alias, quoted=True))
    return out


def signs_groups(
    key: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> dict[str, float] | None:
    """The part's rows as a night's groups (``KEY=value COLUMN<0`` -> rows, ``... COLUMN<0 sum`` -> their
    sum; the same for ``>0``), a sign no row had left out; None when the key has more values than are
    judged one by one."""
    if len(rows) > MAX_SUBSETS:
        return None
    out: dict[str, float] = {}
    for row in rows:
        label = key_label(key, plain(row[0]))
        for i, column in enumerate(columns):
            n, sn, p, sp = (float(v or 0) for v in row[1 + 4 * i : 5 + 4 * i])
            for mark, count, total in ((_NEGATIVE, n, sn), (_POSITIVE, p, sp)):
                if count:
                    out[f"{label} {column}{mark}"], out[f"{label} {column}{mark} sum"] = count, total
    return out


def summed_columns(sql: str) -> list[str]:
    """The columns a total's VALUE sums as numbers: its SUM's operands, not a column a condition in it reads
    (``IFF("DAYS_PAST_DUE" > 0, "PENALTY", 0)`` sums PENALTY alone); none when the SQL is not one SELECT over
    one table or VALUE is no SUM."""
    found = one_table(sql)
    if isinstance(found, str) or not isinstance(found[2].this, exp.Sum):
        return []
    # Above the SUM are its alias and the one SELECT (one_table): a predicate above a column is in the SUM.
    summed = found[2].this.this
    return list(
        dict.fromkeys(c.name for c in summed.find_all(exp.Column) if not c.find_ancestor(exp.Predicate))
    )


class Flip(BaseModel):
    subset: str
    """The subset's label (``METER_MODEL=M2``)."""
    column: str
    rows: int
    """Its rows of the new sign tonight."""
    usual: float
    """Its usual count of non-zero rows a night (their median on the nights judged against)."""
    before: str
    """The sign on every night before (``<0`` or ``>0``)."""
    amount: float
    """Tonight's sum of its values of the new sign."""
    per_row_before: float
    """Its usual value per row of the old sign (the median over the nights judged against)."""

    def describe(self) -> str:
        was, now = ("positive", "negative") if self.before == _POSITIVE else ("negative", "positive")
        return (
            f"{self.subset}: {self.rows:,} rows of {self.column} {now} tonight ({self.amount:,.2f}), {was} on "
            f"every night before (about {self.usual:,.0f} a night)"
        )


def flipped(
    key: str,
    columns: Sequence[str],
    day: date,
    groups: Mapping[str, float],
    past: Mapping[date, Recorded],
    whole: float,
    left_out: Collection[date] = (),
) -> list[Flip]:
    """The subset values of ``key`` whose values of a column switched sign tonight (see the module's
    docstring), most rows first. Every night on record counts but ``left_out`` (an incident's: a flip that
    persists is judged against the nights before it, night after night); the others' own sign must have held
    tonight, and the flipped amount must move the total by ``MIN_SHARE`` of it (``whole``)."""
    nights = [past[d].groups or {} for d in sorted(past, reverse=True) if d < day and d not in left_out]
    subsets: dict[str, set[str]] = {}
    for column in columns:
        for label in groups:
            subset, _, counted = label.rpartition(" ")
            if counted in (f"{column}{_NEGATIVE}", f"{column}{_POSITIVE}"):
                subsets.setdefault(column, set()).add(subset)
    out = []
    for column, tonight in subsets.items():
        held, moved = 0, []
        for subset in sorted(tonight):
            neg, pos = f"{subset} {column}{_NEGATIVE}", f"{subset} {column}{_POSITIVE}"
            seen = [n for n in nights if (n.get(neg) or 0.0) + (n.get(pos) or 0.0)]
            if len(seen) < MIN_NIGHTS:
                continue
            if all(not n.get(neg) for n in seen):
                before, old, new = _POSITIVE, pos, neg
            elif all(not n.get(pos) for n in seen):
                before, old, new = _NEGATIVE, neg, pos
            else:
                continue  # both signs on record: a column that takes either in this subset
            usual = median(n.get(old) or 0.0 for n in seen)
            now, kept = groups.get(new) or 0.0, groups.get(old) or 0.0
            if usual < MIN_FLIPPED:
                continue
            if now < max(MIN_FLIPPED, usual / 2) or kept > max(1.0, STRAY * (now + kept)):
                held += now == 0
                continue
            amount = groups.get(f"{new} sum") or 0.0
            if 2 * abs(amount) < MIN_SHARE * abs(whole or 0.0) or not whole:
                continue
            per_row = median((n.get(f"{old} sum") or 0.0) / (n.get(old) or 1.0) for n in seen)
            moved.append(
                Flip(
                    subset=subset,
                    column=column,
                    rows=int(now),
                    usual=usual,
                    before=before,
                    amount=amount,
                    per_row_before=per_row,
                )  # fmt: skip
            )
        # A column that switched sign in every subset is no subset's: the others must have held theirs.
        if moved and held:
            out += moved
    return sorted(out, key=lambda f: -f.rows)
