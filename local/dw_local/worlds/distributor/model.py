"""The distributor world's data file (``world.yaml``), validated.

Every number the reference night must reproduce is a field here; the generator designs the data so the
numbers fall out of the Coalesce project's SQL.
"""

from __future__ import annotations

from datetime import date, time
from pathlib import Path
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pydantic
import yaml
from pydantic import Field, field_validator, model_validator

from dw_dagster.config import DwConfigError, FileModel, describe_validation_error
from dw_local.scenarios.world_file import Holidays

Pct = Annotated[float, Field(ge=-100, le=100)]


class Org(FileModel):
    id: int = Field(gt=0)
    code: str = Field(min_length=1)
    name: str = Field(min_length=1)
    region: str = Field(min_length=1)
    # This org's share of the network's stock and demand (normalised over the orgs).
    share: float = Field(gt=0)


class Range(FileModel):
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self


class Demand(FileModel):
    # Network average daily units per SKU: lognormal around this median.
    median_daily_units: float = Field(gt=0)
    sigma_log: float = Field(ge=0, le=2)
    # Slow movers would make days of supply jumpy around the reorder threshold.
    min_daily_units: float = Field(gt=0)
    weekend_factor: float = Field(gt=0)
    month_end_factor: float = Field(gt=0)
    month_end_days: int = Field(ge=0, le=10)
    # On the world's holidays (WorldSpec.holidays): most customers are closed.
    holiday_factor: float = Field(default=1.0, gt=0)
    # Lognormal noise of one org's shipments of one SKU on one day.
    noise_sigma: float = Field(ge=0, le=1)
    # Order lines replicated before the first night, so the trailing 28 days are full from night one.
    history_days: int = Field(ge=28)


class Stock(FileModel):
    network_onhand_units: int = Field(gt=0)
    # Day-over-day change of the network total: mean-reverting toward the level, with benign noise.
    daily_change_sigma_pct: float = Field(ge=0, le=5)
    reversion: float = Field(ge=0, le=1)
    # Part of the (org, SKU) positions also holding a static reserve in a second subinventory.
    bulk_subinventory_share: float = Field(ge=0, le=1)
    bulk_fraction: float = Field(ge=0, lt=1)


class Reorder(FileModel):
    # Must equal the threshold in MART_REORDER_CANDIDATES (project.yaml); a test checks they agree.
    threshold_days: float = Field(gt=0)
    normal_night_count: int = Field(ge=0)
    low_days_of_supply: Range
    healthy_days_of_supply: Range


class NewOrg(FileModel):
    id: int = Field(gt=0)
    code: str
    name: str
    region: str


class ReferenceNight(FileModel):
    new_org: NewOrg
    from_org: int
    transfer_units: int = Field(gt=0)
    transfer_skus: int = Field(gt=0)
    opened_at: time
    replicated_at: time
    # When planning ops adds the new org to the region map (the morning after), if asked to.
    map_fixed_at: time
    # The replicated EBS total's change that business day: receipts outrun shipments a little.
    ebs_change_pct: Pct
    newly_flagged_skus: int = Field(ge=0)
    # Days of supply of the newly flagged SKUs before and after losing their transferred units.
    flagged_days_before: Range
    flagged_days_after: Range
    # The newly flagged SKUs are slow movers stocked mostly at from_org: their transfers can then be
    # large against their network stock while leaving units for the other transferred SKUs.
    flagged_daily_units: Range
    flagged_from_org_share: float = Field(gt=0, lt=1)
    # The other transferred SKUs give up at most this share of their network stock.
    max_transfer_share: float = Field(gt=0, lt=1)


class WorldSpec(FileModel):
    seed: int
    timezone: str
    # The Coalesce environment and job the nights run (project.yaml); the database is the environment's.
    environment_id: str
    job_id: str
    # The first business day the nights play; night n applies business day first_business_day + n.
    first_business_day: date
    # The nightly job's local start time, the day after each business day.
    night_time: time
    sku_count: int = Field(gt=0)
    first_item_id: int = Field(gt=0)
    orgs: list[Org] = Field(min_length=1)
    demand: Demand
    stock: Stock
    reorder: Reorder
    reference_night: ReferenceNight
    holidays: Holidays = Field(default_factory=Holidays)

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown IANA time zone {value!r}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> WorldSpec:
        ids = [o.id for o in self.orgs]
        codes = [o.code for o in self.orgs]
        if len(set(ids)) != len(ids) or len(set(codes)) != len(codes):
            raise ValueError("orgs: ids and codes must be unique")
        ref = self.reference_night
        if ref.from_org not in ids:
            raise ValueError(f"reference_night.from_org: {ref.from_org} is not an org of orgs")
        if ref.new_org.id in ids or ref.new_org.code in codes:
            raise ValueError(f"reference_night.new_org: {ref.new_org.code} ({ref.new_org.id}) already exists")
        if ref.newly_flagged_skus > ref.transfer_skus:
            raise ValueError("reference_night.newly_flagged_skus: more than transfer_skus")
        if ref.transfer_skus + self.reorder.normal_night_count > self.sku_count:
            raise ValueError("sku_count: too few SKUs for transfer_skus plus reorder.normal_night_count")
        if ref.replicated_at < ref.opened_at:
            raise ValueError("reference_night.replicated_at: before opened_at")
        t = self.reorder.threshold_days
        checks = {
            "reorder.low_days_of_supply": self.reorder.low_days_of_supply.high < t,
            "reorder.healthy_days_of_supply": self.reorder.healthy_days_of_supply.low > t,
            "reference_night.flagged_days_before": ref.flagged_days_before.low > t,
            "reference_night.flagged_days_after": ref.flagged_days_after.high < t,
        }
        for field, ok in checks.items():
            if not ok:
                raise ValueError(f"{field}: must lie on its side of reorder.threshold_days ({t})")
        return self


def load_spec(path: Path) -> WorldSpec:
    """Reads and validates a world file; errors name the file and the field."""
    path = Path(path)
    try:
        # libyaml's parser: a tenth of the pure-Python one's CPU (worlds are made again and again).
        raw = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
    except (OSError, yaml.YAMLError) as e:
        raise DwConfigError(f"{path}: cannot read the world file: {e}") from e
    try:
        return WorldSpec.model_validate(raw)
    except pydantic.ValidationError as e:
        raise DwConfigError(describe_validation_error(path, e)) from None
