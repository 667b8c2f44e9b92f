"""A subset's per-row average moved by a factor only beyond its own rows' sampling noise: a few dozen
heavy-tailed payments average x1.5 apart from night to night by chance, which is no unit change; a factor of
0.25 on as many, or on a few dozen light-tailed prices, is one."""

from __future__ import annotations

import random

from dw_dagster.incidents.drilldown import MOVED, _log, _ratio, beyond_noise


def _cell(values: list[float]) -> tuple[float, float, int]:
    return sum(values), sum(v * v for v in values), len(values)


def _moved(before: list[float], tonight: list[float]) -> bool:
    b, t = _cell(before), _cell(tonight)
    r = _ratio(t[0], t[2], b[0], b[2])
    return r is not None and _log(r) >= MOVED and beyond_noise(r, b, t)


def test_heavy_tailed_subsets_move_by_chance_and_a_unit_change_beyond_it():
    rng = random.Random(11)

    def payments(n: int) -> list[float]:  # the median bill $110, one in a hundred over $2,800
        return [110 * rng.lognormvariate(0, 1.4) for _ in range(n)]

    chance = scaled = big = 0
    for _ in range(300):
        before, tonight = (
            payments(4 * 45),
            payments(45),
        )  # four good nights of a small payee code, and tonight
        b, t = _cell(before), _cell(tonight)
        r = _ratio(t[0], t[2], b[0], b[2])
        big += _log(r) >= MOVED  # what the x1.5 rule alone called a unit change
        chance += _moved(before, tonight)
        scaled += _moved(payments(4 * 84), [0.25 * v for v in payments(84)])
    assert big >= 30, big
    assert chance <= 3, chance
    assert scaled >= 270, scaled


def test_light_tailed_prices_at_a_quarter_are_a_unit_change():
    rng = random.Random(5)
    prices = [rng.uniform(8, 60) for _ in range(120)]
    assert _moved(prices, [0.25 * rng.uniform(8, 60) for _ in range(30)])
    assert not _moved(prices, [rng.uniform(8, 60) for _ in range(30)])
