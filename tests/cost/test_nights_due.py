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


def test_the_sensor_starts_the_job_only_for_nights_dagster_saw_a_node_built():
    import dagster as dg
    from dagster._core.test_utils import freeze_time

    from dw_dagster.app.cost import build_cost_definitions
    from dw_dagster.checks.metrics import MetricsFile
    from dw_dagster.warehouse.ops import OpsSchema
    from dw_dagster.warehouse.resources import warehouse_from_env

    node = dg.AssetSpec(key=["sales", "fct_orders"], metadata={"coalesce/node_id": "n-fact"})
    metrics = MetricsFile(business_day=DAY)
    built = build_cost_definitions([node], metrics, OpsSchema("DW", "DW_OPS"))
    # The sensor needs no resource (it never reaches the warehouse); the job's is never called here.
    defs = dg.Definitions.merge(
        built, dg.Definitions(resources={"snowflake": warehouse_from_env({}, resolved=False)})
    )
    sensor = defs.resolve_sensor_def("cost_attribution_sensor")
    with dg.DagsterInstance.ephemeral() as instance:
        with freeze_time(datetime(2025, 6, 17, 7, 30, tzinfo=UTC)):  # night of 2025-06-16, 02:30 Chicago
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=node.key))
        with freeze_time(datetime(2025, 6, 19, 20, 0, tzinfo=UTC)):
            context = dg.build_sensor_context(instance=instance, cursor="2025-06-15")
            requests = list(sensor(context))
        assert [r.run_key for r in requests] == ["cost:2025-06-16"]  # the 17th and 18th: nothing ran
        assert requests[0].run_config["ops"]["attribute_costs"]["config"]["backfill_nights"] == 0
        assert context.cursor == "2025-06-18"
