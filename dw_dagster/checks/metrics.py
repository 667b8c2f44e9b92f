"""The metrics file: the business totals a team records nightly, validated with pydantic.

```yaml
business_day: {timezone: Europe/Paris, cutoff_hour: 6}
totals:
  - name: open_order_amount
    owner: sales-ops
    asset: sales/fct_orders
    sql: |
      SELECT "ACCOUNT_ID", SUM("OPEN_AMOUNT") AS "VALUE"
      FROM {{ ref('SALES', 'FCT_ORDERS') }} GROUP BY 1
    group_keys: [ACCOUNT_ID]
    hurts: down
    baseline: {method: day_over_day}
    reconcile_with: {total: source_open_order_amount, tolerance_pct: 0.1}
```
The SQL returns the group-key columns and one numeric column ``VALUE`` (one row without group keys); it
runs in Snowflake, once per total per night. ``{{ ref('LOC', 'NODE') }}`` resolves to the node's table.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ModelWrapValidatorHandler, PrivateAttr, field_validator, model_validator

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.calendar import BusinessCalendar, timezone_country
from dw_dagster.config import FileModel, load_yaml_model, validate_cron, validate_read_only_sql
from dw_dagster.records.policy import IncidentPolicy

_NAME = r"^[a-z][a-z0-9_]*$"
_KEY = r"^[a-z0-9_\-]+(/[a-z0-9_\-]+)*$"


class BusinessDay(FileModel):
    timezone: str = "UTC"
    cutoff_hour: int = Field(
        default=6,
        ge=0,
        le=23,
        description="A run that starts before this local hour counts for the day before.",
    )

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"expected an IANA time zone such as 'Europe/Paris', got {v!r}") from e
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
    item_key: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_$]*$",
        description="The column naming the items counted in a gap (e.g. LINE_ITEM_ID: '1,260 line items').",
    )
    item_noun: str = Field(
        default="items",
        min_length=1,
        description="What a person calls this total's items, plural: those item_key names, or its groups when"
        " each group is one item (e.g. 'line items', 'accounts'). Messages count items in these words.",
    )
    grain: str = Field(default="daily", pattern="^daily$")
    hurts: Direction = Direction.BOTH
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)
    reconcile_with: Reconciliation | None = None
    cumulative: Literal["auto", "no", "week", "month", "quarter", "year"] = Field(
        default="auto",
        description="A total that grows through a period and starts again at the next (month to date: "
        "month) is judged on its increment; auto: when its history shows it; no: never.",
    )

    @field_validator("sql")
    @classmethod
    def _one_statement(cls, v: str) -> str:
        return validate_read_only_sql(v)

    @field_validator("group_keys")
    @classmethod
    def _identifiers(cls, v: list[str]) -> list[str]:
        for key in v:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_$]*$", key):
                raise ValueError(f"expected a column name, got {key!r}")
        return v


class Bounds(FileModel):
    min: float | None = Field(default=None, ge=0)
    max: float | None = Field(default=None, ge=0)


class VolumeMonitoring(FileModel):
    row_counts: Literal["metadata", "count"] = Field(
        default="metadata",
        description="metadata: Coalesce run results and INFORMATION_SCHEMA.TABLES (no scan of a table; "
        "production), views counted with COUNT(*) as they have no row count there. count: COUNT(*) of every "
        "table, where the metadata cannot be trusted.",
    )
    assets: list[str] = Field(default_factory=list, description="Globs over asset key paths, e.g. 'mart/*'.")
    bounds: dict[str, Bounds] = Field(default_factory=dict, description="Static bounds by asset key path.")
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)


class JobSchedule(FileModel):
    cron: str
    timezone: str = "UTC"
    grace_minutes: int = Field(
        default=60, ge=1, description="How long after the schedule the build may land."
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        return validate_cron(v)


class InputFreshness(FileModel):
    """The table must hold its input's latest load, and that load must be recent when the job runs."""

    asset: str = Field(pattern=_KEY)
    column: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_$]*$")
    input: str = Field(pattern=_KEY)
    input_column: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_$]*$")
    max_input_age_hours: float = Field(
        default=26,
        gt=0,
        description="How old the input's latest load may be when the table is built after a night the input "
        "loads on; 24 h more for each night before the build on which it does not load, as its own loads show "
        "(a feed that loads on business days only; docs/watch.md, 'Input freshness').",
    )
    max_lag_minutes: float = Field(default=0, ge=0, description="How far the table may trail its input.")


