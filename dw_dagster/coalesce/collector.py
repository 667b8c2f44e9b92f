"""Holding Python's cyclic garbage collector off while a load builds what the process keeps.

Loading 10,000 Coalesce nodes builds hundreds of thousands of small, long-lived objects and no cycles worth
collecting. Left on, the collector rescans them again and again as they are made (two thirds of such a load
once: benchmarks/HISTORY.md); frozen afterwards, later collections skip them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(*, freeze: bool = True) -> Iterator[None]:
    """No cyclic collection in the block; then, with ``freeze``, what exists is moved out of the collector's
    sight (``gc.freeze``), and the collector runs again if it ran before."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if collecting:
            gc.enable()
