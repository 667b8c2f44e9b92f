"""A world written down as data (``world.yaml``): its Coalesce project, context and metrics files, and a
declarative generator for each source table. Validated here; played by ``generic.py``.

```yaml
name: ecommerce
seed: 20250301
timezone: America/New_York
project: project.yaml            # paths relative to this file
context: context.yaml
metrics: metrics.yaml
environment_id: "2"
job_id: "1"
first_business_day: 2025-02-03   # night n applies business day first_business_day + n
night_time: "03:00:00"           # the job's local start, the day after each business day
history_nights: 42               # nights seeded before a scenario's first night
sources:                         # one entry per Source node of the project
  STORE_MAP:
    load: once                   # once (reference data) | append (CDC of new rows) | snapshot (reloaded)
    rows: [{STORE_ID: 1, STORE_NAME: US web, CHANNEL: web, COUNTRY: US}]
  ORDER_LINES:
    load: append
    count: {per_night: 2500, weekend_factor: 0.75, month_end_factor: 1.3, noise_sigma: 0.04}
    columns:
      ORDER_LINE_ID: {sequence: 1}
      STORE_ID: {ref: STORE_MAP.STORE_ID, weights: [5, 3, 2]}
      ORDERED_AT: {business_time: [7, 23]}
      _FIVETRAN_SYNCED: {synced: ORDERED_AT, lag_seconds: [30, 600]}
```
"""

from __future__ import annotations

import functools
import re
from datetime import date, datetime, time
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import Field, model_validator

from dw_dagster.config import FileModel, load_yaml_model

_IDENT = r"^[A-Z_][A-Z0-9_$]*$"
_COLUMN_REF = re.compile(r"^([A-Z_][A-Z0-9_$]*)\.([A-Z_][A-Z0-9_$]*)$")
# The generator keys of a column; exactly one is given.
GENERATORS = (
    "sequence", "value", "choice", "each", "ref", "lookup", "integer", "uniform", "lognormal", "business_time",
    "business_date", "synced", "timestamp", "prefix",
)  # fmt: skip


class Lognormal(FileModel):
    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=3)


class ColumnGenerator(FileModel):
    """How one column's values are drawn; every draw comes from the world's seed, the table and the night."""

    sequence: int | None = Field(default=None, description="First id; ids never repeat across nights.")
    rows_per_value: float = Field(
        default=1, ge=1, description="With sequence: rows sharing one id (lines per order)."
    )
    value: Any = Field(default=None, description="A constant.")
    choice: list[Any] | None = Field(default=None, min_length=1)
    each: list[Any] | None = Field(
        default=None, min_length=1, description="Row i takes value i, cyclically (one row per currency)."
    )
    ref: str | None = Field(default=None, description="TABLE.COLUMN: a value of another source table's rows.")
    weights: list[float] | None = Field(default=None, description="With choice or ref: relative weights.")
    lookup: str | None = Field(
        default=None, description="TABLE.COLUMN of the row whose key equals column `by`."
    )
    by: str | None = Field(default=None, pattern=_IDENT)
    integer: tuple[int, int] | None = Field(default=None, description="[low, high], inclusive.")
    uniform: tuple[float, float] | None = None
    lognormal: Lognormal | None = None
    decimals: int | None = Field(default=None, ge=0, le=6, description="Round uniform or lognormal draws.")
    business_time: tuple[int, int] | None = Field(
        default=None, description="[from hour, to hour): local wall time on the business day."
    )
    business_date: Literal[True] | None = Field(default=None, description="The business day (a DATE).")
    synced: str | None = Field(
        default=None,
        pattern=_IDENT,
        description="A business_time column: its UTC time plus a replication lag.",
    )
    lag_seconds: tuple[float, float] = (2, 90)
    timestamp: datetime | None = None
    prefix: str | None = Field(default=None, description="Text: this prefix then column `of`'s value.")
    of: str | None = Field(default=None, pattern=_IDENT)

    @model_validator(mode="after")
    def _one_generator(self) -> ColumnGenerator:
        given = [g for g in GENERATORS if getattr(self, g) is not None]
        if len(given) != 1:
            raise ValueError(f"expected exactly one of {', '.join(GENERATORS)}; got {given or 'none'}")
        kind = given[0]
        needs = {"lookup": "by", "prefix": "of"}
        if kind in needs and getattr(self, needs[kind]) is None:
            raise ValueError(f"{needs[kind]}: {kind} needs it")
        for field in ("ref", "lookup"):
            value = getattr(self, field)
            if value is not None and not _COLUMN_REF.match(value):
                raise ValueError(f"{field}: expected TABLE.COLUMN in upper case, got {value!r}")
        if self.weights is not None and kind not in ("choice", "ref"):
            raise ValueError("weights: only with choice or ref")
        if self.weights is not None and (min(self.weights, default=0) < 0 or sum(self.weights) <= 0):
            raise ValueError(
                f"weights: expected non-negative numbers with a positive sum, got {self.weights}"
            )
        if self.weights is not None and kind == "choice" and len(self.weights) != len(self.choice or []):
            raise ValueError(f"weights: {len(self.weights)} weights for {len(self.choice or [])} choices")
        for field in ("integer", "uniform", "business_time", "lag_seconds"):
            pair = getattr(self, field)
            if pair is not None and pair[1] < pair[0]:
                raise ValueError(f"{field}: [{pair[0]}, {pair[1]}] is not [low, high]")
        if self.business_time is not None and not (
            0 <= self.business_time[0] and self.business_time[1] <= 24
        ):
            raise ValueError("business_time: hours between 0 and 24")
        return self

    @property
    def kind(self) -> str:
        return next(g for g in GENERATORS if getattr(self, g) is not None)

    def ref_parts(self) -> tuple[str, str]:
        m = _COLUMN_REF.match(self.ref or self.lookup or "")
        assert m is not None
        return m[1], m[2]


