"""A tick replayed after a crash part-way through storing its events reports each event once: they are
stored in ``sort_asset_events`` order (by the daemon one at a time, on the storages the tick does not store
them on itself), so what a crash leaves stored is a prefix of each run's events; the replay reports exactly
the rest, and a run none of whose events is stored reports all of them."""

from __future__ import annotations

import dagster as dg

from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.coalesce.run_report import LAST_UPDATED_KEY, sort_asset_events
from dw_dagster.coalesce.sensor_builder import unreported_asset_events


def _events(run_id: int, n: int) -> list[dg.AssetMaterialization]:
    # Listed newest first, as a report need not be in the order the nodes ended.
    return [
        dg.AssetMaterialization(
            asset_key=["MART", f"NODE_{i}"],
            metadata={
                **CoalesceRunMetadataSet(run_id=run_id, environment_id="2"),
                LAST_UPDATED_KEY: dg.MetadataValue.timestamp(1_800_000_000.0 + run_id * 100 + i),
            },
        )
        for i in reversed(range(n))
    ]


def _keys(events) -> list[str]:
    return [e.asset_key.to_user_string() for e in events]


def test_a_replay_after_a_partial_store_reports_the_rest_once() -> None:
    run_a, run_b = _events(7, 6), _events(8, 4)
    tick = sort_asset_events([*run_a, *run_b])
    with dg.DagsterInstance.ephemeral() as instance:
        # The daemon died after storing the first 5 of the tick's 10 events.
        for event in tick[:5]:
            instance.report_runless_asset_event(event)
        rest_a = unreported_asset_events(instance, run_a)
        rest_b = unreported_asset_events(instance, run_b)
        assert sorted(_keys([*rest_a, *rest_b])) == sorted(_keys(tick[5:]))
        for event in [*rest_a, *rest_b]:
            instance.report_runless_asset_event(event)
        # Every event is now stored once; a second replay reports nothing.
        for event in tick:
            records = instance.fetch_materializations(event.asset_key, limit=25).records
            runs = [CoalesceRunMetadataSet.extract(r.asset_event.metadata).run_id for r in records]
            assert runs.count(CoalesceRunMetadataSet.extract(event.metadata).run_id) == 1
        assert unreported_asset_events(instance, run_a) == []
        assert unreported_asset_events(instance, run_b) == []


def test_a_run_whose_first_event_is_not_stored_reports_all_even_over_an_earlier_run() -> None:
    earlier, later = _events(7, 3), _events(9, 3)
    with dg.DagsterInstance.ephemeral() as instance:
        for event in earlier:
            instance.report_runless_asset_event(event)
        # The same assets built by a later run: an earlier run's events do not count as this run's.
        assert _keys(unreported_asset_events(instance, later)) == _keys(later)
