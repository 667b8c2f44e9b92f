"""The gated sensors' ticks (incidents, remediation proposals) have an overall budget too: past it no new
incident's work starts, and what was left is due at once on the next tick (Dagster's storage has not
changed, so the idle gate alone would skip it), said in the skip message. On a real instance's storage."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import dagster as dg

from dw_dagster.app.idle_gate import open_gate


def test_work_left_when_the_budget_is_spent_is_due_on_the_next_tick() -> None:
    now = datetime(2026, 6, 16, 7, 0, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        with dg.build_sensor_context(instance=instance) as context:
            gate = open_gate(context, now)
            assert gate.work == "first look (no cursor)"
            assert not gate.out_of_time("INC-1"), "a fresh tick has its budget"
            spent = dataclasses.replace(gate, budget_seconds=0)
            assert spent.out_of_time("INC-2") and spent.out_of_time("INC-3")
            assert spent.leftover() == (
                "; the tick's 0 s budget was spent: left for the next tick: INC-2, INC-3"
            )
            spent.done(context)
            cursor = context.cursor
        with dg.build_sensor_context(instance=instance, cursor=cursor) as context:
            # Nothing happened in Dagster's storage meanwhile: only the work left makes the tick act.
            again = open_gate(context, now)
            assert again.work == f"due at {now:%Y-%m-%d %H:%M:%S} UTC"
            again.done(context)  # a tick that finished its work
            finished = context.cursor
        with dg.build_sensor_context(instance=instance, cursor=finished) as context:
            assert open_gate(context, now).work is None
