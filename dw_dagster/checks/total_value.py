"""A recorded total as one night measured it: its value, by group where the total has group keys."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
    """A total without group keys whose VALUE is NULL."""
