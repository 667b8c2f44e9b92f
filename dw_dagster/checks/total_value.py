"""A recorded total as one night measured it: its value, by group where the total has group keys."""

from __future__ import annotations

from pydantic import BaseModel, Field
from sqlglot import exp


class TotalValue(BaseModel):
    value: float
    """The sum of the values that are not NULL."""
    groups: dict[str, float | None] = Field(default_factory=dict)
    """Group label -> value; None where the value is NULL (never counted as zero)."""
    rows: dict[str, int] = Field(default_factory=dict)
    """Group label -> rows, when the SQL returns a ``ROWS`` column."""
    value_columns: list[str] = Field(default_factory=list)
    """The columns the SQL's VALUE is computed from (to say what a NULL value lacks)."""
    null_value: bool = False
    """A total without group keys whose VALUE is NULL over rows that exist (a NULL-valued column). Over no
    rows (an empty day: the SUM of nothing is NULL) its value is 0, when its rows are known."""


def rows_counted(query: exp.Query) -> exp.Expression | None:
    """``COUNT(*) AS "ROWS"``, to add to an ungrouped total's SQL that returns no ``ROWS`` of its own, when
    it is one aggregate SELECT over a FROM (no GROUP BY, HAVING, DISTINCT, LIMIT or window): the rows its
    VALUE is computed over, counted in the same scan, so that a NULL over no rows reads as the 0 it is and a
    NULL over rows that exist stays a fault. None for any other shape (its NULL stays a fault)."""
    # The key sqlglot names FROM by, by version.
    if not isinstance(query, exp.Select) or not (query.args.get("from_") or query.args.get("from")):
        return None
    if any(query.args.get(k) for k in ("group", "having", "distinct", "limit", "qualify", "windows")):
        return None
    aggregates = [a for s in query.selects for a in s.find_all(exp.AggFunc) if a.parent_select is query]
    if not aggregates or any(a.find_ancestor(exp.Window) for a in aggregates):
        return None
    return exp.alias_(exp.Count(this=exp.Star()), "ROWS", quoted=True)
