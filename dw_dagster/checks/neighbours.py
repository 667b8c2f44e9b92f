"""Whether a calendar night's departure was its own, and how much of it: the one measure that a past like
night (``judge.py``) and a learned kind's occurrence (``recurring.py``) both take.

A night measured against the ordinary nights before it departs from them for two reasons: its kind moved it
(a holiday, a month-end's run), or the expectation was behind the series at the time (a snapshot still
filling its retention window, a business still climbing to its level). The second moves the ordinary nights
beside it too, and alike; the first does not. A night moved by both carries both: what its kind moved it by
is its departure less the one its neighbours show.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from datetime import date, timedelta
from statistics import median

NEIGHBOURS = 3
"""The days either side of a night whose ordinary nights say whether its departure was its own."""


def drift(night: date, ordinary: Container[date], departure: Callable[[date], float | None]) -> float | None:
    """The median departure of the ``ordinary`` nights within :data:`NEIGHBOURS` days of ``night``
    (``departure``: an ordinary night's, against the ordinary nights before it): how far the expectation was
    behind (or ahead of) the series around that night. None where none of them can be measured."""
    beside = [
        e
        for step in range(1, NEIGHBOURS + 1)
        for k in (night - timedelta(days=step), night + timedelta(days=step))
        if k in ordinary and (e := departure(k)) is not None
    ]
    return median(beside) if beside else None


def stands_out(effect: float, lag: float | None) -> bool:
    """A night's ``effect`` is its own unless the ordinary nights beside it departed alike (``lag``: their
    :func:`drift`, measured as ``effect`` was): the same way and at least half as far. Where none of them can
    be measured (None), nothing says otherwise."""
    return lag is None or not (lag * effect > 0 and abs(lag) >= abs(effect) / 2)


def own_effect(
    night: date, effect: float, ordinary: Container[date], departure: Callable[[date], float | None]
) -> float | None:
    """What of ``effect`` is the night's kind's own: None when it does not :func:`stand out <stands_out>`,
    else ``effect`` less its neighbours' :func:`drift`, whichever way that drift went. A night that stands
    out beside a climb still carries the climb: a month-end's run while the business ramped measured x3 and
    the ramp's lag on top, and learned so, every month-end after the ramp fell short of it; a month-end's
    dip then measured less than its own (the lag pulled the other way), and every later dip fell below it.
    The expectation is behind the night as it is behind the nights beside it, so their drift is taken off
    whether it went the night's way or not; on a settled series it is the median of a few ordinary errors,
    near zero."""
    lag = drift(night, ordinary, departure)
    if not stands_out(effect, lag):
        return None
    return effect if lag is None else effect - lag
