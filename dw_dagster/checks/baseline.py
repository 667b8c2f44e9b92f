"""Robust baselines for nightly numbers (detection.md, "what we must do instead", point 2).

Log space, same weekday over the last weeks (or day-over-day changes for slowly moving levels), the scored
point and earlier flagged days excluded, centre = median, scale = 1.4826 x MAD floored at a fraction of the
level; an anomaly needs |robust z| >= the threshold AND a minimum relative change AND the direction that
hurts. Too little history is its own visible state, never a pass.

Small counts (a usual level below ``small_below``) are judged on the absolute change instead, in rows or
units, with the scale floored at the Poisson spread sqrt(level) and at ``small_scale_floor``: one row more
in a table of six is +1 against a spread of about 2.4, not a robust z of 100.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from datetime import date, timedelta
from enum import Enum
from statistics import median
from typing import Literal

from pydantic import BaseModel, Field

MAD_TO_SIGMA = 1.4826
MAX_BRIDGE_DAYS = 7


class Direction(str, Enum):
    DOWN = "down"
    UP = "up"
    BOTH = "both"


class BaselineMethod(str, Enum):
    SAME_WEEKDAY = "same_weekday"
    DAY_OVER_DAY = "day_over_day"


class BaselineConfig(BaseModel):
    method: BaselineMethod = BaselineMethod.SAME_WEEKDAY
    weeks: int = Field(default=8, ge=2, le=52, description="Same-weekday lookback, in weeks.")
    days: int = Field(default=28, ge=5, le=365, description="Day-over-day lookback, in days.")
    min_points: int = Field(default=4, ge=3, description="Fewer points give 'insufficient baseline'.")
    z_threshold: float = Field(default=4.0, gt=0)
    min_relative_change: float = Field(
        default=0.005, ge=0, description="An anomaly must also move at least this fraction (0.005 = 0.5%)."
    )
    scale_floor: float = Field(
        default=0.001,
        gt=0,
        description="Floor of the robust scale, in log units (~ fraction of the level), so that a very "
        "stable series does not alarm on trivial changes.",
    )
    small_below: float = Field(
        default=100,
        ge=0,
        description="A series whose usual level is below this (rows or units) is judged on absolute change; "
        "0 turns it off.",
    )
    small_scale_floor: float = Field(
        default=1.0,
        gt=0,
        description="Floor of the scale of a small count, in its units (besides sqrt of the level).",
    )
    calendar: bool = Field(
        default=True, description="Compare calendar days (the metrics file's calendar) with days like them."
    )


class BaselineStatus(str, Enum):
    OK = "ok"
    ANOMALY = "anomaly"
    INSUFFICIENT = "insufficient_baseline"


class BaselineResult(BaseModel):
    status: BaselineStatus
    method: BaselineMethod
    value: float
    points: int
    absolute: bool = False
    """Judged on absolute change (a small count), not in log space."""
    centre: float | None = None
    """The reference centre, in the space judged (log units, or units for a small count)."""
    scale: float | None = None
    expected: float | None = None
    """The baseline's expectation for the scored day, in the value's units."""
    relative_change: float | None = None
    """(value - expected) / expected."""
    robust_z: float | None = None
    direction: Literal["down", "up", "flat"] | None = None

    @property
    def is_anomaly(self) -> bool:
        return self.status is BaselineStatus.ANOMALY


def _log(v: float) -> float:
    # log1p keeps zero counts scorable (an empty table is the loudest anomaly of all).
    return math.log1p(max(v, 0.0))


def _identity(v: float) -> float:
    return v


def is_small(history: Mapping[date, float], day: date, value: float, config: BaselineConfig) -> bool:
    """Whether the series' usual level (the median of its last 28 nights before ``day``) is a small count."""
    recent = [v for d, v in history.items() if d < day and (day - d).days <= 28 and v is not None]
    return bool(config.small_below) and bool(recent) and median(recent) < config.small_below