class RowCount(FileModel):
    per_night: int = Field(gt=0, description="Rows on an ordinary weekday.")
    weekend_factor: float = Field(default=1.0, gt=0)
    month_end_factor: float = Field(default=1.0, gt=0)
    month_end_days: int = Field(default=2, ge=0, le=10)
    month_end_on: Literal["calendar", "business"] = Field(
        default="calendar",
        description="calendar: the month's last month_end_days days; business: its last month_end_days business"
        " days (weekdays not the world's holidays), as a stock-take on the last working day.",
    )
    quarter_end_factor: float = Field(
        default=1.0, gt=0, description="On the month-end days of March, June, September and December, on top."
    )
    holiday_factor: float = Field(default=1.0, gt=0, description="On the world's holidays (`holidays`).")
    noise_sigma: float = Field(default=0.0, ge=0, le=1, description="Lognormal noise of the night's count.")


class Refresh(FileModel):
    """A reference table a connector re-syncs every night: its rows as they stand, ``column`` stamped with
    the sync time (UTC), so its freshness can be watched and a sync that did not run shows."""

    column: str = Field(pattern=_IDENT)
    at: time = Field(description="Local wall time of the sync on the business day.")


class Holidays(FileModel):
    """The days the world's business dips on: a country's (and subdivision's) public holidays through the
    ``holidays`` package, and explicit dates (a company shutdown)."""

    country: str | None = Field(default=None, description="ISO 3166 code, e.g. US or GB.")
    subdivision: str | None = Field(default=None, description="e.g. NY, or ENG for England.")
    dates: list[date] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known(self) -> Holidays:
        if self.country is None and self.subdivision is not None:
            raise ValueError("subdivision: needs country")
        if self.country is not None:
            self.of_year(2025)  # an unknown country or subdivision fails here, at load
        return self

    def of_year(self, year: int) -> set[date]:
        days = {d for d in self.dates if d.year == year}
        if self.country is None:
            return days
        return days | _public_holidays(self.country, self.subdivision, year)


@functools.lru_cache(maxsize=64)
def _public_holidays(country: str, subdivision: str | None, year: int) -> frozenset[date]:
    import holidays

    try:
        return frozenset(holidays.country_holidays(country, subdiv=subdivision, years=year))
    except NotImplementedError:
        raise ValueError(f"country: the holidays package has no country {country!r}") from None
    except ValueError as e:  # an unknown subdivision
        raise ValueError(f"subdivision: {e}") from None


