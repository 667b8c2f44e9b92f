"""Rejecting a proposed fix: only an owner, only with a reason; the run is canceled and nothing changes.
The domain here is at L2 (propose): the plan is made, the hold notice is proposed rather than sent. The
owner rejects with the Reject button in the local Slack (the stand-in signs the click as Slack does)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import dagster as dg
import httpx
import pytest
import yaml
from click.testing import CliRunner

from dw_dagster.app.cli import main
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, dagster_home
from dw_local.interactivity import click, start_endpoint
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def proposed(seeded_world, tmp_path_factory):
    context = yaml.safe_load(Path(seeded_world.env()["DW_CONTEXT_FILE"]).read_text())
    context["domains"]["inventory"]["autonomy"] = "L2"
    l2 = tmp_path_factory.mktemp("context") / "context.yaml"
    l2.write_text(yaml.safe_dump(context))
    env = {"DW_CONTEXT_FILE": str(l2)}
    daemon = LocalDaemon(seeded_world, env=env)
    world = DistributorWorld()
    world.play_night(seeded_world.snowflake, seeded_world.coalesce_client(), 60)
    daemon.tick()
    world.play_reference_night(seeded_world.snowflake, seeded_world.coalesce_client())
    outcome = daemon.tick()
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
    (incident,) = store.list(status="open")
    (run_id,) = outcome.submitted
    daemon.tick()  # the proposals sensor binds the plan to the run it submitted
    start_endpoint(seeded_world, dagster_home(seeded_world.root), env=env)
    return (
        daemon,
        store,
        incident,
        run_id,
        {**seeded_world.env(), **env, "DAGSTER_HOME": str(dagster_home(seeded_world.root))},
    )


def cli(env, *args):
    """``dw-dagster ...`` as a person types it, run in this process."""
    return CliRunner().invoke(main, list(args), env=env)


def test_at_l2_the_fix_is_proposed_and_the_hold_notice_only_proposed(proposed):
    daemon, store, incident, run_id, env = proposed
    messages = httpx.get(f"{daemon.lw.slack_url}/_sink/messages").json()["messages"]
    assert not [m for m in messages if m["channel"] == "#buyers"], "L2 sends nothing on its own"
    assert daemon.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.QUEUED


def test_only_an_owner_rejects_and_only_with_a_reason(proposed):
    daemon, store, incident, run_id, env = proposed
    out = cli(env, "reject", run_id, "--as", "Grace Kim", "--reason", "not now")
    assert out.exit_code != 0 and "not an owner" in out.output
    out = cli(env, "reject", run_id, "--as", "Dana Ortiz", "--reason", " ")
    assert out.exit_code != 0 and "needs a reason" in out.output
    assert daemon.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.QUEUED


def _held_message(daemon, channel: str) -> dict:
    messages = httpx.get(f"{daemon.lw.slack_url}/_sink/messages", params={"channel": channel}).json()[
        "messages"
    ]
    buttons = lambda m: [e.get("action_id") for b in m["blocks"] or [] for e in b.get("elements") or []]  # noqa: E731
    return next(m for m in messages if "dw_reject" in buttons(m))


def test_a_non_owner_clicking_reject_in_slack_is_refused(proposed):
    daemon, store, incident, run_id, env = proposed
    out = click(daemon.lw, _held_message(daemon, "#planning-ops")["ts"], "U0SOPPLN1", "Reject")
    assert "Grace Kim is not an owner of plan" in out["replies"][0]["text"]
    assert daemon.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.QUEUED
    assert any(
        "Grace Kim is not an owner" in e.detail["reason"]
        for e in store.events(incident.incident_id, kind="refused")
    )


def test_a_rejection_in_slack_cancels_the_run_and_changes_nothing(proposed):
    daemon, store, incident, run_id, env = proposed
    out = click(daemon.lw, _held_message(daemon, "#planning-ops")["ts"], "U0PLANOP1", "Reject")
    assert "Dana Ortiz rejected" in out["replies"][0]["text"], out
    assert daemon.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    book = ApprovalBook(store, load_context_file(env["DW_CONTEXT_FILE"]))
    (plan,) = book.plans(incident.incident_id)
    decision = book.decision(plan)
    assert (decision.kind, decision.by, decision.run_id) == ("rejected", "Dana Ortiz", run_id)
    assert "Reject button in Slack" in decision.reason
    messages = httpx.get(f"{daemon.lw.slack_url}/_sink/messages").json()["messages"]
    assert any("Dana Ortiz rejected" in (m["text"] or "") and m["thread_ts"] for m in messages)
    again = cli(env, "approve", incident.incident_id, "--as", "Priya Raman")
    assert again.exit_code != 0 and "no remediation run is waiting" in again.output
    assert daemon.tick().submitted == [], "a rejected plan is not submitted again"
    with daemon.lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute(
            'SELECT COUNT(*) FROM "DW_PROD"."REF_PLANNING"."REGION_MAP" WHERE "ORGANIZATION_ID" = 7120'
        )
        assert cur.fetchone()[0] == 0


# Slack posts a click on a link button to the Request URL too, and shows the person an error mark unless the
# app answers 200 within 3 seconds (the Slack stand-in holds the endpoint to both).
def test_a_link_button_click_is_acknowledged(proposed):
    daemon, *_ = proposed
    out = click(daemon.lw, _held_message(daemon, "#planning-ops")["ts"], "U0PLANOP1", "dw_open_run")
    assert out["interaction"]["acknowledged"] == 1, out["interaction"]["user_sees"]


def test_a_click_is_acknowledged_while_the_warehouse_is_slow(proposed):
    daemon, *_ = proposed
    snowflake = daemon.lw._procs["snowflake"].pid
    os.kill(snowflake, signal.SIGSTOP)  # a warehouse resuming, or a slow login: no answer for a while
    try:
        out = click(
            daemon.lw, _held_message(daemon, "#planning-ops")["ts"], "U0SOPPLN1", "Reject", wait_seconds=0
        )
    finally:
        os.kill(snowflake, signal.SIGCONT)
    assert out["interaction"]["acknowledged"] == 1, out["interaction"]["user_sees"]
