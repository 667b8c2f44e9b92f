"""Whether a calendar night's departure was its own: the one test that a past like night (``judge.py``) and a
learned kind's occurrence (``recurring.py``) must both pass.

A night measured against the ordinary nights before it departs from them for two reasons: its kind moved it
(a holiday, a month-end's run), or the expectation was behind the series at the time (a snapshot still
filling its retention window, a business still climbing to its level). The second moves the ordinary nights
beside it too, and alike; the first does not.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from datetime import date, timedelta
from statistics import median

NEIGHBOURS = 3
"""The days either side of a night whose ordinary nights say whether its departure was its own."""


def stands_out(
    night: date, effect: float, ordinary: Container[date], departure: Callable[[date], float | None]
) -> bool:
    """Night ``night``'s ``effect`` is its own unless the ``ordinary`` nights within :data:`NEIGHBOURS` days
    of it departed alike (``departure``: an ordinary night's, measured as ``effect`` was): their median the
    same way and at least half as far. Where none of them can be measured, nothing says otherwise."""
    beside = [
        e
        for step in range(1, NEIGHBOURS + 1)
        for k in (night - timedelta(days=step), night + timedelta(days=step))
        if k in ordinary and (e := departure(k)) is not None
    ]
    if not beside:
        return True
    drift = median(beside)
    return not (drift * effect > 0 and abs(drift) >= abs(effect) / 2)