class SourceTable(FileModel):
    load: Literal["once", "append", "snapshot"] = Field(
        description="once: loaded at install (reference data); append: each night's new rows added (CDC); "
        "snapshot: the table reloaded with the night's rows."
    )
    rows: list[dict[str, Any]] | None = Field(default=None, description="Literal rows (load: once).")
    count: RowCount | Annotated[int, Field(gt=0)] | None = Field(
        default=None, description="Generated rows: a number, or per night."
    )
    columns: dict[str, ColumnGenerator] = Field(default_factory=dict)
    refresh: Refresh | None = Field(
        default=None, description="load: once only: a nightly sync re-stamps the table (its freshness)."
    )

    @model_validator(mode="after")
    def _rows_or_generated(self) -> SourceTable:
        if self.refresh is not None and self.load != "once":
            raise ValueError(
                "refresh: only a load: once table is re-synced as it stands; append and snapshot "
                "tables get new rows each night"
            )
        if self.rows is not None:
            if self.load != "once":
                raise ValueError("rows: literal rows are for load: once")
            if self.count is not None or self.columns:
                raise ValueError("rows: give literal rows, or count and columns, not both")
        elif self.count is None or not self.columns:
            raise ValueError("count: a generated table needs count and columns")
        elif self.load == "once" and not isinstance(self.count, int):
            raise ValueError(
                "count: a generated load: once table is generated once: expected a number of rows"
            )
        return self

    def once_rows(self) -> int:
        """How many rows a load: once table holds (literal or generated)."""
        return len(self.rows) if self.rows is not None else int(self.count)  # type: ignore[arg-type]

    def row_count(self) -> RowCount:
        assert self.count is not None
        return self.count if isinstance(self.count, RowCount) else RowCount(per_night=self.count)


class WorldFile(FileModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_\-]*$")
    description: str = ""
    seed: int
    timezone: ZoneInfo
    project: Path
    context: Path
    metrics: Path
    environment_id: str = Field(pattern=r"^\d+$")
    job_id: str = Field(pattern=r"^\d+$")
    first_business_day: date
    night_time: time
    history_nights: int = Field(ge=1, le=400)
    holidays: Holidays = Field(default_factory=Holidays)
    sources: dict[str, SourceTable] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> WorldFile:
        for name, table in self.sources.items():
            if not re.match(_IDENT, name):
                raise ValueError(f"sources.{name}: expected an upper-case Source node name")
            for column, gen in table.columns.items():
                where = f"sources.{name}.columns.{column}"
                if gen.kind in ("ref", "lookup"):
                    other, other_column = gen.ref_parts()
                    target = self.sources.get(other)
                    if target is None or target.load != "once":
                        raise ValueError(f"{where}.{gen.kind}: {other} is not a source with load: once")
                    known = target.columns.keys() if target.rows is None else set().union(*target.rows)
                    if other_column not in known or (gen.kind == "lookup" and gen.by not in known):
                        raise ValueError(
                            f"{where}.{gen.kind}: {other} has no column {other_column} (or {gen.by})"
                        )
                    if gen.weights is not None and len(gen.weights) != target.once_rows():
                        raise ValueError(
                            f"{where}.weights: expected one weight per row of {other} ({target.once_rows()}), "
                            f"got {len(gen.weights)}"
                        )
                for dep in (gen.by, gen.of, gen.synced):
                    if dep is not None and dep not in table.columns:
                        raise ValueError(f"{where}: column {dep} is not a column of {name}")
                if gen.synced is not None and table.columns[gen.synced].kind != "business_time":
                    raise ValueError(f"{where}.synced: {gen.synced} is not a business_time column")
            if table.refresh is not None:
                known = table.columns.keys() if table.rows is None else set().union(*table.rows)
                if table.refresh.column not in known:
                    raise ValueError(
                        f"sources.{name}.refresh.column: {name} has no column {table.refresh.column}"
                    )
        return self


def load_world_file(path: Path) -> WorldFile:
    """Reads and validates a world file; relative paths in it are made relative to the file."""
    path = Path(path).resolve()
    world = load_yaml_model(path, WorldFile, "world file", "world in the scenario file")
    return world.model_copy(
        update={k: (path.parent / getattr(world, k)).resolve() for k in ("project", "context", "metrics")}
    )
