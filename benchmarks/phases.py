"""Which part of a night a statement was sent from, for the benchmarks that count statements: each
benchmark records at its own point of the connector and reads ``current`` there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

current: str | None = None


@contextmanager
def phase(name: str) -> Iterator[None]:
    global current
    outer, current = current, name
    try:
        yield
    finally:
        current = outer
