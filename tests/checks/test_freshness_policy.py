"""A job's freshness policy falls due a grace after each scheduled start, also when that grace crosses
midnight: the deadline then belongs to the next day of the week, not the scheduled one."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from croniter import croniter

from dw_dagster.checks.freshness import freshness_policy_for
from dw_dagster.checks.metrics import JobSchedule


def _deadline_cron(cron: str, grace: int) -> str:
    policy = freshness_policy_for(JobSchedule(cron=cron, grace_minutes=grace, timezone="UTC"))
    assert policy.lower_bound_delta == timedelta(minutes=grace), policy  # type: ignore[attr-defined]
    return policy.deadline_cron  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "cron, grace, expected",
    [
        ("0 2 * * *", 60, "0 3 * * *"),
        ("0 23 * * *", 120, "0 1 * * *"),
        ("30 23 * * 1-5", 60, "30 0 * * 2,3,4,5,6"),
        ("0 22 * * SAT,SUN", 180, "0 1 * * 0,1"),
        ("0 2 * * 1-5", 60, "0 3 * * 1,2,3,4,5"),
    ],
)
def test_the_deadline_cron(cron: str, grace: int, expected: str) -> None:
    assert _deadline_cron(cron, grace) == expected


@pytest.mark.parametrize("cron, grace", [("30 23 * * 1-5", 60), ("0 22 * * 0,6", 180), ("45 21 * * 5", 150)])
def test_each_scheduled_start_falls_due_exactly_its_grace_later(cron: str, grace: int) -> None:
    deadline = _deadline_cron(cron, grace)
    start = datetime(2026, 6, 1)
    for _ in range(14):
        start = croniter(cron, start).get_next(datetime)
        assert croniter(deadline, start).get_next(datetime) == start + timedelta(minutes=grace)


def test_a_schedule_a_weekday_shift_cannot_follow_gets_a_window() -> None:
    policy = freshness_policy_for(JobSchedule(cron="0 23 * * 5#2", grace_minutes=120, timezone="UTC"))
    assert policy.fail_window.to_timedelta() == timedelta(days=1, hours=2)  # type: ignore[attr-defined]
