"""The simulator clock: real time shifted by an offset, so that once set it advances in real time.

The distributor world plays each night by setting the clock to that night's 02:00 and starting the
nightly job, so run times read like the nights they stand for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def format_time(value: datetime) -> str:
    """ISO-8601 in UTC with milliseconds and a Z, as Coalesce writes times."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """An ISO-8601 time; without an offset it is UTC. Raises ValueError."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class SimClock:
    def __init__(self, offset: timedelta = timedelta(0)):
        self._offset = offset
        self._lock = threading.RLock()
        self._listeners: list[Callable[[datetime], None]] = []

    @property
    def offset(self) -> timedelta:
        return self._offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def set(self, now: datetime) -> None:
        # The listeners hear of the jump under the same lock as the move: a reader holding ``locked()`` sees
        # the clock either before both or after both (the Scheduler fired a night twice when a check fell
        # between the move and its notice).
        with self._lock:
            self._offset = now - datetime.now(UTC)
            for listener in self._listeners:
                listener(now)

    def locked(self) -> threading.RLock:
        """Held, no jump happens (``with clock.locked(): ...``)."""
        return self._lock

    def on_set(self, listener: Callable[[datetime], None]) -> None:
        """Calls ``listener(new_now)`` whenever the clock is set (a jump, not time passing)."""
        self._listeners.append(listener)