def transform(absolute: bool):
    return _identity if absolute else _log


def untransform(absolute: bool):
    return _identity if absolute else math.expm1


def score(
    history: Mapping[date, float],
    day: date,
    value: float,
    config: BaselineConfig,
    hurts: Direction = Direction.BOTH,
    excluded_days: Collection[date] = (),
    *,
    absolute: bool | None = None,
    offset: float = 0.0,
    scale_factor: float = 1.0,
) -> BaselineResult:
    """Scores ``value`` on ``day`` against ``history`` (which may contain ``day``: it is never used).

    ``absolute``: judge on absolute change (None: when the series is a small count). ``offset`` moves the
    expected level (in the space judged: log units, or units of a small count; a calendar day's effect),
    ``scale_factor`` widens the scale.
    """
    usable = {d: v for d, v in history.items() if d < day and d not in excluded_days and v is not None}
    if absolute is None:
        absolute = is_small(usable, day, value, config)
    f = transform(absolute)
    if config.method is BaselineMethod.SAME_WEEKDAY:
        days = [day - timedelta(weeks=w) for w in range(1, config.weeks + 1)]
        refs = [f(usable[d]) for d in days if d in usable]
        target = f(value)
        level = median(usable[d] for d in days if d in usable) if refs else 0.0
    else:
        # Changes per day between consecutive usable days: a gap left by an excluded (incident) day is
        # bridged, so the night after an incident is compared with the last good night, not the bad one.
        days = sorted(d for d in usable if (day - d).days <= config.days)
        if not days or (day - days[-1]).days > MAX_BRIDGE_DAYS:
            return BaselineResult(
                status=BaselineStatus.INSUFFICIENT,
                method=config.method,
                value=value,
                points=0,
                absolute=absolute,
            )
        refs = [
            (f(usable[b]) - f(usable[a])) / (b - a).days
            for a, b in zip(days, days[1:], strict=False)
            if (b - a).days <= MAX_BRIDGE_DAYS
        ]
        prev = days[-1]
        gap_days = (day - prev).days
        target = (f(value) - f(usable[prev])) / gap_days
        level = usable[prev]
    if len(refs) < config.min_points:
        return BaselineResult(
            status=BaselineStatus.INSUFFICIENT,
            method=config.method,
            value=value,
            points=len(refs),
            absolute=absolute,
        )
    # The offset is on the level; a day-over-day centre is a change per day.
    centre = median(refs) + (offset if config.method is BaselineMethod.SAME_WEEKDAY else offset / gap_days)
    mad = median(abs(x - median(refs)) for x in refs)
    floor = max(config.small_scale_floor, math.sqrt(max(level, 0.0))) if absolute else config.scale_floor
    scale = max(MAD_TO_SIGMA * mad, floor) * scale_factor
    z = (target - centre) / scale
    if config.method is BaselineMethod.SAME_WEEKDAY:
        expected = untransform(absolute)(centre)
    else:
        expected = untransform(absolute)(f(usable[prev]) + centre * gap_days)
    rel = (value - expected) / expected if expected else (0.0 if value == 0 else math.inf)
    direction: Literal["down", "up", "flat"] = "down" if z < 0 else "up" if z > 0 else "flat"
    hurts_here = hurts is Direction.BOTH or hurts.value == direction
    # An empty table or a zero total where the usual level is not zero is an anomaly whatever the spread.
    emptied = absolute and value <= 0 < expected
    anomalous = (
        (abs(z) >= config.z_threshold or emptied) and abs(rel) >= config.min_relative_change and hurts_here
    )
    return BaselineResult(
        status=BaselineStatus.ANOMALY if anomalous else BaselineStatus.OK,
        method=config.method,
        value=value,
        points=len(refs),
        absolute=absolute,
        centre=centre,
        scale=scale,
        expected=expected,
        relative_change=rel,
        robust_z=z,
        direction=direction,
    )
