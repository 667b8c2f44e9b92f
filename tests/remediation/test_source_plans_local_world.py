"""Plans beyond the reference night's, each through the same gate on the local world: proposed with the
diagnosis, approved by every owning team with ``dw-dagster approve``, carried out by the remediation job
(the source's copies removed, the stopped source waited for, the node change deployed by its owner), the
scoped rerun, verification and the receipt; and the de-duplication undone."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result

from dw_dagster.app.cli import main
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import CauseClass
from dw_dagster.records.remediation import ProposalKind, Receipt
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, dagster_home
from dw_local.engineer import apply_and_deploy
from dw_local.world import LOCAL_COALESCE_TOKEN
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]
ONHAND = '"DW_PROD"."RAW_EBS"."MTL_ONHAND_QUANTITIES_DETAIL"'
DUPLICATED = {
    "kind": "duplicate_load",
    "table": "MTL_ONHAND_QUANTITIES_DETAIL",
    "where": {"ORGANIZATION_ID": 7020},
}


class Plans:
    def __init__(self, lw):
        self.lw = lw
        self.daemon = LocalDaemon(lw)
        self.world = DistributorWorld()
        self.store = IncidentStore(self.daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
        self.book = ApprovalBook(self.store, load_context_file(self.daemon.settings.context_file))
        self.night = self.world.last_played_night(lw.snowflake) + 1

    def play(self, fault: dict, expect: CauseClass):
        """Plays a night with ``fault``; the incident diagnosed as ``expect`` (a consequence elsewhere, a
        mart's row count, may open its own), its diagnosis and its plan."""
        # The daemon watches the last fix's rerun before the next night, as it would within a minute: its
        # checks read the tables that rerun built, not the next night's.
        self.daemon.tick()
        for incident in self.store.list(status="open"):
            self.store.set_status(incident.incident_id, "resolved")
        self.world.play_night(self.lw.snowflake, self.lw.coalesce_client(), self.night, [fault])
        self.night += 1
        outcome = self.daemon.tick()
        found = [(i, latest_diagnosis(self.store, i.incident_id)[0]) for i in self.store.list(status="open")]
        matching = [(i, d) for i, d in found if d.classification is expect]
        assert len(matching) == 1, [(i.title, d.classification) for i, d in found]
        ((incident, diagnosis),) = matching
        (plan,) = self.book.plans(incident.incident_id)
        return incident, diagnosis, plan, outcome

    def cli(self, *args: str) -> Result:
        env = {**self.lw.env(), "DAGSTER_HOME": str(dagster_home(self.lw.root))}
        return CliRunner().invoke(main, list(args), env=env)

    def approve(self, incident, *people: str) -> None:
        # The tick that proposed the plan submitted its run; the next one binds the run the daemon created
        # and posts the proposal the owners approve from.
        if self.book.binding(self.book.plans(incident.incident_id)[-1]) is None:
            assert self.daemon.tick().launched == [], "a held run launches only once approved"
        for person in people:
            out = self.cli("approve", incident.incident_id, "--as", person)
            assert out.exit_code == 0, out.output

    def receipt(self, incident) -> Receipt:
        (event,) = self.store.events(incident.incident_id, kind="receipt")
        return Receipt.model_validate(event.detail)

    def copies(self) -> int:
        with self.lw.snowflake.connect() as conn:
            cur = conn.cursor()
            cur.execute(
                f"SELECT COALESCE(SUM(N - 1), 0) FROM (SELECT COUNT(*) AS N FROM {ONHAND} GROUP BY "
                '"ONHAND_QUANTITIES_ID", "ORGANIZATION_ID", "INVENTORY_ITEM_ID", "SUBINVENTORY_CODE", '
                '"TRANSACTION_QUANTITY", "LAST_UPDATE_DATE", "_QLIK_LOADED_AT" HAVING COUNT(*) > 1)'
            )
            return int(cur.fetchone()[0])


@pytest.fixture(scope="module")
def plans(seeded_world) -> Plans:
    p = Plans(seeded_world)
    p.world.play_night(seeded_world.snowflake, seeded_world.coalesce_client(), p.night)
    p.night += 1
    assert p.daemon.tick().diagnoses == []
    return p


@pytest.fixture(scope="module")
def deduplicated(plans: Plans):
    incident, diagnosis, plan, _ = plans.play(DUPLICATED, CauseClass.DUPLICATION)
    copies = plans.copies()
    plans.approve(incident, "Omar Haddad", "Priya Raman")
    launched = plans.daemon.tick().launched
    return incident, diagnosis, plan, copies, launched


def test_a_duplicate_load_gets_a_dedupe_its_source_owner_approves_and_a_scoped_rerun(deduplicated):
    incident, diagnosis, plan, copies, _ = deduplicated
    assert diagnosis.classification is CauseClass.DUPLICATION and copies > 1000
    (dedupe,) = plan.of_kind(ProposalKind.DEDUPE)
    assert dedupe.owners == ["data-platform"], "the replication's owner confirms the copies"
    assert dedupe.dedupe.key_column == "ORGANIZATION_ID" and dedupe.dedupe.key_values == ["7020"]
    (rerun,) = plan.of_kind(ProposalKind.SCOPED_RERUN)
    assert rerun.rerun.include_selector == "{name: STG_ONHAND}+" and rerun.owners == ["inventory-analytics"]
    assert {e.kind for e in plan.expectations} >= {"no_duplicates", "reconciles", "back_to_baseline"}


def test_the_dedupe_runs_verifies_and_leaves_a_receipt(deduplicated, plans: Plans):
    incident, _, plan, copies, launched = deduplicated
    import dagster as dg

    assert launched == [dg.DagsterRunStatus.SUCCESS]
    assert plans.copies() == 0
    receipt = plans.receipt(incident)
    assert receipt.verified, [v.detail for v in receipt.verification]
    (change,) = receipt.changes
    assert change.kind == "dedupe" and change.rows == copies
    assert any("puts the" in step for step in receipt.undo)
    assert plans.store.get(incident.incident_id).status == "resolved"


def test_undoing_the_dedupe_puts_the_copies_back(deduplicated, plans: Plans):
    incident, _, _, copies, _ = deduplicated
    refused = plans.cli("undo", incident.incident_id, "--as", "Luis Romero")
    assert refused.exit_code != 0 and "does not own" in refused.output
    out = plans.cli("undo", incident.incident_id, "--as", "Omar Haddad")
    assert out.exit_code == 0, out.output
    assert plans.copies() == copies
    # Put right again for the next plans: the night's clean snapshot.
    fault = DUPLICATED
    plans.world.repair(plans.lw.snowflake, plans.lw.coalesce_client(), fault, night=plans.night - 1)
    assert plans.copies() == 0


@pytest.fixture(scope="module")
def caught_up(plans: Plans, deduplicated):
    incident, diagnosis, plan, _ = plans.play({"kind": "replication_stalled"}, CauseClass.STALE_INPUT)
    plans.approve(incident, "Omar Haddad", "Priya Raman")
    # Replication catches up: the missed business day is applied, as Qlik does after a restart.
    stalled = plans.night - 1
    stall = {"kind": "replication_stalled"}
    plans.world.repair(plans.lw.snowflake, plans.lw.coalesce_client(), stall, night=stalled)
    launched = plans.daemon.tick().launched
    return incident, diagnosis, plan, launched


def test_stale_input_waits_for_the_source_then_reruns_and_verifies(caught_up, plans: Plans):
    import dagster as dg

    incident, diagnosis, plan, launched = caught_up
    assert diagnosis.classification is CauseClass.STALE_INPUT
    waits = plan.of_kind(ProposalKind.AWAIT_SOURCE)
    assert ONHAND in [w.await_source.table for w in waits]
    assert all(w.owners == ["data-platform"] for w in waits), "the replication's owner is named and confirms"
    assert "qlik_replicate/ebs_inventory_cdc" in {w.await_source.system for w in waits}
    assert launched == [dg.DagsterRunStatus.SUCCESS]
    receipt = plans.receipt(incident)
    assert receipt.verified, [v.detail for v in receipt.verification]
    assert any(v.expectation.kind == "input_fresh" and v.passed for v in receipt.verification)


@pytest.fixture(scope="module")
def normalised(plans: Plans, caught_up):
    incident, diagnosis, plan, _ = plans.play(
        {
            "kind": "unit_change",
            "table": "MTL_ONHAND_QUANTITIES_DETAIL",
            "column": "TRANSACTION_QUANTITY",
            "factor": 12,
            "where": {"ORGANIZATION_ID": 7030},
        },
        CauseClass.UNIT_CHANGE,
    )
    plans.approve(incident, "Priya Raman")
    (node,) = [p.node_change for p in plan.of_kind(ProposalKind.NODE_CHANGE)]
    apply_and_deploy(plans.lw.coalesce_url, LOCAL_COALESCE_TOKEN, node)
    launched = plans.daemon.tick().launched
    return incident, diagnosis, plan, launched


def test_a_unit_change_gets_a_node_diff_that_normalises_and_a_test(normalised):
    incident, diagnosis, plan, _ = normalised
    assert diagnosis.classification is CauseClass.UNIT_CHANGE
    (node,) = plan.of_kind(ProposalKind.NODE_CHANGE)
    change = node.node_change
    assert change.kind == "normalise" and change.node_name == "STG_ONHAND"
    assert '"MTL_ONHAND_QUANTITIES_DETAIL"."ORGANIZATION_ID" = 7030' in change.diff and "/ 12" in change.diff
    assert change.test_name.startswith("SCALE_OF_ONHAND_QTY")
    assert node.owners == ["inventory-analytics"]


def test_the_normalised_rerun_passes_its_new_test_and_the_totals_are_back(normalised, plans: Plans):
    import dagster as dg

    incident, _, plan, launched = normalised
    assert launched == [dg.DagsterRunStatus.SUCCESS]
    receipt = plans.receipt(incident)
    assert receipt.verified, [v.detail for v in receipt.verification]
    kinds = {v.expectation.kind for v in receipt.verification}
    assert {"node_test_passed", "back_to_baseline"} <= kinds
