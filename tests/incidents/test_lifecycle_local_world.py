"""The incident lifecycle on two worlds, night after night through the real machinery (Coalesce simulator,
run sensor, checks, incident sensor, diagnosis and lifecycle jobs, the Slack stand-in), each a short story:

- distributor: a region-map row deleted opens an incident; the next night a duplicate load under it opens
  its own incident, diagnosis and alert, linked to the first, while the first gets a reply; a buyer cannot
  resolve it; the map is repaired, and both resolve on the next clean night with a note in their threads;
- e-commerce: a replication stall on its second night is a reply in the first night's thread, not a new
  incident; it resolves once replication catches up; an owner resolves another incident by hand.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest
from click.testing import CliRunner, Result
from world_cache import WORLD_CACHE

from dw_dagster.app.cli import main
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import Incident
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, TickOutcome, dagster_home
from dw_local.scenarios.suite import SUITE_DIR
from dw_local.scenarios.worlds import open_world

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]
ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce" / "world.yaml"


class Story:
    """A private copy of a world's seeded template, played one night at a time."""

    def __init__(self, world: str, tmp: Path):
        self.world = open_world(world, Path.cwd())
        root = self.world.clone(WORLD_CACHE.resolve(), tmp / "world")
        self._servers = self.world.local_world(root)
        self.lw = self._servers.__enter__()
        self.daemon = LocalDaemon(self.lw, env=self.world.env())
        self.store = IncidentStore(self.daemon.defs.resources["snowflake"], OpsSchema(self.world.database))
        self.history = {i.incident_id for i in self.store.list()}
        self.night = self.world.history_nights

    def play(self, *events: dict[str, Any]) -> TickOutcome:
        parsed = [self.world.parse_event(e, self.world.history_nights) for e in events]
        self.world.play_night(self.lw, self.night, parsed)
        self.night += 1
        return self.daemon.tick()

    def repair(self, *events: dict[str, Any]) -> None:
        for e in events:
            self.world.repair(self.lw, self.world.parse_event(e, self.world.history_nights))

    def new_incidents(self) -> list[Incident]:
        """Incidents opened by the story (not the history), merged ones left out."""
        return [i for i in self.store.list() if i.incident_id not in self.history and i.status != "merged"]

    def messages(self, incident_id: str) -> list[dict[str, Any]]:
        messages = httpx.get(f"{self.lw.slack_url}/_sink/messages").json()["messages"]
        return [m for m in messages if incident_id in (m.get("text") or "")]

    def thread(self, incident_id: str) -> list[dict[str, Any]]:
        """Every message in the incident's threads, roots first."""
        messages = httpx.get(f"{self.lw.slack_url}/_sink/messages").json()["messages"]
        roots = {m["ts"] for m in messages if not m["thread_ts"] and incident_id in (m.get("text") or "")}
        return [m for m in messages if m["ts"] in roots or m["thread_ts"] in roots]

    def cli(self, *args: str) -> Result:
        env = {**os.environ, "DAGSTER_HOME": str(dagster_home(self.lw.root))}
        return CliRunner().invoke(main, list(args), env=env)

    def close(self) -> None:
        self._servers.__exit__(None, None, None)


@pytest.fixture(scope="module")
def story_of(tmp_path_factory):
    environ = dict(os.environ)
    stories: list[Story] = []

    def make(world: str) -> Story:
        stories.append(Story(world, tmp_path_factory.mktemp("lifecycle")))
        return stories[-1]

    yield make
    for s in stories:
        s.close()
    # The local daemon points this process at its world, as a deployment would: later tests must not inherit it.
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture(scope="module")
def distributor(story_of):
    story = story_of("distributor")
    story.play()
    deleted = {"kind": "reference_row_deleted", "table": "REGION_MAP", "where": {"ORGANIZATION_ID": 7030}}
    story.nights = {"deleted": story.play(deleted), "duplicated": None, "repaired": None}
    (story.first,) = story.new_incidents()
    story.nights["duplicated"] = story.play(
        {
            "kind": "duplicate_load",
            "table": "MTL_ONHAND_QUANTITIES_DETAIL",
            "where": {"ORGANIZATION_ID": 7020},
        }
    )
    story.second = next(i for i in story.new_incidents() if i.incident_id != story.first.incident_id)
    story.refused = story.cli(
        "incidents", "resolve", story.first.incident_id, "--as", "Luis Romero", "--reason", "x"
    )
    story.repair(deleted)
    story.nights["repaired"] = story.play()
    return story


def test_a_new_fault_under_an_open_incident_opens_its_own_incident_diagnosis_and_alert(distributor):
    first, second = distributor.first, distributor.second
    assert (
        latest_diagnosis(distributor.store, first.incident_id)[0].classification.value
        == "reference_data_change"
    )
    diagnosis, _ = latest_diagnosis(distributor.store, second.incident_id)
    assert diagnosis.classification.value == "duplication"
    assert distributor.store.get(second.incident_id).detail["related"] == [first.incident_id]
    alert = [m for m in distributor.messages(second.incident_id) if not m["thread_ts"]]
    assert alert, "the new incident is alerted in a thread of its own"
    linked = [m for m in distributor.thread(second.incident_id) if first.incident_id in (m.get("text") or "")]
    assert linked, "its thread names the open incident of the other cause"


