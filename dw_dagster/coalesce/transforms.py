"""What the diagnosis needs of a column's transform, and nothing else: the aggregate it applies at its top level
when that aggregate is not a sum (a distinct count does not add up by key as a sum does), and the columns it
reads only through a default (``COALESCE("R"."X", 1)``: a left join that finds no right row keeps the row
with the default, it drops none of it).

Only a transform that may hold one of those functions is parsed (sqlglot): most transforms hold none, and
the code location's load makes every node's spec. A transform sqlglot cannot read records nothing."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.coalesce.workspace_models import CoalesceColumn

_MAY_HOLD = re.compile(
    r"\b(?:COUNT|MIN|MAX|AVG|MEDIAN|APPROX_COUNT_DISTINCT|COALESCE|IFNULL|NVL)\s*\(", re.IGNORECASE
)

COUNT_ROWS = "COUNT(*)"
COUNT = "COUNT"
COUNT_DISTINCT = "COUNT(DISTINCT)"
APPROX_COUNT_DISTINCT = "APPROX_COUNT_DISTINCT"
COMBINED = "EXPRESSION"
"""Aggregates combined in an expression (``MAX(X) - MIN(X)``, ``COUNT(*) / 2``): not one of them alone."""

PER_KEY = {
    COUNT_ROWS: "COUNT(*)",
    COUNT: "COUNT({})",
    COUNT_DISTINCT: "COUNT(DISTINCT {})",
    APPROX_COUNT_DISTINCT: "APPROX_COUNT_DISTINCT({})",
}
"""The counts that split by key, each as the SQL that counts a key's rows of a column (``{}``)."""


class TransformRead(NamedTuple):
    aggregate: str | None
    """``COUNT(*)``, ``COUNT``, ``COUNT(DISTINCT)``, ``APPROX_COUNT_DISTINCT``, ``MIN``, ``MAX``, ``AVG``,
    ``MEDIAN`` or ``EXPRESSION``; None for no aggregate or a sum."""
    defaulted: tuple[tuple[str, str], ...]
    """``(table alias, column)`` the transform reads only inside a COALESCE/IFNULL/NVL that gives a default
    (the alias empty where the transform does not qualify the column)."""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.aggregate:
            out["aggregate"] = self.aggregate
        if self.defaulted:
            out["defaulted"] = [list(c) for c in self.defaulted]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TransformRead:
        defaulted = tuple((str(a), str(c)) for a, c in data.get("defaulted") or ())
        return cls(data.get("aggregate") or None, defaulted)


def column_transforms(columns: Iterable[CoalesceColumn]) -> dict[str, dict[str, Any]] | None:
    """What each column's transform says of the above, by column name; None when no column says anything."""
    # Most columns have no transform: the comprehension passes them at the cost of one attribute read.
    may_hold = [c for c in columns if c.transform and _MAY_HOLD.search(c.transform)]
    if not may_hold:
        return None
    found = {c.name: read_transform(c.transform) for c in may_hold}
    return {name: read.as_json() for name, read in found.items() if read is not None} or None


@lru_cache(maxsize=4096)
def read_transform(text: str) -> TransformRead | None:
    """A transform's aggregate and defaulted columns; None when it has neither or cannot be read."""
    import sqlglot  # imported on the first transform that needs it, not on every load
    from sqlglot import exp

    try:
        # A ref (a scalar subquery's table) stands for any table: only the columns' shape is read here.
        tree = sqlglot.parse_one(resolve_refs(text, lambda location, name: "REF"), read="snowflake")
    except Exception:  # noqa: BLE001 - a transform is what a person wrote: nothing in it fails the load
        return None
    if tree is None:
        return None
    read = TransformRead(_aggregate(tree, exp), _defaulted(tree, exp))
    return read if read.aggregate or read.defaulted else None


def _aggregate(tree: Any, exp: Any) -> str | None:
    named = {exp.Min: "MIN", exp.Max: "MAX", exp.Avg: "AVG", exp.Median: "MEDIAN"}
    top = tree
    # A cast, a rounding or a default around one aggregate is still that aggregate.
    while isinstance(top, (exp.Paren, exp.Cast, exp.TryCast, exp.Round, exp.Coalesce)):
        top = top.this
    if isinstance(top, exp.Count):
        if isinstance(top.this, exp.Distinct):
            return COUNT_DISTINCT
        return COUNT_ROWS if top.this is None or isinstance(top.this, exp.Star) else COUNT
    if isinstance(top, exp.ApproxDistinct):
        return APPROX_COUNT_DISTINCT
    if type(top) in named:
        return named[type(top)]
    kinds = (exp.Count, exp.ApproxDistinct, *named)
    # A window's aggregate and a scalar subquery's are a value of each row, not of the node's groups.
    inner = (
        a for a in tree.find_all(*kinds) if a.find_ancestor(exp.Window, exp.Subquery, exp.Select) is None
    )
    return COMBINED if next(inner, None) is not None else None


def _defaulted(tree: Any, exp: Any) -> tuple[tuple[str, str], ...]:
    inside: set[int] = set()
    for default in tree.find_all(exp.Coalesce):
        args = [default.this, *(default.args.get("expressions") or [])]
        if len(args) < 2 or isinstance(args[-1], exp.Null) or default.find(exp.AggFunc) is not None:
            continue  # no default (a NULL stays NULL), or a default for an aggregate's empty group
        inside.update(id(c) for arg in args[:-1] for c in arg.find_all(exp.Column))
    if not inside:
        return ()
    columns = list(tree.find_all(exp.Column))
    outside = {(c.table, c.name) for c in columns if id(c) not in inside}
    found = (c for c in columns if id(c) in inside and (c.table, c.name) not in outside)
    return tuple(dict.fromkeys((c.table, c.name) for c in found))
