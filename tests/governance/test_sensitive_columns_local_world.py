"""Sensitive new columns on the seeded distributor world, over the real servers: a column added to a source
after the last state refresh, recognised by a bounded sample of its values, flagged once to the governance
owners with its column-lineage path and alerted in their channel; a column that is not sensitive raises
nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
import yaml

from dw_dagster.governance.columns import last_seen
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.coalesce_sim.project_specs import column_id, node_id
from dw_local.world import sim_control
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world  # the seeded distributor world

WORLD = Path(__file__).resolve().parents[2] / "local" / "dw_local" / "worlds" / "distributor"
ITEMS = ("RAW_EBS", "MTL_SYSTEM_ITEMS_B")
STAGE = ("STAGE", "STG_ITEMS")


def _add_column(
    coalesce, location: str, name: str, column: str, parent: tuple[str, str] | None = None
) -> None:
    path = f"workspace/nodes/{node_id(location, name)}?environmentID=2"
    detail = sim_control(coalesce, "GET", path)
    new = {"name": column, "dataType": "VARCHAR(64)", "description": "", "nullable": True, "transform": ""}
    if parent:
        ref = {"nodeID": node_id(*parent), "columnID": column_id(*parent, column)}
        new["sources"] = [{"transform": "", "columnReferences": [ref]}]
    detail["metadata"]["columns"].append(new)
    sim_control(coalesce, "PUT", path, detail)


@pytest.fixture(scope="module")
def night(seeded_world, tmp_path_factory):
    from dw_local.daemon import LocalDaemon

    lw = seeded_world
    # The governance owners: a team of their own in a copy of the world's context file.
    context = yaml.safe_load((WORLD / "context.yaml").read_text())
    context["teams"]["privacy-office"] = {"name": "Privacy office", "slack_channel": "#privacy-office"}
    context["governance"] = {"owners": ["privacy-office"], "sample_rows": 25}
    context_file = tmp_path_factory.mktemp("governance") / "context.yaml"
    context_file.write_text(yaml.safe_dump(context))

    # An engineer adds two flexfields to the item master (no telling names) and carries one into the stage.
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        for column, value in (("ATTRIBUTE7", "078-05-1120"), ("ATTRIBUTE8", "STD")):
            cur.execute(
                f'ALTER TABLE "DW_PROD"."RAW_EBS"."MTL_SYSTEM_ITEMS_B" ADD COLUMN "{column}" VARCHAR(64)'
            )
            cur.execute(f'UPDATE "DW_PROD"."RAW_EBS"."MTL_SYSTEM_ITEMS_B" SET "{column}" = %s', (value,))
    coalesce = lw.coalesce_client()
    for column in ("ATTRIBUTE7", "ATTRIBUTE8"):
        _add_column(coalesce, *ITEMS, column)
    _add_column(coalesce, *STAGE, "ATTRIBUTE7", parent=ITEMS)
    sim_control(coalesce, "POST", "deploy", {"environmentID": "2"})

    # The daemon refreshes the Coalesce state as it starts: the new columns are already in its definitions,
    # so only the columns recorded by the last review (during the seeded history) tell that they are new.
    environ = dict(os.environ)  # the daemon points this process at the world, as a deployment would
    daemon = LocalDaemon(lw, env={"DW_CONTEXT_FILE": str(context_file)})
    played = json.loads((lw.root / "seeded.json").read_text())["nights_played"]
    tonight = DistributorWorld().play_night(lw.snowflake, coalesce, played)
    daemon.tick(at=tonight.watched_at)
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD"))
    first = _sensitive(store)
    # Recorded in the Dagster instance: the next review compares against them (a second night would cost CI
    # time; the diff itself is unit-tested on the e-commerce files).
    seen = last_seen(daemon.instance, "2")
    daemon.tick()  # a tick with no new run reviews nothing again
    yield lw, store, first, _sensitive(store), seen
    os.environ.clear()
    os.environ.update(environ)


def _sensitive(store: IncidentStore) -> list:
    return [
        e.detail
        for i in store.list()
        for e in store.events(i.incident_id, kind="finding")
        if e.detail["check_name"] == "sensitive_column"
    ]


def test_the_new_column_is_recognised_by_its_values_and_flagged_with_its_path(night):
    _, _, first, _, _ = night
    (finding,) = first  # ATTRIBUTE8 ('STD') raises nothing; the stage's ATTRIBUTE7 is on the path
    assert finding["asset_key"] == "raw_ebs/mtl_system_items_b" and finding["severity"] == "WARN"
    evidence = finding["evidence"]
    assert evidence["column"] == "ATTRIBUTE7" and evidence["category"] == "national_id"
    assert evidence["matched_by"] == "values" and evidence["matched"].endswith("sampled values")
    assert evidence["downstream_columns"] == ["stage/stg_items.ATTRIBUTE7"]
    assert evidence["owners"] == ["privacy-office"]
    assert "078-05-1120" not in json.dumps(finding), "a sampled value is never stored"


def test_it_is_flagged_once(night):
    _, _, first, after, seen = night
    assert after == first
    assert {"ATTRIBUTE7", "ATTRIBUTE8"} <= set(seen[node_id(*ITEMS)])
    assert "ATTRIBUTE7" in seen[node_id(*STAGE)]


def test_the_governance_owners_are_alerted_in_their_channel(night):
    lw, _, _, _, _ = night
    messages = httpx.get(f"{lw.slack_url}/_sink/messages").json()["messages"]
    alerts = [m for m in messages if m["channel"] == "#privacy-office"]
    assert alerts and any("ATTRIBUTE7" in json.dumps(m) for m in alerts)
