"""The MCP server as a coding agent meets it: the SDK's own client starts `dw-dagster mcp` over stdio against
the distributor's local world on the reference night (incident diagnosed, its fix proposed and held), lists
the tools and calls each; errors come back as tool errors with a clear message."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import dagster as dg
import httpx
import pytest
from mcp import Client, StdioServerParameters

from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, dagster_home
from dw_local.world import LOCAL_SNOWFLAKE_PASSWORD
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = [pytest.mark.world, pytest.mark.timeout(1500)]
DW_DAGSTER = str(Path(sys.executable).parent / "dw-dagster")


@pytest.fixture(scope="module")
def calls(seeded_world):
    """Tonight's reference night through the real machinery, then one stdio session of the MCP server
    calling every tool; the results by name."""
    lw = seeded_world
    daemon = LocalDaemon(lw)
    DistributorWorld().play_reference_night(lw.snowflake, lw.coalesce_client())
    daemon.tick()  # checks fail, the incident opens and is diagnosed
    daemon.tick()  # the fix is proposed, its run held for the owners
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
    (incident,) = store.list(status="open")
    env = {**lw.env(), "DAGSTER_HOME": str(dagster_home(lw.root))}
    params = StdioServerParameters(command=DW_DAGSTER, args=["mcp"], env=env, cwd=str(lw.root.parent))
    iid = incident.incident_id
    caller = "Claude Code for Priya Raman"

    async def session() -> dict:
        out = {}
        async with Client(params, read_timeout_seconds=120) as client:
            out["tools"] = (await client.list_tools()).tools
            todo = {
                "list": ("list_incidents", {}),
                "show": ("show_incident", {"incident_id": iid}),
                "proposals": ("incident_proposals", {"incident_id": iid}),
                "down": ("trace_lineage", {"asset": "ref_planning/region_map"}),
                "down_column": ("trace_lineage", {"asset": "ref_planning/region_map", "column": "REGION"}),
                "up": ("trace_lineage", {"asset": "FCT_INVENTORY_POSITION", "direction": "upstream"}),
                "history": ("check_history", {"check": "total_network_onhand_units", "nights": 5}),
                "missing": ("show_incident", {"incident_id": "INC-20990101-000000"}),
                "unknown_asset": ("trace_lineage", {"asset": "inventory/fct_inventory_positon"}),
                "unknown_column": (
                    "trace_lineage",
                    {"asset": "inventory/fct_inventory_position", "column": "NO_SUCH"},
                ),  # fmt: skip
                "unknown_check": ("check_history", {"check": "total_nothing"}),
                # The actions, within the gates.
                "quality": ("run_quality_check", {"assets": ["inventory/fct_inventory_position"], "caller": caller}),
                "quality_none": ("run_quality_check", {"assets": ["ref_planning/region_map"], "caller": caller}),
                "radius": ("blast_radius", {"asset": "ref_planning/region_map"}),
                "note": ("send_slack_alert", {"incident_id": iid, "caller": caller,
                                              "message": "Looking at the <@U0ALL> DC7 mapping now"}),
                "diagnose": ("diagnose_incident", {"incident_id": iid, "caller": caller}),
                "fix": ("propose_fix", {"incident_id": iid, "caller": caller}),
            }  # fmt: skip
            for name, (tool, args) in todo.items():
                out[name] = await client.call_tool(tool, args)
        return out

    out = anyio.run(session)
    # What the actions left: the runs held for approval, and what the Slack stand-in received.
    pending = daemon.instance.get_runs(dg.RunsFilter(tags={"dw/approval": "pending"}))
    out["held"] = [r.status for r in pending]
    quality = out["quality"].structured_content or {}
    out["quality_run"] = daemon.instance.get_run_by_id(quality.get("run_id", ""))
    out["slack"] = httpx.get(f"{lw.slack_url}/_sink/messages").json()["messages"]
    return out, incident


def test_the_tools_are_listed_with_typed_schemas_and_none_approves(calls):
    out, _ = calls
    tools = {t.name: t for t in out["tools"]}
    acting = {"run_quality_check", "diagnose_incident", "send_slack_alert", "propose_fix"}
    assert set(tools) == {"list_incidents", "show_incident", "trace_lineage", "check_history",
                          "incident_proposals", "blast_radius", *acting}  # fmt: skip
    for t in tools.values():
        assert t.output_schema and t.output_schema["type"] == "object", t.name
        assert bool(t.annotations.read_only_hint) is (t.name not in acting), t.name
        assert not t.annotations.destructive_hint, t.name
    assert tools["list_incidents"].input_schema["properties"]["status"]["enum"] == ["open", "all"]
    assert not any(word in " ".join(tools) for word in ("approve", "reject", "release", "deploy"))


def test_the_actions_stay_within_the_gates(calls):
    out, incident = calls
    for name in ("quality", "radius", "note", "diagnose", "fix"):
        assert not out[name].is_error, (name, out[name].content)
    # The checks ran now as a Dagster run, tagged with who asked, and each reports its result.
    quality = out["quality"].structured_content
    assert quality["run_id"] and quality["status"] == "SUCCESS"
    # A run of the checks job, which the UI names as its target (not the implicit asset job it shows none for).
    assert out["quality_run"].job_name == "quality_checks"
    assert {r["check"] for r in quality["results"]} >= {"volume", "total_network_onhand_units"}
    assert all(r["passed"] is not None for r in quality["results"]), quality["results"]
    assert (
        out["quality_none"].is_error
        and "no checks on ref_planning/region_map" in out["quality_none"].content[0].text
    )
    # The blast radius of any asset: who it reaches and when they read it next.
    radius = out["radius"].structured_content["blast_radius"]
    reached = {a["asset_key"]: a for a in radius["assets"]}
    assert "inventory/fct_inventory_position" in reached
    assert reached["thoughtspot/network_days_of_supply"]["next_read"]
    # Diagnosed again: the same cause.
    assert out["diagnose"].structured_content["diagnosis"]["classification"] == "value_loss"
    # The fix asked for is the plan waiting for the owners: nothing approved, the run still held.
    plan = out["fix"].structured_content["plan"]
    assert plan["state"] == "waiting for approval" and plan["approved"] == []
    assert out["held"] and all(status == dg.DagsterRunStatus.QUEUED for status in out["held"])
    # The note is in the incident's owner threads, naming who sent it; its text cannot mention anyone.
    notes = [m for m in out["slack"] if "Note from Claude Code for Priya Raman" in str(m.get("blocks"))]
    assert notes and all(m["thread_ts"] for m in notes)
    assert "<@U0ALL>" not in str(notes[0]["blocks"]) and "&lt;@U0ALL&gt;" in str(notes[0]["blocks"])


def test_list_and_show_the_incident_with_its_diagnosis_and_blast_radius(calls):
    out, incident = calls
    listed = out["list"]
    assert not listed.is_error, listed.content
    assert [i["incident_id"] for i in listed.structured_content["incidents"]] == [incident.incident_id]
    assert incident.incident_id in listed.content[0].text
    show = out["show"]
    assert not show.is_error, show.content
    detail = show.structured_content
    assert detail["diagnosis"]["classification"] == "value_loss", detail["diagnosis"]["cause"]
    assert any(k["value"] == "7120" for k in detail["diagnosis"]["keys"])
    affected = {a["asset_key"] for a in detail["blast_radius"]["assets"]}
    assert "mart/mart_days_of_supply" in affected
    assert detail["findings"] and all(f["business_date"] for f in detail["findings"])
    assert "7120" in show.content[0].text


def test_proposals_say_who_still_has_to_approve(calls):
    out, _ = calls
    r = out["proposals"]
    assert not r.is_error, r.content
    (plan,) = r.structured_content["plans"]
    assert plan["state"] == "waiting for approval" and plan["approved"] == []
    waiting = {w["team"]: w["members"] for w in plan["waiting_for"]}
    assert set(waiting) == {"inventory-analytics", "planning-ops"}
    assert "Priya Raman" in waiting["inventory-analytics"] and "Dana Ortiz" in waiting["planning-ops"]
    assert plan["run_id"], "the held run is named"
    assert "waiting for" in r.content[0].text and "LEFT JOIN" in r.content[0].text


def test_lineage_reaches_the_systems_around_the_pipeline(calls):
    out, _ = calls
    down = out["down"].structured_content
    reached = {a["asset_key"] for a in down["assets"]}
    assert "inventory/dim_warehouse" in reached and "thoughtspot/network_days_of_supply" in reached
    liveboard = next(a for a in down["assets"] if a["asset_key"] == "thoughtspot/network_days_of_supply")
    assert liveboard["reads"], "who reads the Liveboard, and when"
    # A column's trace follows that column only: REGION ends in the fact (the marts aggregate it away),
    # so the Liveboard, which reads a mart, is not on it.
    column = out["down_column"].structured_content
    cols = {(c["asset_key"], c["column"]) for c in column["columns"]}
    assert ("inventory/fct_inventory_position", "REGION") in cols
    assert not any(c[0].startswith("mart/") for c in cols)
    assert "thoughtspot/network_days_of_supply" not in {a["asset_key"] for a in column["assets"]}
    up = out["up"].structured_content
    assert up["asset_key"] == "inventory/fct_inventory_position"
    assert {"oracle_ebs/mtl_onhand_quantities_detail", "qlik_replicate/ebs_inventory_cdc"} <= {
        a["asset_key"] for a in up["assets"]
    }


def test_check_history_shows_the_nights_recorded(calls):
    out, incident = calls
    r = out["history"]
    assert not r.is_error, r.content
    nights = r.structured_content["nights"]
    assert len(nights) == 5 and nights[-1]["business_date"] == incident.business_date.isoformat()
    assert nights[-1]["incident_night"] and not any(n["incident_night"] for n in nights[:-1])
    assert "total_network_onhand_units" in r.content[0].text


def test_errors_are_tool_errors_with_a_clear_message_and_no_secret(calls):
    out, _ = calls
    expected = {
        "missing": "INC-20990101-000000: no such incident",
        "unknown_asset": "did you mean inventory/fct_inventory_position",
        "unknown_column": "has no column 'NO_SUCH'",
        "unknown_check": "'total_nothing': no such check",
    }
    for name, text in expected.items():
        r = out[name]
        assert r.is_error, name
        message = r.content[0].text
        assert text in message and "Traceback" not in message and LOCAL_SNOWFLAKE_PASSWORD not in message
