"""A subset of a total's rows whose values of one column switched sign wholesale: a unit change by -1 of
that subset, which no total and no typical row can see.

A meter model's export register read with the opposite sign after a firmware update turns its solar
customers' net energy from credit to charge; the model's other meters export nothing, so the model's total
and its typical row (``row_values.py``, which reads the absolute value) hold, and the tariff's total moves
within what an overcast day does. The column's signs tell it: the rows of one subset (METER_MODEL=HEXING)
whose export is not zero were positive on every night on record, and tonight every one is negative.

So each night the total's own table, filtered as the total filters it, is read again grouped by each subset
key (``row_values.subset_keys``: the pipeline's own keys; a part of the night's one statement, at most
``MAX_SUBSETS`` + 1 values read), with, for each numeric column the total's VALUE sums, the count and sum of
its negative and of its positive values, recorded as the series ``signs:<total>:<KEY>``. A subset value is
flipped when its non-zero values of the column had one sign on each of its last ``MIN_NIGHTS`` nights with any
(from ``MIN_FLIPPED`` rows a night in their median), and tonight at least ``MIN_FLIPPED`` of them, half its
usual count at least, have the other sign and at most ``STRAY`` of them (or one row) the old one. A column that takes both
signs in a subset (a refund beside a sale, a meter that imports and exports by turns) is never judged in it;
a new subset has no record to judge. The first subset key that has a flip is the one reported, as
``row_values.py`` reports its first key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from statistics import median
from typing import Any

from pydantic import BaseModel
from sqlglot import exp

from dw_dagster.checks.attributes import regrouped
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.measure import Part
from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.checks.row_values import MAX_SUBSETS, MIN_NIGHTS, NUMERIC
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.records.keys import key_label, plain

MIN_FLIPPED = 5
"""Rows of the other sign tonight (and of the usual sign on a usual night) from which a subset is judged."""
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


def signs_part(total: RecordedTotal, sql: str, key: str, columns: Sequence[str]) -> Part | None:
    """Per value of ``key``: for each of ``columns``, the count and sum of its negative values and of its
    positive ones over the rows the total reads; None when its SQL is not one SELECT over one table or its
    VALUE is not a ``SUM``."""

    def projections(subset: exp.Column, value: exp.Alias) -> list[exp.Expression] | None:
        if not isinstance(value.this, exp.Sum):
            return None
        out: list[exp.Expression] = [exp.alias_(exp.cast(subset, "VARCHAR"), "SUBSET", quoted=True)]
        for i, name in enumerate(columns):
            column = exp.column(exp.to_identifier(name, quoted=True), table=subset.args.get("table"))
            for sign, compare in (("N", exp.LT), ("P", exp.GT)):
                holds = compare(this=column.copy(), expression=exp.Literal.number(0))
                out.append(
                    exp.alias_(
                        exp.Sum(
                            this=exp.If(this=holds, true=exp.Literal.number(1), false=exp.Literal.number(0))
                        ),
                        f"{sign}{i}",
                        quoted=True,
                    )
                )
                out.append(
                    exp.alias_(
                        exp.Sum(
                            this=exp.If(this=holds.copy(), true=column.copy(), false=exp.Literal.number(0))
                        ),
                        f"S{sign}{i}",
                        quoted=True,
                    )
                )
        return out

    names = ["SUBSET", *(f"{n}{i}" for i in range(len(columns)) for n in ("N", "SN", "P", "SP"))]
    query = regrouped(sql, key, names, "g", projections, MAX_SUBSETS + 1)
    return None if query is None else Part(("signs", total.name, key), query, shape=f"signs:{len(columns)}")


def signs_groups(
    key: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> dict[str, float] | None:
    """The part's rows as a night's groups (``KEY=value COLUMN<0`` -> rows, ``... COLUMN<0 sum`` -> their
    sum; the same for ``>0``); None when the key has more values than are judged one by one."""
    if len(rows) > MAX_SUBSETS:
        return None
    out: dict[str, float] = {}
    for row in rows:
        label = key_label(key, plain(row[0]))
        for i, column in enumerate(columns):
            n, sn, p, sp = (float(v or 0) for v in row[1 + 4 * i : 5 + 4 * i])
            out[f"{label} {column}{_NEGATIVE}"], out[f"{label} {column}{_NEGATIVE} sum"] = n, sn
            out[f"{label} {column}{_POSITIVE}"], out[f"{label} {column}{_POSITIVE} sum"] = p, sp
    return out


class Flip(BaseModel):
    subset: str
    """The subset's label (``METER_MODEL=HEXING_HXE115``)."""
    column: str
    rows: int
    """Its rows of the new sign tonight."""
    usual: float
    """Its usual count of non-zero rows a night (their median on the nights judged against)."""
    before: str
    """The sign on every night before (``<0`` or ``>0``)."""
    amount: float
    """Tonight's sum of its values of the new sign."""

    def describe(self) -> str:
        was, now = ("positive", "negative") if self.before == _POSITIVE else ("negative", "positive")
        return (
            f"{self.subset}: {self.rows:,} rows of {self.column} {now} tonight ({self.amount:,.2f}), {was} on "
            f"every night before (about {self.usual:,.0f} a night)"
        )


def flipped(
    key: str, columns: Sequence[str], day: date, groups: Mapping[str, float], past: Mapping[date, Recorded]
) -> list[Flip]:
    """The subset values of ``key`` whose values of a column switched sign tonight (see the module's
    docstring), most rows first."""
    nights = [past[d].groups or {} for d in sorted(past, reverse=True) if d < day]
    out = []
    for label in sorted(groups):
        subset, _, counted = label.rpartition(" ")
        column = counted[: -len(_NEGATIVE)]
        if not counted.endswith(_NEGATIVE) or column not in columns:
            continue  # each subset and column once, from its negative count
        neg, pos = f"{subset} {column}{_NEGATIVE}", f"{subset} {column}{_POSITIVE}"
        seen = [
            (n.get(neg) or 0.0, n.get(pos) or 0.0)
            for n in nights
            if (n.get(neg) or 0.0) + (n.get(pos) or 0.0)
        ]
        seen = seen[:MIN_NIGHTS]
        if len(seen) < MIN_NIGHTS:
            continue
        if all(a == 0 for a, _ in seen):
            before, old, new = _POSITIVE, pos, neg
            usual = median(b for _, b in seen)
        elif all(b == 0 for _, b in seen):
            before, old, new = _NEGATIVE, neg, pos
            usual = median(a for a, _ in seen)
        else:
            continue
        now, kept = groups.get(new) or 0.0, groups.get(old) or 0.0
        if usual < MIN_FLIPPED or now < max(MIN_FLIPPED, usual / 2) or kept > max(1.0, STRAY * (now + kept)):
            continue
        out.append(
            Flip(
                subset=subset,
                column=column,
                rows=int(now),
                usual=usual,
                before=before,
                amount=groups.get(f"{new} sum") or 0.0,
            )
        )
    return sorted(out, key=lambda f: -f.rows)
