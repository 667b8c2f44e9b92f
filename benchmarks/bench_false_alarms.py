"""False alarms per 100 ordinary nights, and the drops found, with thresholds calibrated on each series' own
one-step errors (``dw_dagster/checks/baseline.py``, docs/watch.md) beside the fixed robust z of 4, on
simulated series of three shapes: a shop's revenue with Gaussian noise, the same with Student-t noise (3
degrees of freedom: heavy tails), an on-hand stock judged day over day. No servers; prints figures.

    .venv/bin/python benchmarks/bench_false_alarms.py [--series 30] [--rate 0.005]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from datetime import date, timedelta

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod, Direction, score
from dw_dagster.checks.judge import judge

START = date(2025, 1, 6)


def _noise(rng: random.Random, dof: int | None) -> float:
    z = rng.gauss(0, 1)
    return z if dof is None else z / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(dof)) / dof)


def shop(seed: int, dof: int | None, nights: int = 100) -> dict[date, float]:
    rng = random.Random(seed)
    return {
        START + timedelta(days=k): 10_000
        * (0.7 if (START + timedelta(days=k)).weekday() >= 5 else 1.0)
        * math.exp(0.08 * _noise(rng, dof))
        for k in range(nights)
    }


def stock(seed: int, dof: int | None, nights: int = 100) -> dict[date, float]:
    rng, value, out = random.Random(seed), 2_000_000.0, {}
    for k in range(nights):
        value *= math.exp(0.004 * _noise(rng, dof))
        out[START + timedelta(days=k)] = value
    return out


SHAPES = {
    "shop revenue, Gaussian": (lambda s: shop(s, None), BaselineConfig(weeks=8), 0.4),
    "shop revenue, Student-t 3": (lambda s: shop(s, 3), BaselineConfig(weeks=8), 0.4),
    "stock day over day, Student-t 3": (
        lambda s: stock(s, 3),
        BaselineConfig(method=BaselineMethod.DAY_OVER_DAY),
        0.05,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=30)
    parser.add_argument("--rate", type=float, default=0.005)
    args = parser.parse_args()
    print(f"{args.series} series per shape, nights 43-100 judged; false_alarm_rate {args.rate}")
    print(
        "| shape | false alarms / 100 nights: calibrated | fixed z 4 | drop found: calibrated | fixed z 4 |"
    )
    print("|---|---:|---:|---:|---:|")
    started = time.perf_counter()
    for name, (make, config, drop) in SHAPES.items():
        config = config.model_copy(update={"false_alarm_rate": args.rate})
        alarms = {"calibrated": 0, "fixed": 0}
        found = {"calibrated": 0, "fixed": 0}
        nights = faults = 0
        for seed in range(args.series):
            series = make(seed)
            days = sorted(series)
            for day in days[42:]:
                past = {d: v for d, v in series.items() if d < day}
                nights += 1
                alarms["calibrated"] += judge(past, day, series[day], config).severity == "ERROR"
                alarms["fixed"] += score(past, day, series[day], config).is_anomaly
            for day in days[60::7]:
                past = {d: v for d, v in series.items() if d < day}
                faults += 1
                bad = series[day] * (1 - drop)
                found["calibrated"] += judge(past, day, bad, config, Direction.DOWN).severity == "ERROR"
                found["fixed"] += score(past, day, bad, config, Direction.DOWN).is_anomaly
        print(
            f"| {name} | {100 * alarms['calibrated'] / nights:.2f} | {100 * alarms['fixed'] / nights:.2f} "
            f"| -{100 * drop:.0f}%: {found['calibrated']}/{faults} | {found['fixed']}/{faults} |"
        )
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
