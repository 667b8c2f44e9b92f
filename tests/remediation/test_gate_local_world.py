"""The approval gate on the reference night: the plan, the queued run, who may approve, what launches it,
the remediation itself, verification, the receipt and the undo. One world, in the story's order."""

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
from dw_dagster.tags import APPROVAL, APPROVAL_APPROVED, APPROVAL_PENDING, INCIDENT_ID, PLAN_ID
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, dagster_home
from dw_local.engineer import apply_and_deploy
from dw_local.world import LOCAL_COALESCE_TOKEN

pytestmark = pytest.mark.world
REGION_MAP = '"DW_PROD"."REF_PLANNING"."REGION_MAP"'


class Gate:
    def __init__(self, lw):
        """``lw``: night 60 watched, the reference night played (conftest ``reference_world``)."""
        self.lw = lw
        self.daemon = LocalDaemon(lw)
        self.diagnosed = self.daemon.tick()
        self.store = IncidentStore(self.daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
        (self.incident,) = self.store.list(status="open")
        self.book = ApprovalBook(self.store, load_context_file(self.daemon.settings.context_file))
        (self.plan,) = self.book.plans(self.incident.incident_id)
        # The diagnosis tick's remediation sensor already submits the plan's run; the next one adds nothing.
        self.held = self.daemon.tick()
        (self.run_id,) = self.diagnosed.submitted + self.held.submitted

    def cli(self, *args: str) -> Result:
        """``dw-dagster ...`` as a person types it, run in this process (the replay test runs it as a program)."""
        env = {**self.lw.env(), "DAGSTER_HOME": str(dagster_home(self.lw.root))}
        return CliRunner().invoke(main, list(args), env=env)

    def run(self) -> dg.DagsterRun:
        return self.daemon.instance.get_run_by_id(self.run_id)

    def region_map(self) -> dict[int, tuple]:
        with self.lw.snowflake.connect() as conn:
            cur = conn.cursor()
            cur.execute(
                f'SELECT "ORGANIZATION_ID", "WAREHOUSE_CODE", "WAREHOUSE_NAME", "REGION" FROM {REGION_MAP}'
            )
            return {int(r[0]): tuple(r[1:]) for r in cur.fetchall()}


@pytest.fixture(scope="module")
def gate(reference_world) -> Gate:
    return Gate(reference_world[0])


def test_the_plan_proposes_the_map_row_the_node_diff_and_a_scoped_rerun(gate: Gate):
    plan = gate.plan
    (row,) = plan.of_kind(ProposalKind.REFERENCE_ROW)
    assert row.owners == ["planning-ops"]
    values = row.reference_row.values
    assert (values["ORGANIZATION_ID"], values["WAREHOUSE_CODE"], values["REGION"]) == (7120, "DC7", "South")
    assert row.reference_row.missing() == ["WAREHOUSE_NAME"], "EBS does not know the warehouse's name"
    # Where each drafted value came from, as its owner reads it: the table the draft query read.
    assert row.reference_row.drafted_from["WAREHOUSE_CODE"] == "RAW_EBS.MTL_PARAMETERS"
    (node,) = plan.of_kind(ProposalKind.NODE_CHANGE)
    assert node.owners == ["inventory-analytics"]
    diff = node.node_change.diff
    assert "-  INNER JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }}" in diff
    assert "+  LEFT JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }}" in diff
    assert """COALESCE("DIM_WAREHOUSE"."REGION", 'UNMAPPED')""" in diff
    assert "+- name: NO_UNMATCHED_DIM_WAREHOUSE" in diff
    (rerun,) = plan.of_kind(ProposalKind.SCOPED_RERUN)
    assert rerun.rerun.include_selector.endswith("{name: FCT_INVENTORY_POSITION}+")
    assert "{name: DIM_WAREHOUSE}" in rerun.rerun.include_selector and rerun.rerun.environment_id == "2"
    assert set(plan.required_teams) == {"planning-ops", "inventory-analytics"}
    kinds = {e.kind: e for e in plan.expectations}
    assert (
        kinds["back_to_baseline"].target == 31
        and kinds["node_test_passed"].subject == "NO_UNMATCHED_DIM_WAREHOUSE"
    )


def test_the_proposal_reaches_the_owners_threads(gate: Gate):
    messages = httpx.get(f"{gate.lw.slack_url}/_sink/messages").json()["messages"]
    proposals = [m for m in messages if m["thread_ts"] and gate.plan.plan_id in (m["text"] or "")]
    assert {m["channel"] for m in proposals} == {"#inventory-analytics", "#planning-ops"}
    assert "--set WAREHOUSE_NAME=..." in proposals[0]["text"] + str(proposals[0]["blocks"])
    records = gate.daemon.instance.fetch_materializations(dg.AssetKey(["dw", "incidents"]), limit=1).records
    shown = records[0].asset_materialization.metadata["proposed_fix"].value
    assert "+  LEFT JOIN" in shown and "dw-dagster approve" in shown, (
        "the UI shows the plan and how to approve"
    )


def test_the_remediation_run_is_queued_and_stays_queued_across_ticks(gate: Gate):
    run = gate.run()
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert run.tags[APPROVAL] == APPROVAL_PENDING and run.tags[PLAN_ID] == gate.plan.plan_id
    for _ in range(2):
        outcome = gate.daemon.tick()
        assert outcome.submitted == [] and outcome.launched == []
    assert gate.run().status == dg.DagsterRunStatus.QUEUED


def test_a_non_owner_cannot_approve(gate: Gate):
    buyer = gate.cli("approve", gate.incident.incident_id, "--as", "Luis Romero")
    assert buyer.exit_code != 0 and "not an owner of plan" in buyer.output
    itself = gate.cli("approve", gate.incident.incident_id, "--as", "dw-dagster")
    assert itself.exit_code != 0 and "not a member of any team" in itself.output
    stranger = gate.cli("approve", gate.incident.incident_id, "--as", "Mallory")
    assert stranger.exit_code != 0 and "not a member of any team" in stranger.output
    assert gate.book.approvals(gate.plan) == []
    assert gate.run().tags[APPROVAL] == APPROVAL_PENDING


def test_the_map_owner_must_name_what_cannot_be_drafted(gate: Gate):
    out = gate.cli("approve", gate.incident.incident_id, "--as", "Dana Ortiz")
    assert out.exit_code != 0 and "--set WAREHOUSE_NAME=" in out.output
    assert gate.book.approvals(gate.plan) == []


def test_an_approval_tag_typed_at_launch_is_refused_by_the_first_op(gate: Gate):
    before = gate.region_map()
    job = gate.daemon.defs.resolve_job_def("remediate_incident")
    tags = {INCIDENT_ID: gate.incident.incident_id, PLAN_ID: gate.plan.plan_id, APPROVAL: APPROVAL_APPROVED}
    result = job.execute_in_process(instance=gate.daemon.instance, tags=tags, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "check_approval" and "is not the run dw-dagster submitted" in str(
        failure.event_specific_data.error
    )
    assert gate.region_map() == before
    assert gate.store.events(gate.incident.incident_id, kind="refused")


def test_a_partial_approval_does_not_launch(gate: Gate):
    out = gate.cli("approve", gate.incident.incident_id, "--as", "Priya Raman")
    assert out.exit_code == 0, out.output
    assert "waiting for planning-ops" in out.output
    assert gate.run().tags[APPROVAL] == APPROVAL_PENDING
    assert gate.run().tags["dw/approvals_needed"] == "planning-ops"
    assert gate.daemon.tick().launched == []
    assert gate.run().status == dg.DagsterRunStatus.QUEUED
    events = gate.daemon.instance.all_logs(gate.run().run_id)
    assert any("Approved by Priya Raman for inventory-analytics" in (e.message or "") for e in events)


def test_every_owner_approves_then_it_remediates_verifies_and_writes_the_receipt(gate: Gate):
    out = gate.cli(
        "approve",
        gate.incident.incident_id,
        "--as",
        "dana.ortiz@distributor.example",
        "--set",
        "WAREHOUSE_NAME=Dallas",
    )
    assert out.exit_code == 0, out.output
    assert gate.run().tags[APPROVAL] == APPROVAL_APPROVED
    (node,) = [p.node_change for p in gate.plan.of_kind(ProposalKind.NODE_CHANGE)]
    apply_and_deploy(gate.lw.coalesce_url, LOCAL_COALESCE_TOKEN, node)
    assert gate.daemon.tick().launched == [dg.DagsterRunStatus.SUCCESS]

    assert gate.region_map()[7120] == ("DC7", "Dallas", "South")
    (event,) = gate.store.events(gate.incident.incident_id, kind="receipt")
    receipt = Receipt.model_validate(event.detail)
    assert receipt.verified and all(v.passed for v in receipt.verification)
    by_kind = {v.expectation.kind: v for v in receipt.verification}
    assert by_kind["back_to_baseline"].observed["value"] == 31
    assert by_kind["node_test_passed"].passed
    assert {a.approver for a in receipt.approvals} == {"Priya Raman", "Dana Ortiz"}
    assert receipt.dagster_run_id == gate.run().run_id
    run = gate.lw.coalesce_client().get_run(receipt.coalesce_run_id)
    assert run.user_credentials.snowflake_username == "PRIYA_RAMAN", (
        "the rerun runs as the approving node owner"
    )
    assert run.run_details.include_nodes_selector == receipt.proposals[-1].rerun.include_selector
    assert gate.store.get(gate.incident.incident_id).status == "resolved"
    messages = httpx.get(f"{gate.lw.slack_url}/_sink/messages").json()["messages"]
    assert any("Resolved" in (m["text"] or "") for m in messages if m["channel"] == "#buyers")
    assert any(f"Receipt {gate.plan.plan_id}" in (m["text"] or "") for m in messages)
    materializations = gate.daemon.instance.fetch_materializations(
        dg.AssetKey(["dw", "incidents"]), limit=1
    ).records
    assert "receipt" in materializations[0].asset_materialization.metadata


def test_the_rerun_counts_for_the_incident_night_and_opens_no_new_incident(gate: Gate):
    (receipt,) = [
        Receipt.model_validate(e.detail) for e in gate.store.events(gate.incident.incident_id, kind="receipt")
    ]
    restored = next(v for v in receipt.verification if v.expectation.kind == "rows_restored")
    assert restored.passed and restored.observed == {"value": 10_260, "expected": 9_000 + 1_260}
    outcome = gate.daemon.tick()
    assert outcome.runs_requested == 1, "the run sensor checks the rebuilt tables"
    runs = gate.daemon.instance.get_runs(
        dg.RunsFilter(tags={"dw/coalesce_run_id": str(receipt.coalesce_run_id)})
    )
    assert runs and runs[0].tags["dw/business_date"] == "2025-06-16", (
        "the rerun rebuilt Monday's business date"
    )
    assert gate.store.list(status="open") == [], "the step the fix makes in row counts is not a new incident"


def test_a_re_execution_is_not_an_approval(gate: Gate):
    job = gate.daemon.defs.resolve_job_def("remediate_incident")
    result = job.execute_in_process(
        instance=gate.daemon.instance, tags=dict(gate.run().tags), raise_on_error=False
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "check_approval"


def test_re_executing_steps_of_the_approved_run_changes_nothing(gate: Gate):
    """What the UI's "Re-execute from failure" or "Re-execute selected steps" does: a new run, with the
    parent's tags, that skips the first op. Every step that changes something checks the record itself."""
    from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.definitions.repository_definition import RepositoryLoadData
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    reruns_before = len(gate.store.events(gate.incident.incident_id, kind="rerun"))
    storage = gate.daemon.instance.defs_state_storage
    # As a run worker the code server launches: the load data names the state versions to load.
    load_data = RepositoryLoadData(
        cacheable_asset_data={},
        reconstruction_metadata={},
        defs_state_info=storage.get_latest_defs_state_info(),
    )
    repo = ReconstructableRepository.for_module("dw_dagster.definitions", "defs").with_repository_load_data(
        load_data
    )
    # Loading the code location here installs a process-wide load context holding this world's state:
    # scope it, so later worlds in this worker load their own, as a fresh run worker would.
    with set_defs_state_storage(storage), DefinitionsLoadContext.scoped(DefinitionsLoadContext.get()):
        result = dg.execute_job(
            repo.get_reconstructable_job("remediate_incident"),
            instance=gate.daemon.instance,
            # The UI carries the parent's tags over, the approval tag included.
            tags=dict(gate.run().tags),
            reexecution_options=dg.ReexecutionOptions(gate.run_id, step_selection=["scoped_rerun"]),
            raise_on_error=False,
        )
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "scoped_rerun" and "re-execution is not an approval" in str(
        failure.event_specific_data.error
    )
    assert len(gate.store.events(gate.incident.incident_id, kind="rerun")) == reruns_before, (
        "no second Coalesce rerun"
    )


def test_undoing_the_map_row_restores_the_previous_state(gate: Gate):
    assert 7120 in gate.region_map()
    buyer = gate.cli("undo", gate.incident.incident_id, "--as", "Luis Romero")
    assert buyer.exit_code != 0 and "does not own" in buyer.output and 7120 in gate.region_map()
    out = gate.cli("undo", gate.incident.incident_id, "--as", "Dana Ortiz")
    assert out.exit_code == 0, out.output
    after = gate.region_map()
    assert 7120 not in after and len(after) == 6
    again = gate.cli("undo", gate.incident.incident_id, "--as", "Dana Ortiz")
    assert again.exit_code != 0 and "no change to undo" in again.output
