"""Holding Python's cyclic garbage collector off while a load builds what the process keeps.

Loading 10,000 Coalesce nodes builds hundreds of thousands of small, long-lived objects and no cycles worth
collecting. Left on, the collector rescans them again and again as they are made (two thirds of such a load
once: benchmarks/HISTORY.md); frozen afterwards, later collections skip them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_frozen = False


@contextmanager
def collector_paused(*, freeze: bool = True) -> Iterator[None]:
    """No cyclic collection in the block; then, with ``freeze`` and on the process's first such load only,
    what exists is moved out of the collector's sight (``gc.freeze``), and the collector runs again if it ran
    before. Only the first: a frozen object is never collected, so a process that loads again (a code server
    reloading in process, the local world's daemons in one test worker) would keep the cyclic garbage of
    every earlier load for good; a code server's or run worker's one load is what freezing is for."""
    global _frozen
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze and not _frozen:
            gc.freeze()
            _frozen = True
        if collecting:
            gc.enable()
