"""The reference night in Slack as its people read it, on the distributor's world through the real machinery
(local Snowflake, the Coalesce simulator, the Slack stand-in, the diagnosis and remediation jobs): the
proposal with its buttons for the held run, the receipt whole, then the resolution, in every thread's order;
each message linked to its run; `dw-dagster slack log` showing the blocks."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import dagster as dg
import httpx
import pytest
from click.testing import CliRunner
from slack_checks import check_limits, check_reads_like_slack, texts

from dw_dagster.app.cli import main
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import ProposalKind, Receipt
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.cli import slack
from dw_local.daemon import LocalDaemon, dagster_home
from dw_local.engineer import apply_and_deploy
from dw_local.world import LOCAL_COALESCE_TOKEN

pytestmark = pytest.mark.world
OWNER_CHANNELS = ("#inventory-analytics", "#planning-ops")


def _kind(m: dict) -> str:
    return m["metadata"]["event_payload"]["message_key"].split("|")[2]


@pytest.fixture(scope="module")
def night(reference_world):
    """Tonight's incident (the reference night, played after night 60: conftest ``reference_world``), its
    diagnosis and held run, both owners' approvals, the deployed node change and the remediation run that
    verified the fix; then everything the Slack stand-in received."""
    lw, _ = reference_world
    daemon = LocalDaemon(lw)
    diagnosed = daemon.tick()
    held = daemon.tick()  # the run is held: its proposal goes out with the buttons that name it
    (run_id,) = diagnosed.submitted + held.submitted
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
    (incident,) = store.list(status="open")
    env = {**lw.env(), "DAGSTER_HOME": str(dagster_home(lw.root))}
    cli = CliRunner()
    for args in (["--as", "Priya Raman"], ["--as", "Dana Ortiz", "--set", "WAREHOUSE_NAME=Dallas"]):
        out = cli.invoke(main, ["approve", incident.incident_id, *args], env=env)
        assert out.exit_code == 0, out.output
    from dw_dagster.context.models import load_context_file

    (plan,) = ApprovalBook(store, load_context_file(daemon.settings.context_file)).plans(incident.incident_id)
    (node,) = [p.node_change for p in plan.of_kind(ProposalKind.NODE_CHANGE)]
    apply_and_deploy(lw.coalesce_url, LOCAL_COALESCE_TOKEN, node)
    assert daemon.tick().launched == [dg.DagsterRunStatus.SUCCESS]
    (event,) = store.events(incident.incident_id, kind="receipt")
    messages = httpx.get(f"{lw.slack_url}/_sink/messages").json()["messages"]
    mine = [
        m
        for m in messages
        if (m.get("metadata") or {}).get("event_payload", {}).get("incident_id") == incident.incident_id
    ]
    return SimpleNamespace(
        lw=lw, daemon=daemon, incident=incident, plan=plan, run_id=run_id, env=env, messages=mine,
        receipt=Receipt.model_validate(event.detail),
    )  # fmt: skip


def _thread(night, channel: str) -> list[dict]:
    return [m for m in night.messages if m["channel"] == channel]


def test_each_thread_reads_incident_proposal_receipt_then_resolution(night):
    for channel in OWNER_CHANNELS:
        thread = _thread(night, channel)
        root, replies = thread[0], thread[1:]
        assert _kind(root) == "incident" and root["thread_ts"] is None
        assert {m["thread_ts"] for m in replies} == {root["ts"]}
        kinds = [_kind(m) for m in replies]
        assert "proposal" in kinds and "receipt" in kinds, kinds
        # The resolution comes last, after every part of the receipt.
        assert kinds[-1] == "resolved" and kinds.index("proposal") < kinds.index("receipt"), kinds
        assert [m["ts"] for m in thread] == sorted(m["ts"] for m in thread)
    buyers = _thread(night, "#buyers")
    assert [_kind(m) for m in buyers] == ["hold", "resolved"]
    assert "Hold expedite orders on 164 SKUs" in buyers[0]["blocks"][0]["text"]["text"]


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_the_receipt_reaches_slack_whole(night):
    r = night.receipt
    (node,) = [p.node_change for p in r.proposals if p.node_change]
    for channel in OWNER_CHANNELS:
        parts = [m for m in _thread(night, channel) if _kind(m) == "receipt"]
        for p in parts:
            check_limits(p)
        sections = "\n".join(
            b["text"]["text"] for p in parts for b in p["blocks"] if b["type"] == "section" and "text" in b
        )
        # Every section once, every approver, the node diff line by line, each check and each undo step.
        for heading in (
            "*Cause*",
            "*Evidence*",
            "*Approvals*",
            "*Changes*",
            "*Runs*",
            "*Verification*",
            "*Undo*",
        ):
            assert sections.count(heading) == 1, heading
        assert "Priya Raman" in sections and "WAREHOUSE_NAME = Dallas" in sections
        assert all(_escaped(line) in sections for line in node.diff.splitlines())
        assert all(_escaped(v.detail) in sections for v in r.verification)
        assert all(_escaped(u) in sections for u in r.undo)
        assert f"Coalesce run {r.coalesce_run_id}" in sections and _escaped(r.cause) in sections


def test_every_message_links_to_the_run_it_speaks_of(night):
    instance = night.daemon.instance
    diagnosis_runs = {r.run_id for r in instance.get_runs(dg.RunsFilter(job_name="diagnose_incident"))}
    for m in night.messages:
        links = set(re.findall(r"http://localhost:3000/runs/([0-9a-f-]{36})", texts(m)))
        kind = _kind(m)
        if kind in ("incident", "hold"):
            assert links & diagnosis_runs, (kind, links)
        elif kind in ("proposal", "approval", "awaiting_deploy", "receipt", "resolved"):
            assert night.run_id in links, (kind, links)
        else:
            assert links or "tag%3Adw%2Fincident_id" in texts(m), kind
    assert night.receipt.dagster_run_id == night.run_id


def test_the_proposal_buttons_name_the_plan_and_the_held_run(night):
    for channel in OWNER_CHANNELS:
        (last,) = [m for m in _thread(night, channel) if _kind(m) == "proposal"][-1:]
        (actions,) = [b for b in last["blocks"] if b["type"] == "actions"]
        buttons = {e["action_id"]: e for e in actions["elements"]}
        want = {"plan_id": night.plan.plan_id, "run_id": night.run_id}
        assert json.loads(buttons["dw_approve"]["value"]) == want == json.loads(buttons["dw_reject"]["value"])
        assert night.plan.plan_id in last["text"] and "--set WAREHOUSE_NAME=..." in texts(last)


def test_nothing_reads_like_python_or_markdown(night):
    for m in night.messages:
        check_limits(m)
        check_reads_like_slack(m)
    whole = "\n".join(texts(m) + m["text"] for m in night.messages)
    assert "-1.8%" in whole and "+0.2%" in whole and "<!date^" in whole
    assert not re.search(r"-1\.79\d", whole)


def test_slack_log_shows_what_a_person_sees(night):
    args = ["log", "--root", str(night.lw.root), "--channel", "#planning-ops", "--tz", "America/Chicago"]
    out = CliRunner().invoke(slack, args)
    assert out.exit_code == 0, out.output
    shown = out.output
    assert shown.startswith("##### #planning-ops")
    for needle in [
        f"ERROR · {night.incident.incident_id}", "Gap units: 41,800", "Network onhand units change: -1.8%",
        "[Approve] [Reject]", f"Receipt · {night.incident.incident_id} · verified", "Resolved",
        "  ↳ [",
    ]:  # fmt: skip
        assert needle in shown, needle
    assert re.search(r"\d\d:\d\d C[DS]T\b", shown), "times in the reader's zone"
    assert "<!date^" not in shown and "&lt;" not in shown, "tokens and entities are rendered"
    assert shown.index("Receipt ·") < shown.rindex("Resolved")
    bad = CliRunner().invoke(slack, ["log", "--root", str(night.lw.root), "--tz", "Mars/Olympus"])
    assert bad.exit_code != 0 and "IANA time zone" in bad.output
