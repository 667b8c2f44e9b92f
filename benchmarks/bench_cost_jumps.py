"""What the cost-jump judgement raises and finds (``dw_dagster/cost/jump.py``, docs/cost.md): the baseline it
uses, week over week, beside the same-weekday median of 8 weeks it replaced, on simulated nightly credits
of a node (71 nights, the last one judged, as the cost job's 70-night lookback gives):

- false jumps per 100 judged nights and how far the expectation is from tonight's trend, on series that
  grow steadily (a node reading a table that accumulates rows), with and without a weekday rhythm;
- the same on the README walkthrough's record: a first run's backfill recorded only up to four weeks back;
- the steps found (tonight x1.5 and x2) on those shapes and on stationary series with a 10% wobble.

No servers; prints figures.

    .venv/bin/python benchmarks/bench_cost_jumps.py [--series 100]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from datetime import date, timedelta
from statistics import median

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod
from dw_dagster.cost.jump import CostJumpConfig, judge_cost

TONIGHT = date(2025, 6, 15)
NIGHTS = 71


def credits(seed: int, growth: float, noise: float, weekend: float) -> dict[date, float]:
    """A node's nightly credits: ``growth`` a night, a weekend level of ``weekend``, log-normal ``noise``."""
    rng = random.Random(seed)
    out = {}
    for i in range(NIGHTS):
        d = TONIGHT - timedelta(days=NIGHTS - 1 - i)
        out[d] = (1 + growth) ** i * (weekend if d.weekday() >= 5 else 1.0) * math.exp(rng.gauss(0, noise))
    return out


SHAPES = {
    # name: (growth a night, noise, weekend level, nights recorded before tonight: None = all)
    "growing 0.9%/night, smooth (walkthrough)": (0.009, 0.0, 1.0, None),
    "growing 2%/night, 3% wobble": (0.02, 0.03, 1.0, None),
    "growing 1.5%/night, weekends 60%, 5% wobble": (0.015, 0.05, 0.6, None),
    "walkthrough record (last 4 weeks missing)": (0.009, 0.0, 1.0, 28),
    "stationary, 10% wobble": (0.0, 0.10, 1.0, None),
    "stationary, weekends 50%, 10% wobble": (0.0, 0.10, 0.5, None),
}
BASELINES = {
    "week over week (now)": CostJumpConfig(),
    "same weekday, 8 weeks (before)": CostJumpConfig(
        baseline=BaselineConfig(
            method=BaselineMethod.SAME_WEEKDAY, small_below=0, min_relative_change=0.25, calendar=False
        )
    ),
}


def judged(series: dict[date, float], missing_days: int | None, tonight: float, config: CostJumpConfig):
    cut = TONIGHT - timedelta(days=missing_days) if missing_days else TONIGHT
    history = {d: v for d, v in series.items() if d < cut}
    return judge_cost(
        "cost:node",
        TONIGHT,
        tonight,
        {"Insert Data": tonight},
        history,
        {d: {"Insert Data": v} for d, v in history.items()},
        config,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=100)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{args.series} series per shape, {NIGHTS} nights each, the last one judged")
    print(f"{'shape':46} {'baseline':32} {'false/100':>9} {'exp. gap':>9} {'x1.5':>6} {'x2':>6}")
    for name, (growth, noise, weekend, missing) in SHAPES.items():
        for label, config in BASELINES.items():
            false = found15 = found2 = 0
            gaps = []
            for seed in range(args.series):
                series = credits(seed, growth, noise, weekend)
                plain = judged(series, missing, series[TONIGHT], config)
                false += plain.is_jump
                trend = (1 + growth) ** (NIGHTS - 1) * (weekend if TONIGHT.weekday() >= 5 else 1.0)
                if plain.judgement.result.expected is not None:
                    gaps.append(plain.judgement.result.expected / trend - 1)
                found15 += judged(series, missing, 1.5 * series[TONIGHT], config).is_jump
                found2 += judged(series, missing, 2 * series[TONIGHT], config).is_jump
            gap = f"{100 * median(gaps):+.0f}%" if gaps else "none"
            print(
                f"{name:46} {label:32} {100 * false / args.series:9.1f} {gap:>9} "
                f"{found15:>3}/{args.series:<2} {found2:>3}/{args.series:<2}"
            )
    print(f"({time.perf_counter() - started:.1f} s; 'exp. gap': the median expectation against the trend)")


if __name__ == "__main__":
    main()
