"""Robust baselines for nightly numbers (detection.md, "what we must do instead", point 2).

Log space, same weekday over the last weeks (or day-over-day changes for slowly moving stocks), the scored
point and earlier flagged days excluded, centre = median, scale = 1.4826 x MAD floored at a fraction of the
level; an anomaly needs |robust z| >= the threshold AND a minimum relative change AND the direction that
hurts. Too little history is its own visible state, never a pass.
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


class BaselineStatus(str, Enum):
    OK = "ok"
    ANOMALY = "anomaly"
    INSUFFICIENT = "insufficient_baseline"


class BaselineResult(BaseModel):
    status: BaselineStatus
    method: BaselineMethod
    value: float
    points: int
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


def score(
    history: Mapping[date, float],
    day: date,
    value: float,
    config: BaselineConfig,
    hurts: Direction = Direction.BOTH,
    excluded_days: Collection[date] = (),
) -> BaselineResult:
    """Scores ``value`` on ``day`` against ``history`` (which may contain ``day``: it is never used)."""
    usable = {d: v for d, v in history.items() if d < day and d not in excluded_days and v is not None}
    if config.method is BaselineMethod.SAME_WEEKDAY:
        days = [day - timedelta(weeks=w) for w in range(1, config.weeks + 1)]
        ref_logs = [_log(usable[d]) for d in days if d in usable]
        target = _log(value)
        level_logs = ref_logs
    else:
        # Changes per day between consecutive usable days: a gap left by an excluded (incident) day is
        # bridged, so the night after an incident is compared with the last good night, not the bad one.
        days = sorted(d for d in usable if (day - d).days <= config.days)
        if not days or (day - days[-1]).days > MAX_BRIDGE_DAYS:
            return BaselineResult(
                status=BaselineStatus.INSUFFICIENT, method=config.method, value=value, points=0
            )
        ref_logs = [
            (_log(usable[b]) - _log(usable[a])) / (b - a).days
            for a, b in zip(days, days[1:], strict=False)
            if (b - a).days <= MAX_BRIDGE_DAYS
        ]
        prev = days[-1]
        gap_days = (day - prev).days
        target = (_log(value) - _log(usable[prev])) / gap_days
        level_logs = [_log(usable[prev])]
    if len(ref_logs) < config.min_points:
        return BaselineResult(
            status=BaselineStatus.INSUFFICIENT, method=config.method, value=value, points=len(ref_logs)
        )
    centre = median(ref_logs)
    mad = median(abs(x - centre) for x in ref_logs)
    scale = max(MAD_TO_SIGMA * mad, config.scale_floor)
    z = (target - centre) / scale
    if config.method is BaselineMethod.SAME_WEEKDAY:
        expected = math.expm1(centre)
    else:
        expected = math.expm1(level_logs[0] + centre * gap_days)
    rel = (value - expected) / expected if expected else (0.0 if value == 0 else math.inf)
    direction: Literal["down", "up", "flat"] = "down" if z < 0 else "up" if z > 0 else "flat"
    hurts_here = hurts is Direction.BOTH or hurts.value == direction
    anomalous = abs(z) >= config.z_threshold and abs(rel) >= config.min_relative_change and hurts_here
    return BaselineResult(
        status=BaselineStatus.ANOMALY if anomalous else BaselineStatus.OK,
        method=config.method,
        value=value,
        points=len(ref_logs),
        expected=expected,
        relative_change=rel,
        robust_z=z,
        direction=direction,
    )
