"""The wait for a stopped source: it returns on the first load later than the stale one, tells a person
once while it waits, and gives up at its deadline saying what it saw (the world test covers the rest)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from dw_dagster.records.remediation import AwaitSource
from dw_dagster.remediation.source_steps import SourceStepFailed, await_caught_up

STALE = datetime(2025, 6, 17, 3, 0, tzinfo=UTC)
SOURCE = AwaitSource(
    asset_key="raw/x", table_parts=("DB", "RAW", "X"), column="_LOADED_AT", stale_since=STALE
)


def reads(*values):
    seen = list(values)

    def read(_: AwaitSource):
        return seen.pop(0) if len(seen) > 1 else seen[0]

    return read


def test_it_returns_the_first_later_load_and_tells_once_while_waiting():
    told = []
    later = STALE + timedelta(hours=20)
    got = await_caught_up(
        reads(STALE, None, STALE, later), SOURCE, time.monotonic() + 5, 0.01, lambda: told.append(1)
    )
    assert got == later and told == [1]


def test_already_caught_up_tells_nobody():
    told = []
    later = STALE + timedelta(minutes=1)
    assert await_caught_up(reads(later), SOURCE, time.monotonic() + 5, 0.01, lambda: told.append(1)) == later
    assert told == []


def test_it_gives_up_at_the_deadline_naming_the_table_and_its_latest_load():
    with pytest.raises(
        SourceStepFailed,
        match=r'"DB"."RAW"."X" has not caught up: its latest _LOADED_AT is still 2025-06-17 03:00',
    ):
        await_caught_up(reads(STALE), SOURCE, time.monotonic() + 0.05, 0.01, lambda: None)
