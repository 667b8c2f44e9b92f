"""Diagnosis on the distributor world: the reference night, traced to org 7120 and the inner join; the runs
the local daemon launched, seeded and tonight's, as the sensor daemon launches them."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.remote_origin import RemoteInstigatorOrigin
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.storage.tags import SENSOR_NAME_TAG, TICK_ID_TAG

from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import CauseClass
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, _repository_origin

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def reference_night(reference_world):
    lw, diagnosed = reference_world  # night 60 watched, the reference night played
    assert diagnosed == [], "night 60 is an ordinary night"
    daemon = LocalDaemon(lw)
    outcome = daemon.tick()
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
    (incident,) = store.list(status="open")
    return daemon, outcome, store, incident


def test_one_diagnosis_run_per_incident(reference_night):
    daemon, outcome, store, incident = reference_night
    assert [r.success for r in outcome.diagnoses] == [True]
    again = daemon.tick()
    assert again.diagnoses == [], "a re-tick diagnoses nothing twice"


def test_each_run_shows_its_job_and_the_sensor_tick_that_launched_it(reference_night):
    """The UI shows a run's target from its job and its "Launched by" from the code location it came from,
    the sensor tag and the tick tag: the local daemon's runs carry all four, as the sensor daemon's do."""
    daemon, _, _, incident = reference_night
    runs = {
        sensor: daemon.instance.get_runs(dg.RunsFilter(tags={SENSOR_NAME_TAG: sensor}))
        for sensor in ("coalesce_run_sensor", "incident_sensor")
    }
    # The 60 seeded nights, tonight's quiet night and the reference night: each a run of the checks job,
    # recording the checks it runs (the UI lists them under the job's name).
    assert len(runs["coalesce_run_sensor"]) == 62
    assert {r.job_name for r in runs["coalesce_run_sensor"]} == {"quality_checks"}
    assert all(r.asset_check_selection and r.asset_selection is None for r in runs["coalesce_run_sensor"])
    assert [(r.job_name, r.tags["dw/incident_id"]) for r in runs["incident_sensor"]] == [
        ("diagnose_incident", incident.incident_id)
    ]
    for sensor, launched in runs.items():
        # Where the UI reads a sensor's ticks: by the sensor's origin in the code location `dagster dev` loads.
        origin = RemoteInstigatorOrigin(_repository_origin(), sensor)
        ticks = daemon.instance.get_ticks(origin.get_id(), origin.get_selector().get_id())
        by_id = {t.tick_id: t for t in ticks}
        for run in launched:
            origin = run.remote_job_origin
            assert origin is not None and origin.job_name == run.job_name
            assert origin.repository_origin.code_location_origin.location_name == "dw_dagster"
            tick = by_id[int(run.tags[TICK_ID_TAG])]
            assert tick.status is TickStatus.SUCCESS and run.run_id in tick.tick_data.run_ids
            assert run.tags["dagster/run_key"] in tick.tick_data.run_keys
            # A seeded night's tick carries that night's time, as its run does.
            started = daemon.instance.get_run_record_by_id(run.run_id).start_time
            assert started is not None and abs(started - tick.timestamp) < 300
        # The seeding's first tick too (the world's calendar, not today's): before any night it watched.
        first = min(ticks, key=lambda t: t.tick_id)
        assert first.timestamp < min(r.start_time for r in daemon.instance.get_run_records() if r.start_time)


def test_value_loss_through_the_inner_join(reference_night):
    _, _, store, incident = reference_night
    diagnosis, _ = latest_diagnosis(store, incident.incident_id)
    assert diagnosis.classification is CauseClass.VALUE_LOSS
    (key,) = diagnosis.keys
    assert (key.column, key.value) == ("ORGANIZATION_ID", "7120")
    assert key.units == 41_800 and key.distinct_items == 1_260
    assert key.new_in_source_since == incident.business_date
    (join,) = diagnosis.joins
    assert join.asset_key == "inventory/fct_inventory_position" and join.join_type == "INNER"
    assert "DIM_WAREHOUSE" in join.right and join.dropped_units == 41_800
    assert diagnosis.evidence["gap_units"] == 41_800
    assert "team:planning-ops" in diagnosis.owners and "team:inventory-analytics" in diagnosis.owners
    assert diagnosis.path[0] == "raw_ebs/mtl_onhand_quantities_detail"
    assert diagnosis.path[-1] == "inventory/fct_inventory_position"


def test_the_test_query_finds_the_units_that_match_no_warehouse(reference_night):
    daemon, _, store, incident = reference_night
    diagnosis, _ = latest_diagnosis(store, incident.incident_id)
    with daemon.lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute(diagnosis.test_query)
        rows = cur.fetchall()
    assert [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows] == [(7120, 1260, 41_800, 1260)]


def test_blast_radius(reference_night):
    _, _, store, incident = reference_night
    _, radius = latest_diagnosis(store, incident.incident_id)
    by = {a.asset_key: a for a in radius.assets}
    assert {"mart/mart_days_of_supply", "mart/mart_reorder_candidates", "thoughtspot/network_days_of_supply",
            "buyers/reorder_candidates_list"} <= set(by)  # fmt: skip
    reorder = by["mart/mart_reorder_candidates"].change["reorder_candidates"]
    assert (reorder["before"], reorder["after"]) == (31, 195)
    assert len(radius.newly_flagged) == 164
    assert "09:00 S&OP" in by["thoughtspot/network_days_of_supply"].next_read
    assert by["mart/mart_days_of_supply"].change["rows_affected"] == 1_260
    assert by["thoughtspot/network_days_of_supply"].owners == ["team:supply-chain-planning"]


def test_owners_and_buyers_are_told_once(reference_night):
    import httpx

    daemon, _, store, incident = reference_night
    messages = httpx.get(f"{daemon.lw.slack_url}/_sink/messages").json()["messages"]
    roots = {m["channel"]: m for m in messages if not m["thread_ts"]}
    assert set(roots) == {"#inventory-analytics", "#planning-ops", "#buyers"}
    owners_text = roots["#planning-ops"]["text"] + str(roots["#planning-ops"]["blocks"])
    assert "7120" in owners_text and "41,800" in owners_text and incident.incident_id in owners_text
    buyers = str(roots["#buyers"]["blocks"]) + roots["#buyers"]["text"]
    assert "164" in buyers
    daemon.tick()
    assert len(httpx.get(f"{daemon.lw.slack_url}/_sink/messages").json()["messages"]) == len(messages)
