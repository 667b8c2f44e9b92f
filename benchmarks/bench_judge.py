"""One series' judgement (``checks/judge.py``) on histories of growing length, with the recurring days it
learns (``checks/recurring.py``: every night of the history measured against the nights before it): the
seconds each judgement takes. A month-end run of x2 on a business of weekday noise, judged on an ordinary
night. No servers; prints figures. Compare two revisions by running it from each checkout:

    .venv/bin/python benchmarks/bench_judge.py [--nights 60 120 240 400] [--repeat 3]
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/bench_judge.py
"""

from __future__ import annotations

import argparse
import calendar
import math
import random
import time
from datetime import date, timedelta

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import MetricsFile

CALENDAR = MetricsFile.model_validate({"calendar": {"holidays": []}}).calendar
TONIGHT = date(2026, 11, 18)  # a Wednesday, no month's end


def _series(nights: int, seed: int) -> dict[date, float]:
    rng = random.Random(seed)
    out = {}
    for n in range(nights, 0, -1):
        d = TONIGHT - timedelta(days=n)
        last = calendar.monthrange(d.year, d.month)[1]
        level = 1000.0 * (0.3 if d.weekday() >= 5 else 1.0) * (2.0 if d.day == last else 1.0)
        out[d] = level * math.exp(rng.gauss(0, 0.08))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nights", type=int, nargs="+", default=[60, 120, 240, 400])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| method | nights of history | seconds a judgement (best of repeats) |")
    print("|---|---|---|")
    for method in (BaselineMethod.SAME_WEEKDAY, BaselineMethod.DAY_OVER_DAY):
        config = BaselineConfig(method=method, weeks=6)
        for nights in args.nights:
            history = _series(nights, nights)
            best = math.inf
            for _ in range(args.repeat):
                start = time.perf_counter()
                judge(history, TONIGHT, 1010.0, config, calendar=CALENDAR)
                best = min(best, time.perf_counter() - start)
            print(f"| {method.value} | {nights} | {best:.3f} |")


if __name__ == "__main__":
    main()
