"""Diagnosis of other faults on the distributor world, each played for real on the source data."""

from __future__ import annotations

import pytest

from dw_dagster.incidents.jobs import latest_diagnosis
from dw_dagster.incidents.models import CauseClass
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon
from dw_local.worlds.distributor.faults import Fault
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def faulted(seeded_world):
    """Plays each fault on its own night, diagnoses it, then resolves and repairs before the next."""
    daemon = LocalDaemon(seeded_world)
    world = DistributorWorld()
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
    sf, coalesce = seeded_world.snowflake, seeded_world.coalesce_client()
    night = world.last_played_night(sf) + 1
    out = {}
    for name, fault in {
        "duplicate_load": Fault(kind="duplicate_load", org_id=7020),
        "replication_stalled": Fault(kind="replication_stalled"),
        "unit_change": Fault(kind="unit_change", org_id=7030, factor=12),
    }.items():
        world.play_night(sf, coalesce, night, faults=[fault])
        outcome = daemon.tick()
        assert [r.success for r in outcome.diagnoses] == [True], name
        (incident,) = store.list(status="open")
        out[name] = (incident, *latest_diagnosis(store, incident.incident_id), outcome)
        store.set_status(incident.incident_id, "resolved")
        world.repair(sf, coalesce, fault)
        night += 1
        world.play_night(sf, coalesce, night)
        clean = daemon.tick()
        night += 1
        out[name] += (clean,)
    return out


def test_duplicate_load_in_the_source(faulted):
    incident, diagnosis, radius, outcome, _ = faulted["duplicate_load"]
    assert diagnosis.classification is CauseClass.DUPLICATION
    assert diagnosis.evidence["duplicate_rows"] > 1000
    assert diagnosis.path[-1] == "raw_ebs/mtl_onhand_quantities_detail"
    assert "COPIES" in diagnosis.test_query
    assert "team:data-platform" in diagnosis.owners


def test_replication_stalled_job_green(faulted):
    incident, diagnosis, radius, outcome, _ = faulted["replication_stalled"]
    assert diagnosis.classification is CauseClass.STALE_INPUT
    assert "qlik_replicate/ebs_inventory_cdc" in diagnosis.path
    assert "team:data-platform" in diagnosis.owners
    assert "MAX(" in diagnosis.test_query


def test_unit_change_x12(faulted):
    incident, diagnosis, radius, outcome, _ = faulted["unit_change"]
    assert diagnosis.classification is CauseClass.UNIT_CHANGE
    assert diagnosis.evidence["factor"] == pytest.approx(12, rel=0.01), "measured from the data"
    assert diagnosis.keys[0].column == "ORGANIZATION_ID" and diagnosis.keys[0].value == "7030"


def test_each_fault_opened_exactly_one_incident_and_the_next_clean_night_none(faulted):
    for name, (*_, clean) in faulted.items():
        assert clean.failed("ERROR") == [], name
