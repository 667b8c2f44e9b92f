"""A join the diagnosis cannot read still gives a diagnosis that says so, and the owners are still alerted.

The code location is loaded from a Coalesce state whose FCT_INVENTORY_POSITION join carries a Jinja block
(Coalesce renders them; dw-dagster renders only refs), while the deployed node the job builds is unchanged:
the reference night then reaches a diagnosis that cannot measure that join."""

from __future__ import annotations

import httpx
import pytest
from coalesce_state import state_key, write_state

from dw_dagster.app.definitions import load_definitions
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world
JINJA = "\n{% if var('with_reserve', true) %}  -- reserve stock counts\n{% endif %}"


def _with_unrenderable_join(daemon: LocalDaemon) -> None:
    edited = 0

    def walk(node):
        nonlocal edited
        if isinstance(node, dict):
            if node.get("name") == "FCT_INVENTORY_POSITION":
                for mapping in node.get("metadata", {}).get("sourceMapping", []):
                    join = mapping.get("join") or {}
                    if join.get("joinCondition"):
                        join["joinCondition"] += JINJA
                        edited += 1
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        return node

    # The stored Coalesce state, edited as a new version: what the next load of the code location reads.
    write_state(daemon.instance, state_key(), walk)
    assert edited, "the state holds FCT_INVENTORY_POSITION's join"
    daemon.defs = load_definitions(daemon.instance)
    daemon.repo = daemon.defs.get_repository_def()


@pytest.fixture(scope="module")
def diagnosed(seeded_world):
    daemon = LocalDaemon(seeded_world)
    _with_unrenderable_join(daemon)
    world = DistributorWorld()
    world.play_night(seeded_world.snowflake, seeded_world.coalesce_client(), 60)
    daemon.tick()
    world.play_reference_night(seeded_world.snowflake, seeded_world.coalesce_client())
    outcome = daemon.tick()
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
    (incident,) = store.list(status="open")
    return daemon, outcome, incident, latest_diagnosis(store, incident.incident_id)[0]


def test_the_diagnosis_says_the_join_could_not_be_read(diagnosed):
    _, outcome, _, diagnosis = diagnosed
    assert [r.success for r in outcome.diagnoses] == [True], "the job did not fail"
    notes = " ".join(diagnosis.notes)
    assert "inventory/fct_inventory_position" in notes and "template other than ref" in notes, notes
    assert diagnosis.joins == [], "nothing was measured on a join it could not read"
    assert diagnosis.evidence["gap_units"] == 41_800, "the gap to the source is still measured"


def test_the_owners_are_still_alerted(diagnosed):
    daemon, _, incident, _ = diagnosed
    messages = httpx.get(f"{daemon.lw.slack_url}/_sink/messages").json()["messages"]
    roots = [m for m in messages if not m["thread_ts"]]
    assert "#inventory-analytics" in {m["channel"] for m in roots}
    assert any(incident.incident_id in (m["text"] or "") + str(m["blocks"]) for m in roots)