def test_the_old_cause_continuing_is_a_reply_in_its_own_thread(distributor):
    first = distributor.first
    nights = {e.detail["business_date"] for e in distributor.store.events(first.incident_id, kind="finding")}
    assert len(nights) == 2, "tonight's repeat of the deleted row's finding continues the first incident"
    replies = [m for m in distributor.thread(first.incident_id) if m["thread_ts"] and ":repeat:" in m["text"]]
    assert len(replies) >= 1


def test_resolving_is_for_the_owners_of_the_incident_s_assets(distributor):
    refused = distributor.refused
    assert refused.exit_code != 0 and "Luis Romero does not own the assets of" in refused.output


def test_both_resolve_on_the_next_clean_night_with_a_note_in_their_threads(distributor):
    for incident in (distributor.first, distributor.second):
        now = distributor.store.get(incident.incident_id)
        assert now.status == "resolved", incident.incident_id
        (status,) = [
            e
            for e in distributor.store.events(incident.incident_id, kind="status")
            if e.detail["to"] == "resolved"
        ]
        assert status.detail["by"] == "dw-dagster" and "passed again" in status.detail["reason"]
        notes = [
            m for m in distributor.thread(incident.incident_id) if m["thread_ts"] and "Resolved" in m["text"]
        ]
        assert notes, incident.incident_id
    assert distributor.store.list(status="open") == []


@pytest.fixture(scope="module")
def ecommerce(story_of):
    story = story_of(str(ECOMMERCE))
    story.play()
    stalled = {"kind": "replication_stalled"}
    story.play(stalled)
    (story.stall,) = story.new_incidents()
    story.second_night = story.play(stalled)
    story.after_second = story.new_incidents()
    story.caught_up = story.play()
    story.play({"kind": "reference_row_deleted", "table": "STORE_MAP", "where": {"STORE_ID": 3}})
    (story.deleted,) = [i for i in story.new_incidents() if i.status == "open"]
    return story


def test_a_stall_on_its_second_night_is_a_reply_not_a_new_incident(ecommerce):
    assert [i.incident_id for i in ecommerce.after_second] == [ecommerce.stall.incident_id]
    nights = {
        e.detail["business_date"] for e in ecommerce.store.events(ecommerce.stall.incident_id, kind="finding")
    }
    assert len(nights) == 2
    alerts = [m for m in ecommerce.thread(ecommerce.stall.incident_id) if not m["thread_ts"]]
    replies = [m for m in ecommerce.thread(ecommerce.stall.incident_id) if ":repeat:" in (m["text"] or "")]
    assert (
        alerts
        and replies
        and all(r["thread_ts"] == alerts[0]["ts"] for r in replies if r["channel"] == alerts[0]["channel"])
    )


def test_the_stall_resolves_once_replication_caught_up(ecommerce):
    assert ecommerce.store.get(ecommerce.stall.incident_id).status == "resolved"
    notes = [
        m for m in ecommerce.thread(ecommerce.stall.incident_id) if m["thread_ts"] and "Resolved" in m["text"]
    ]
    assert notes
    # The UI shows the resolution: the latest dw/incidents materialization of the incident says so.
    records = ecommerce.daemon.instance.fetch_materializations(
        dg.AssetKey(["dw", "incidents"]), limit=50
    ).records
    latest = next(
        r.asset_materialization
        for r in records
        if r.asset_materialization.metadata["incident_id"].value == ecommerce.stall.incident_id
    )
    assert latest.metadata["status"].value == "resolved"


def test_an_owner_resolves_an_incident_by_hand_and_the_commands_show_it(ecommerce):
    iid = ecommerce.deleted.incident_id
    refused = ecommerce.cli("incidents", "resolve", iid, "--as", "Dora Fischer", "--reason", "not mine")
    assert refused.exit_code != 0 and "does not own" in refused.output
    done = ecommerce.cli(
        "incidents", "resolve", iid, "--as", "Ben Clarke", "--reason", "row restored by hand"
    )
    assert done.exit_code == 0, done.output
    assert ecommerce.store.get(iid).detail["resolution"]["by"] == "Ben Clarke"
    notes = [m for m in ecommerce.thread(iid) if m["thread_ts"] and "row restored by hand" in m["text"]]
    assert notes
    listed = ecommerce.cli("incidents", "list", "--json")
    assert listed.exit_code == 0, listed.output
    mine = next(x for x in json.loads(listed.output) if x["incident_id"] == iid)
    assert mine["status"] == "resolved" and mine["resolution"]["how"] == "manual"
    shown = ecommerce.cli("incidents", "show", iid)
    assert shown.exit_code == 0 and "open -> resolved by Ben Clarke: row restored by hand" in shown.output
    assert ecommerce.cli("incidents", "list", "--open").exit_code == 0
    again = ecommerce.cli("incidents", "resolve", iid, "--as", "Ben Clarke", "--reason", "twice")
    assert again.exit_code != 0 and "already resolved" in again.output
    unknown = ecommerce.cli("incidents", "show", "INC-20250101-000000")
    assert unknown.exit_code != 0 and "no such incident" in unknown.output
