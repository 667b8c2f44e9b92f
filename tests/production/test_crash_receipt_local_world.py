"""A remediation run that dies part-way, on the local world's reference night: the reference row is added,
then Coalesce stops answering while the run waits for the node deploy and the step dies on an error no step
foresaw. The next tick writes the receipt of what was applied (and how to undo it), escalates in the
incident's threads and submits the plan again; re-approved through the same gate, the new run finishes the
fix without adding the row twice."""

from __future__ import annotations

import dagster as dg
import httpx
import pytest
from click.testing import CliRunner, Result

from dw_dagster.app.cli import main
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import ProposalKind, Receipt
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.tags import APPROVAL, APPROVAL_APPROVED, APPROVAL_PENDING, PLAN_ID
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, dagster_home
from dw_local.engineer import apply_and_deploy
from dw_local.world import LOCAL_COALESCE_TOKEN

pytestmark = pytest.mark.world
REGION_MAP = '"DW_PROD"."REF_PLANNING"."REGION_MAP"'


class Night:
    def __init__(self, lw):
        """``lw``: night 60 watched, the reference night played (conftest ``reference_world``)."""
        self.lw = lw
        self.daemon = LocalDaemon(lw)
        diagnosed = self.daemon.tick()
        self.store = IncidentStore(self.daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
        (self.incident,) = self.store.list(status="open")
        self.book = ApprovalBook(self.store, load_context_file(self.daemon.settings.context_file))
        (self.plan,) = self.book.plans(self.incident.incident_id)
        (self.first_run,) = diagnosed.submitted + self.daemon.tick().submitted

    def cli(self, *args: str) -> Result:
        env = {**self.lw.env(), "DAGSTER_HOME": str(dagster_home(self.lw.root))}
        return CliRunner().invoke(main, list(args), env=env)

    def approve_all(self) -> None:
        for who in (["Priya Raman"], ["Dana Ortiz", "--set", "WAREHOUSE_NAME=Dallas"]):
            out = self.cli("approve", self.incident.incident_id, "--as", *who)
            assert out.exit_code == 0, out.output

    def run(self, run_id: str) -> dg.DagsterRun:
        return self.daemon.instance.get_run_by_id(run_id)

    def fault(self, **body) -> None:
        auth = {"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
        httpx.post(f"{self.lw.coalesce_url}/_sim/faults", json=body, headers=auth).raise_for_status()

    def region_rows(self, org: int) -> list[tuple]:
        with self.lw.snowflake.connect() as conn:
            cur = conn.cursor()
            cur.execute(f'SELECT "WAREHOUSE_NAME" FROM {REGION_MAP} WHERE "ORGANIZATION_ID" = %s', (org,))
            return cur.fetchall()

    def receipts(self) -> dict[str, Receipt]:
        events = self.store.events(self.incident.incident_id, kind="receipt")
        return {e.detail["dagster_run_id"]: Receipt.model_validate(e.detail) for e in events}

    def slack(self) -> list[str]:
        return [m["text"] or "" for m in httpx.get(f"{self.lw.slack_url}/_sink/messages").json()["messages"]]


@pytest.fixture(scope="module")
def night(reference_world) -> Night:
    return Night(reference_world[0])


def test_a_run_that_dies_part_way_leaves_a_receipt_an_escalation_and_a_plan_to_approve_again(night: Night):
    night.approve_all()
    assert night.run(night.first_run).tags[APPROVAL] == APPROVAL_APPROVED
    # Coalesce answers 500 to every node read: the deploy wait dies after the row was added.
    night.fault(status=500, count=50, pathPrefix="/api/v1/environments/")
    assert night.daemon.dequeue() == [dg.DagsterRunStatus.FAILURE]
    night.fault(status=500, count=0)
    assert night.region_rows(7120) == [("Dallas",)]
    assert night.receipts() == {}, "the run died before its receipt"

    after = night.daemon.tick()
    receipt = night.receipts()[night.first_run]
    assert not receipt.verified and receipt.verification == []
    assert "stopped part-way (step await_node_deploy:" in receipt.failure and "500" in receipt.failure
    assert [str(c.key_value) for c in receipt.changes if c.added] == ["7120"]
    assert any("dw-dagster undo" in step for step in receipt.undo)
    assert {a.approver for a in receipt.approvals} == {"Priya Raman", "Dana Ortiz"}
    texts = night.slack()
    assert any(f"Receipt {night.plan.plan_id}" in t for t in texts)
    assert any(":rotating_light: Needs a person" in t and night.first_run in t for t in texts)
    # The plan is submitted again, held by the same gate: the earlier approvals approve nothing now.
    (second,) = after.submitted
    assert second != night.first_run
    assert night.run(second).tags[APPROVAL] == APPROVAL_PENDING
    assert night.run(second).tags[PLAN_ID] == night.plan.plan_id
    assert night.daemon.tick().submitted == [], "one new submission per failed run"
    assert night.run(second).status == dg.DagsterRunStatus.QUEUED

    night.approve_all()
    (node,) = [p.node_change for p in night.plan.of_kind(ProposalKind.NODE_CHANGE)]
    apply_and_deploy(night.lw.coalesce_url, LOCAL_COALESCE_TOKEN, node)
    assert night.daemon.tick().launched == [dg.DagsterRunStatus.SUCCESS]
    finished = night.receipts()[second]
    assert finished.verified
    assert [c.added for c in finished.changes if c.kind == "reference_row"] == [False], (
        "the row the dead run added is found as approved, not added twice"
    )
    assert night.region_rows(7120) == [("Dallas",)]
    assert night.store.get(night.incident.incident_id).status == "resolved"
