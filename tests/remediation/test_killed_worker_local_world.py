"""Issue #29: a remediation worker killed between the reference row's insert and its change record, on the local
world's reference night. The run's own process is killed (SIGKILL) as it sends the warehouse the record of
the row it has just added, and Dagster's run monitoring marks the run failed. The next tick of the proposals
sensor writes the crash receipt (the row found in its table from the intent the run recorded, and recorded as
the run's change), escalates to the owners and submits the plan again; ``dw-dagster undo`` still deletes the
row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import httpx
import pytest
from click.testing import CliRunner, Result

from dw_dagster.app.cli import main
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import Receipt
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.tags import APPROVAL, APPROVAL_APPROVED, APPROVAL_PENDING
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, dagster_home

pytestmark = pytest.mark.world
REGION_MAP = '"DW_PROD"."REF_PLANNING"."REGION_MAP"'
WORKER = Path(__file__).with_name("killed_worker.py")
REPO = Path(__file__).resolve().parents[2]


def _cli(lw, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={**lw.env(), "DAGSTER_HOME": str(dagster_home(lw.root))})


def _region_rows(lw, org: int) -> list[tuple]:
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute(f'SELECT "WAREHOUSE_NAME" FROM {REGION_MAP} WHERE "ORGANIZATION_ID" = %s', (org,))
        return cur.fetchall()


def test_a_worker_killed_between_the_insert_and_its_record_leaves_a_receipt_an_escalation_and_an_undo(
    reference_world,
):
    lw, _ = reference_world  # night 60 watched, the reference night played
    daemon = LocalDaemon(lw)
    (run_id,) = daemon.tick().submitted + daemon.tick().submitted
    store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
    (incident,) = store.list(status="open")
    iid = incident.incident_id
    book = ApprovalBook(store, load_context_file(daemon.settings.context_file))
    for who in (["Priya Raman"], ["Dana Ortiz", "--set", "WAREHOUSE_NAME=Dallas"]):
        out = _cli(lw, "approve", iid, "--as", *who)
        assert out.exit_code == 0, out.output
    assert daemon.instance.get_run_by_id(run_id).tags[APPROVAL] == APPROVAL_APPROVED

    # The run's worker, in its own process, dies as it records the row it has just added.
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home(lw.root))}
    worker = subprocess.run([sys.executable, str(WORKER), env["DAGSTER_HOME"], run_id], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert worker.returncode == -9, worker.stderr[-3000:]
    assert _region_rows(lw, 7120) == [("Dallas",)], "the row is in"
    assert store.events(iid, kind="change") == [] and store.events(iid, kind="applying"), "its record is not"
    run = daemon.instance.get_run_by_id(run_id)
    assert run.status == dg.DagsterRunStatus.STARTED
    # Dagster's run monitoring finds the worker gone and fails the run (what its daemon reports).
    daemon.instance.report_run_failed(run, "The run worker for this run died (killed)")

    outcome = daemon.tick()
    receipts = {
        e.detail["dagster_run_id"]: Receipt.model_validate(e.detail)
        for e in store.events(iid, kind="receipt")
    }
    receipt = receipts[run_id]
    assert not receipt.verified and "stopped part-way" in receipt.failure and "died" in receipt.failure
    assert [(str(c.key_value), c.added) for c in receipt.changes] == [("7120", True)]
    assert "recorded by this receipt" in receipt.failure
    assert any("dw-dagster undo" in step and "7120" in step for step in receipt.undo)
    texts = [m["text"] or "" for m in httpx.get(f"{lw.slack_url}/_sink/messages").json()["messages"]]
    assert any(":rotating_light: Needs a person" in t and run_id in t for t in texts), "the owners are told"
    (second,) = outcome.submitted
    assert daemon.instance.get_run_by_id(second).tags[APPROVAL] == APPROVAL_PENDING, "submitted again, held"
    assert daemon.tick().submitted == [] and book.binding(book.plans(iid)[-1]).run_id == second

    out = _cli(lw, "undo", iid, "--as", "Dana Ortiz")
    assert out.exit_code == 0 and "undid: Added ORGANIZATION_ID 7120" in out.output, out.output
    assert _region_rows(lw, 7120) == [], "the undo still works"
