"""When runs execute: an on-demand queue whose one worker thread builds queued runs one at a time, and
(with ``--scheduler``) the Coalesce Scheduler, which starts each scheduled Job when its cron fires on the
simulator clock, in the schedule's time zone.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from dw_local.coalesce_sim.clock import SimClock
from dw_local.coalesce_sim.project_specs import ScheduleSpec

logger = logging.getLogger(__name__)


class RunQueue:
    """Runs ``execute(run_id)`` for each submitted run, in order, on one worker thread, so the API stays
    responsive while a long run spans many polls."""

    def __init__(self, execute: Callable[[int], None]):
        self._execute = execute
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="coalesce-sim-runs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Takes no further run; the worker is a daemon thread, so a run in flight does not hold up exit."""
        self._queue.put(None)

    def submit(self, run_id: int) -> None:
        self._queue.put(run_id)

    def _work(self) -> None:
        while (run_id := self._queue.get()) is not None:
            try:
                self._execute(run_id)
            except Exception:
                logger.exception("run %s could not be executed", run_id)


class CronScheduler:
    """Fires each schedule once per cron tick that the simulator clock passes.

    Setting the clock is a jump, not time passing: ticks jumped over do not fire, except one exactly at
    the new time, so setting the clock to 02:00 starts the 02:00 Job. When the clock moves on by more
    than one tick between two checks, the schedule fires once.
    """

    def __init__(
        self,
        schedules: Sequence[ScheduleSpec],
        clock: SimClock,
        fire: Callable[[ScheduleSpec, datetime], None],
        interval: float = 0.2,
    ):
        self._schedules = list(schedules)
        self._clock = clock
        self._fire = fire
        self._interval = interval
        self._lock = threading.Lock()
        self._checked_until = clock.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="coalesce-sim-scheduler", daemon=True)
        clock.on_set(self._jumped)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _jumped(self, now: datetime) -> None:
        with self._lock:
            self._checked_until = now - timedelta(microseconds=1)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.tick()

    def tick(self) -> None:
        with self._clock.locked(), self._lock:  # no jump between reading the time and the last check
            now = self._clock.now()
            since, self._checked_until = self._checked_until, now
        if now <= since:
            return
        for schedule in self._schedules:
            start = since.astimezone(ZoneInfo(schedule.timezone))
            due = croniter(schedule.cron, start).get_next(datetime)
            if due <= now:
                try:
                    self._fire(schedule, due)
                except Exception:
                    logger.exception("schedule of job %s could not start a run", schedule.jobID)
