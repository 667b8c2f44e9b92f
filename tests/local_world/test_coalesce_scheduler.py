"""The simulator's Scheduler fires a night once, however a check falls against a clock jump."""

from __future__ import annotations

import threading
import time
from datetime import datetime

from dw_local.coalesce_sim.clock import SimClock
from dw_local.coalesce_sim.project_specs import ScheduleSpec
from dw_local.coalesce_sim.scheduler import CronScheduler

NIGHTLY = ScheduleSpec(jobID="1", environmentID="2", cron="0 2 * * *", timezone="America/Chicago")


def test_a_check_during_a_jump_fires_the_night_once() -> None:
    clock = SimClock()
    clock.set(datetime.fromisoformat("2024-05-14T03:00:00-05:00"))
    # A listener heard before the Scheduler's holds the jump open, as a busy process can between the move
    # and the Scheduler's notice; a check from the Scheduler's own thread falls inside it.
    clock.on_set(lambda now: time.sleep(0.3))
    fired: list[datetime] = []
    cron = CronScheduler([NIGHTLY], clock, lambda schedule, due: fired.append(due))
    jump = threading.Thread(target=clock.set, args=(datetime.fromisoformat("2024-05-15T02:00:00-05:00"),))
    jump.start()
    time.sleep(0.1)
    cron.tick()
    jump.join()
    cron.tick()
    cron.tick()
    assert fired == [datetime.fromisoformat("2024-05-15T02:00:00-05:00")], fired
