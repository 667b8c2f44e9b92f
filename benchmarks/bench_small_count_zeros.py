"""A small count's empty business day: how often it is caught, and how many ordinary business days raise an
ERROR, on Poisson counts with quiet weekends (``baseline._empty_is_rare``, docs/watch.md "Small counts"). A
weekday business of a few rows a business day whose weekend trickle empties on some weekends. No servers;
prints figures.

    .venv/bin/python benchmarks/bench_small_count_zeros.py [--seeds 4]
"""

from __future__ import annotations

import argparse
import math
import random
from datetime import date, timedelta

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile

START = date(2025, 9, 1)  # a Monday
CONFIG = BaselineConfig(weeks=6)
CALENDAR = MetricsFile.model_validate({"calendar": {"holidays": []}}).calendar
HISTORY, JUDGED = 70, 30


def _poisson(rng: random.Random, mean: float) -> float:
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return float(k)
        k += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    print(
        "| business day | weekend day | ordinary business days that raise | empty business days caught "
        "| ordinary weekend days that raise |"
    )
    print("|---:|---:|---:|---:|---:|")
    for weekday in (4, 6, 8, 12):
        for weekend in (0.5, 1.0, 2.0):
            raised = caught = nights = quiet = weekends = 0
            for seed in range(args.seeds):
                rng = random.Random(f"{seed}:{weekday}:{weekend}")
                days = [START + timedelta(days=i) for i in range(HISTORY + JUDGED)]
                series = {d: _poisson(rng, weekday if d.weekday() < 5 else weekend) for d in days}
                for d in days[HISTORY:]:
                    past = {k: v for k, v in series.items() if k < d}
                    if d.weekday() >= 5:
                        weekends += 1
                        quiet += (
                            judge(past, d, series[d], CONFIG, Direction.BOTH, calendar=CALENDAR).severity
                            == "ERROR"
                        )
                        continue
                    nights += 1
                    raised += (
                        judge(past, d, series[d], CONFIG, Direction.BOTH, calendar=CALENDAR).severity
                        == "ERROR"
                    )
                    caught += (
                        judge(past, d, 0.0, CONFIG, Direction.BOTH, calendar=CALENDAR).severity == "ERROR"
                    )
            print(
                f"| {weekday} | {weekend} | {raised} of {nights} | {caught} of {nights} | {quiet} of {weekends} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
