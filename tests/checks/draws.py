"""Random draws the simulated histories share."""

from __future__ import annotations

import math
import random

KNUTH_UP_TO = 500.0
"""Knuth's method multiplies uniforms down to exp(-mean), which underflows past about 745."""


def poisson(rng: random.Random, mean: float) -> int:
    """A night's count of independent rows: Knuth's method, or a normal approximation for large means."""
    if mean > KNUTH_UP_TO:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1
