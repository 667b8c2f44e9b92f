"""Which nights the cost sensor starts: only complete nights (the views' lag passed) on which something ran."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from dw_dagster.checks.metrics import BusinessDay
from dw_dagster.config import DwConfigError
from dw_dagster.cost.night import latency_from_env, night_window, nights_due

DAY = BusinessDay(timezone="America/Chicago", cutoff_hour=6)


def test_a_night_is_due_once_its_views_caught_up_and_only_if_something_ran():
    ran = {date(2025, 6, 16), date(2025, 6, 18)}
    asked = []

    def had_work(start, end):
        asked.append((start, end))
        return DAY.of(start) in ran

    # 2025-06-19 10:00 Chicago: the night of the 18th ended at 06:00 on the 19th, 4 hours ago.
    now = datetime(2025, 6, 19, 15, 0, tzinfo=UTC)
    assert nights_due(date(2025, 6, 15), now, timedelta(hours=8), DAY, had_work) == [date(2025, 6, 16)]
    assert nights_due(date(2025, 6, 15), now, timedelta(hours=0), DAY, had_work) == [
        date(2025, 6, 16),
        date(2025, 6, 18),
    ]
    # An idle night (the 17th) was asked about, from Dagster's record, and starts nothing.
    assert night_window(DAY, date(2025, 6, 17)) in asked
    # No cursor yet: the latest complete night only, never a year of nights.
    assert nights_due(None, now, timedelta(0), DAY, had_work) == [date(2025, 6, 18)]
    assert nights_due(date(2025, 6, 18), now, timedelta(0), DAY, had_work) == []


def test_the_night_window_follows_the_business_day_across_daylight_saving():
    start, end = night_window(DAY, date(2025, 3, 8))
    assert start == datetime(2025, 3, 8, 12, 0, tzinfo=UTC)  # 06:00 CST
    assert end == datetime(2025, 3, 9, 11, 0, tzinfo=UTC)  # 06:00 CDT: a 23-hour night
    assert latency_from_env({}) == timedelta(hours=8)
    assert latency_from_env({"DW_COST_LATENCY_HOURS": "0"}) == timedelta(0)
    with pytest.raises(
        DwConfigError, match="DW_COST_LATENCY_HOURS: expected a number of hours >= 0, got 'soon'"
    ):
        latency_from_env({"DW_COST_LATENCY_HOURS": "soon"})


def _sensor_and_node():
    import dagster as dg

    from dw_dagster.app.cost import build_cost_definitions
    from dw_dagster.checks.metrics import MetricsFile
    from dw_dagster.warehouse.ops import OpsSchema
    from dw_dagster.warehouse.resources import warehouse_from_env

    node = dg.AssetSpec(key=["sales", "fct_orders"], metadata={"coalesce/node_id": "n-fact"})
    built = build_cost_definitions([node], MetricsFile(business_day=DAY), OpsSchema("DW", "DW_OPS"))
    # The sensor needs no resource (it never reaches the warehouse); the job's is never called here.
    defs = dg.Definitions.merge(
        built, dg.Definitions(resources={"snowflake": warehouse_from_env({}, resolved=False)})
    )
    return defs.resolve_sensor_def("cost_attribution_sensor"), node


def _tick(sensor, instance, at: datetime, cursor: str | None):
    import dagster as dg
    from dagster._core.test_utils import freeze_time

    with freeze_time(at):
        context = dg.build_sensor_context(instance=instance, cursor=cursor)
        result = sensor(context)
    return (result if isinstance(result, dg.RunRequest) else None), context.cursor


def _built(instance, node, at: datetime):
    import dagster as dg
    from dagster._core.test_utils import freeze_time

    with freeze_time(at):
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=node.key))


def test_the_sensor_starts_the_job_only_for_nights_dagster_saw_a_node_built():
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    sensor, node = _sensor_and_node()
    with dg.DagsterInstance.ephemeral() as instance:
        _built(instance, node, datetime(2025, 6, 17, 7, 30, tzinfo=UTC))  # night of 2025-06-16, 02:30 Chicago
        # A cost run succeeded before: the baseline is recorded, no backfill.
        create_run_for_test(instance, job_name="cost_attribution", status=dg.DagsterRunStatus.SUCCESS)
        request, cursor = _tick(sensor, instance, datetime(2025, 6, 19, 20, 0, tzinfo=UTC), "2025-06-15")
        assert request is not None and request.run_key == "cost:2025-06-16"
        assert request.run_config["ops"]["attribute_costs"]["config"]["backfill_nights"] == 0
        assert cursor == "2025-06-16"
        # The 17th and 18th: nothing ran, nothing starts.
        request, cursor = _tick(sensor, instance, datetime(2025, 6, 19, 20, 15, tzinfo=UTC), cursor)
        assert request is None and cursor == "2025-06-18"


def test_a_night_waits_for_the_cost_run_before_it_to_record_its_nights(monkeypatch):
    """The README walkthrough on a loaded machine: the first cost run (2025-06-14, with the 70 nights before
    it) was still recording when the world's clock reached the next night; that night was judged against
    the few weeks recorded so far, a level of a month before, and a steadily growing node read as a jump.
    A night now waits until the run before it has ended, and nights run oldest first."""
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    monkeypatch.setenv("DW_COST_LATENCY_HOURS", "0")  # as the local world runs it
    sensor, node = _sensor_and_node()
    with dg.DagsterInstance.ephemeral() as instance:
        for night in (13, 14, 15, 16):
            _built(instance, node, datetime(2025, 6, night + 1, 0, 0, tzinfo=UTC))  # 19:00 Chicago
        # World time 2025-06-16 07:01 UTC (02:01 in Chicago): the 14th is the latest complete night.
        first, cursor = _tick(sensor, instance, datetime(2025, 6, 16, 7, 1, tzinfo=UTC), None)
        assert first is not None and first.run_key == "cost:2025-06-14"
        assert first.run_config["ops"]["attribute_costs"]["config"]["backfill_nights"] == 70
        running = create_run_for_test(
            instance, job_name="cost_attribution", status=dg.DagsterRunStatus.STARTED, tags=first.tags
        )
        # A night later the first run is still recording its backfill: the 15th waits.
        waiting, cursor_then = _tick(sensor, instance, datetime(2025, 6, 17, 7, 0, tzinfo=UTC), cursor)
        assert waiting is None and cursor_then == cursor == "2025-06-14"
        # It failed: no baseline was recorded, so the next night backfills again.
        instance.delete_run(running.run_id)
        create_run_for_test(instance, job_name="cost_attribution", status=dg.DagsterRunStatus.FAILURE)
        second, cursor = _tick(sensor, instance, datetime(2025, 6, 17, 7, 15, tzinfo=UTC), cursor)
        assert second is not None and second.run_key == "cost:2025-06-15"
        assert second.run_config["ops"]["attribute_costs"]["config"]["backfill_nights"] == 70
        # Once one succeeded, the later nights record only themselves, one at a time.
        create_run_for_test(instance, job_name="cost_attribution", status=dg.DagsterRunStatus.SUCCESS)
        third, cursor = _tick(sensor, instance, datetime(2025, 6, 18, 7, 0, tzinfo=UTC), cursor)
        assert third is not None and third.run_key == "cost:2025-06-16"
        assert third.run_config["ops"]["attribute_costs"]["config"]["backfill_nights"] == 0
        # A run lost without ending (queued at the instance's clock) holds the next nights back for six
        # hours at most.
        from dw_dagster.app.cost import in_flight

        lost = create_run_for_test(instance, job_name="cost_attribution", status=dg.DagsterRunStatus.STARTED)
        queued = instance.get_run_record_by_id(lost.run_id).create_timestamp
        assert in_flight(instance, queued + timedelta(hours=5)).run_id == lost.run_id
        assert in_flight(instance, queued + timedelta(hours=7)) is None
