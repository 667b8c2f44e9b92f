"""The Elementary-default baseline, scored on the same recorded series as dw-dagster in the same run.

Elementary's defaults (detection.md): plain z-score ``(value - mean) / stddev_samp`` over a 14-day training
window, sensitivity 3, both directions, no seasonality, and the scored value inside its own window. It is
applied to what the checks recorded tonight in ``METRIC_HISTORY``: each recorded total (Elementary's opt-in
``column_anomalies`` sum) and each monitored table's row count (the series ``volume:<asset>``;
``volume_anomalies``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from statistics import mean, stdev
from typing import Any

from dw_dagster.checks.history import volume_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.warehouse.ops import OpsSchema

TRAINING_DAYS = 14
SENSITIVITY = 3.0


@dataclass(frozen=True)
class BaselineAlarm:
    series: str  # "total:<name>" or "volume:<asset>"
    asset: str
    value: float
    mean: float
    stddev: float
    z: float
    recorded_at: datetime


def z_score(values: list[float], value: float) -> tuple[float, float, float] | None:
    """(mean, stddev_samp, z) with the scored value inside its own window, as Elementary computes it."""
    window = [*values, value]
    if len(window) < 2:
        return None
    centre, spread = mean(window), stdev(window)
    return centre, spread, (0.0 if spread == 0 else (value - centre) / spread)


def _series(
    cur: Any, sql: str, day: date, keys: Iterable[str]
) -> dict[str, dict[date, tuple[float, datetime]]]:
    keys = list(keys)
    if not keys:
        return {}
    cur.execute(
        sql.format(marks=", ".join(["%s"] * len(keys))), (*keys, day - timedelta(days=TRAINING_DAYS - 1), day)
    )
    out: dict[str, dict[date, tuple[float, datetime]]] = {}
    for key, d, value, at in cur.fetchall():
        if value is not None:
            out.setdefault(key, {})[d.date() if isinstance(d, datetime) else d] = (float(value), at)
    return out


def elementary_alarms(
    cur: Any, ops: OpsSchema, metrics: MetricsFile, volume_assets: Iterable[str], day: date
) -> list[BaselineAlarm]:
    """The series that score |z| > 3 on ``day`` (series with no value recorded that day are not scored)."""
    volumes = {volume_series(a): a for a in volume_assets}
    series = _series(
        cur,
        f"SELECT METRIC, BUSINESS_DATE, VALUE, RECORDED_AT FROM {ops.table('METRIC_HISTORY')}"
        " WHERE METRIC IN ({marks}) AND BUSINESS_DATE BETWEEN %s AND %s",
        day,
        [*(t.name for t in metrics.totals), *volumes],
    )
    assets = {t.name: t.asset for t in metrics.totals}
    alarms = []
    for key, points in series.items():
        if day not in points:
            continue
        value, recorded_at = points[day]
        scored = z_score([v for d, (v, _) in points.items() if d != day], value)
        if scored is not None and abs(scored[2]) > SENSITIVITY:
            name, asset = (key, volumes[key]) if key in volumes else (f"total:{key}", assets[key])
            alarms.append(BaselineAlarm(name, asset, value, *scored, recorded_at=recorded_at))
    return alarms
