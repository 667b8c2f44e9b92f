"""The metrics file: the business totals a team records nightly, validated with pydantic.

```yaml
business_day: {timezone: America/Chicago, cutoff_hour: 6}
totals:
  - name: network_onhand_units
    owner: inventory-analytics
    asset: inventory/fct_inventory_position
    sql: |
      SELECT "ORGANIZATION_ID", SUM("ONHAND_QTY") AS "VALUE"
      FROM {{ ref('INVENTORY', 'FCT_INVENTORY_POSITION') }} GROUP BY 1
    group_keys: [ORGANIZATION_ID]
    hurts: down
    baseline: {method: day_over_day}
    reconcile_with: {total: ebs_onhand_units, tolerance_pct: 0.1}
```
The SQL returns the group-key columns and one numeric column ``VALUE`` (one row without group keys); it
runs in Snowflake, once per total per night. ``{{ ref('LOC', 'NODE') }}`` resolves to the node's table.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.config import FileModel, load_yaml_model

_NAME = r"^[a-z][a-z0-9_]*$"
_KEY = r"^[a-z0-9_\-]+(/[a-z0-9_\-]+)*$"




class BusinessDay(FileModel):
    timezone: str = "UTC"
    cutoff_hour: int = Field(
        default=6, ge=0, le=23, description="A run that starts before this local hour counts for the day before."
    )

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"expected an IANA time zone such as 'America/Chicago', got {v!r}") from e
        return v

    def of(self, moment: datetime) -> date:
        local = moment.astimezone(ZoneInfo(self.timezone))
        return (local - timedelta(hours=self.cutoff_hour)).date()


class Reconciliation(FileModel):
    total: str = Field(pattern=_NAME, description="The source total this one must track.")
    tolerance_pct: float = Field(
        default=0.1, ge=0, description="Allowed change of the gap, in percent of the source total."
    )
    tolerance_units: float | None = Field(default=None, ge=0, description="Or an absolute allowance.")

    def tolerance(self, source_value: float) -> float:
        if self.tolerance_units is not None:
            return self.tolerance_units
        return abs(source_value) * self.tolerance_pct / 100


class RecordedTotal(FileModel):
    name: str = Field(pattern=_NAME)
    description: str = ""
    owner: str = Field(description="Team id from the context file.")
    asset: str = Field(pattern=_KEY, description="Asset key path the total is computed from.")
    sql: str
    group_keys: list[str] = Field(default_factory=list)
    grain: str = Field(default="daily", pattern="^daily$")
    hurts: Direction = Direction.BOTH
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)
    reconcile_with: Reconciliation | None = None

    @field_validator("sql")
    @classmethod
    def _one_statement(cls, v: str) -> str:
        if ";" in v.strip().rstrip(";"):
            raise ValueError("expected one SELECT statement")
        if not re.match(r"^\s*(with|select)\b", v, re.IGNORECASE):
            raise ValueError("expected a SELECT (or WITH ... SELECT) statement returning VALUE")
        return v.strip().rstrip(";")

    @field_validator("group_keys")
    @classmethod
    def _identifiers(cls, v: list[str]) -> list[str]:
        for key in v:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_$]*$", key):
                raise ValueError(f"expected a column name, got {key!r}")
        return v


class MetricsFile(FileModel):
    business_day: BusinessDay = Field(default_factory=BusinessDay)
    totals: list[RecordedTotal]

    @model_validator(mode="after")
    def _references(self) -> MetricsFile:
        names = [t.name for t in self.totals]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"totals: duplicate names {dupes}")
        for i, t in enumerate(self.totals):
            if t.reconcile_with is None:
                continue
            if t.reconcile_with.total not in names:
                raise ValueError(f"totals[{i}] ({t.name}).reconcile_with.total: no total named {t.reconcile_with.total!r}")
            if t.reconcile_with.total == t.name:
                raise ValueError(f"totals[{i}] ({t.name}).reconcile_with.total: a total cannot reconcile with itself")
        return self

    def get(self, name: str) -> RecordedTotal:
        return next(t for t in self.totals if t.name == name)


def load_metrics_file(path: str | Path) -> MetricsFile:
    return load_yaml_model(path, MetricsFile, "metrics file", "DW_METRICS_FILE")