class FreshnessMonitoring(FileModel):
    schedules: dict[str, JobSchedule] = Field(
        default_factory=dict,
        description="Coalesce job name -> its Scheduler cron (the API does not expose it).",
    )
    inputs: list[InputFreshness] = Field(default_factory=list)


def _undeclared(country: str, subdivision: str | None) -> list[dict[str, object]]:
    """Holidays nobody wrote in the metrics file explain a dip only: a doubled total on one is still news."""
    import holidays

    if country not in holidays.list_supported_countries():
        return []
    return [{"country": country, "subdivision": subdivision, "direction": "down"}]


class MetricsFile(FileModel):
    business_day: BusinessDay = Field(default_factory=BusinessDay)
    calendar: BusinessCalendar = Field(
        default_factory=BusinessCalendar,
        description="Holidays, period ends and days of the month: calendar nights are compared with nights "
        "like them (docs/watch.md).",
    )
    ops_schema: str = Field(default="DW_OPS", pattern=r"^[A-Za-z_][A-Za-z0-9_$]*$")
    totals: list[RecordedTotal] = Field(default_factory=list)
    volume: VolumeMonitoring = Field(default_factory=VolumeMonitoring)
    freshness: FreshnessMonitoring = Field(default_factory=FreshnessMonitoring)
    incidents: IncidentPolicy = Field(default_factory=IncidentPolicy)
    _holidays_declared: bool = PrivateAttr(default=True)

    @model_validator(mode="wrap")
    @classmethod
    def _default_holidays(cls, data: object, handler: ModelWrapValidatorHandler[MetricsFile]) -> MetricsFile:
        """A calendar that names no holidays takes the public holidays of the business day's country (its
        time zone's, in the tz database), until the context file says where the business is
        (:meth:`with_country`): a team that set none still gets Christmas as a holiday, not as a fault.
        ``holidays: []`` says there are none."""
        declared = True
        if isinstance(data, dict):
            calendar = data.get("calendar") or {}
            day = data.get("business_day") or {}
            if isinstance(calendar, dict) and "holidays" not in calendar and isinstance(day, dict):
                declared = False
                country = timezone_country(str(day.get("timezone", "UTC")))
                if country is not None:
                    data = {**data, "calendar": {**calendar, "holidays": _undeclared(country, None)}}
        metrics = handler(data)
        metrics._holidays_declared = declared
        return metrics

    def with_country(self, country: str | None) -> MetricsFile:
        """The metrics with the public holidays of ``country`` (ISO 3166, 'DE' or 'DE-NW': the context file's)
        where the file names none; the file's own holidays, ``[]`` included, override."""
        if country is None or self._holidays_declared:
            return self
        code, _, subdivision = country.partition("-")
        calendar = BusinessCalendar.model_validate(
            {**self.calendar.model_dump(), "holidays": _undeclared(code, subdivision or None)}
        )
        return self.model_copy(update={"calendar": calendar})

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
                raise ValueError(
                    f"totals[{i}] ({t.name}).reconcile_with.total: no total named {t.reconcile_with.total!r}"
                )
            if t.reconcile_with.total == t.name:
                raise ValueError(
                    f"totals[{i}] ({t.name}).reconcile_with.total: a total cannot reconcile with itself"
                )
        return self

    def get(self, name: str) -> RecordedTotal:
        return next(t for t in self.totals if t.name == name)


def load_metrics_file(path: str | Path) -> MetricsFile:
    return load_yaml_model(path, MetricsFile, "metrics file", "DW_METRICS_FILE")
