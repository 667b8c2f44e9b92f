"""The reference night's incident, diagnosis, blast radius, plan and receipt, by hand, in the shapes the
product builds them (the real ones are built over the local world in the world tests)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from dw_dagster.records.incidents import (
    AffectedAsset,
    BlastRadius,
    CauseClass,
    Diagnosis,
    Incident,
    JoinEffect,
    KeyGap,
)
from dw_dagster.records.remediation import (
    Approval,
    Change,
    Expectation,
    NodeChange,
    Proposal,
    ProposalKind,
    Receipt,
    ReferenceRow,
    RemediationPlan,
    ScopedRerun,
    VerificationResult,
)

# -- the reference night, by hand (the real diagnosis is built elsewhere) ----------------------------


def reference_incident(incident_id: str = "INC-20250616-dc7a01") -> Incident:
    opened = datetime(2025, 6, 17, 7, 30, tzinfo=UTC)  # 02:30 America/Chicago
    return Incident(
        incident_id=incident_id, cause_key="2025-06-16|job:inventory_nightly", status="open",
        business_date=date(2025, 6, 16), title="Network on-hand units fell 1.8% while EBS rose 0.2%",
        severity="ERROR", opened_at=opened, updated_at=opened,
    )  # fmt: skip


TEST_QUERY = """SELECT o.ORGANIZATION_ID, SUM(o.TRANSACTION_QUANTITY) AS UNITS,
       COUNT(DISTINCT o.INVENTORY_ITEM_ID) AS SKUS
FROM RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL o
LEFT JOIN INVENTORY.DIM_WAREHOUSE w ON w.ORGANIZATION_ID = o.ORGANIZATION_ID
WHERE w.ORGANIZATION_ID IS NULL
GROUP BY 1 HAVING SUM(o.TRANSACTION_QUANTITY) <> 0"""


def reference_diagnosis(incident_id: str, keys: list[KeyGap] | None = None) -> Diagnosis:
    dc7 = KeyGap(
        column="ORGANIZATION_ID", value="7120", units=41800, rows=1260, distinct_items=1260,
        new_in_source_since=date(2025, 6, 16),
    )  # fmt: skip
    return Diagnosis(
        incident_id=incident_id,
        classification=CauseClass.VALUE_LOSS,
        cause=(
            "FCT_INVENTORY_POSITION inner-joins on-hand rows to DIM_WAREHOUSE; inventory org 7120"
            " (DC7 Dallas) is not in the planning-ops region map, so its 41,800 units drop out while DC2's"
            " outbound transfers count."
        ),
        # The keys dw_dagster.incidents.diagnosis records (percentages in points).
        evidence={
            "gap_units": 41800.0,
            "target_change_pct": -1.8,
            "source_change_pct": 0.2,
            "dropped_units": 41800.0,
            "dropped_rows": 1260,
        },
        keys=keys if keys is not None else [dc7],
        joins=[
            JoinEffect(
                asset_key="inventory/fct_inventory_position",
                join_type="inner",
                left="STG_ONHAND",
                right="DIM_WAREHOUSE",
                on=["STG_ONHAND.ORGANIZATION_ID = DIM_WAREHOUSE.ORGANIZATION_ID"],
                dropped_rows=1260,
                dropped_units=41800,
                unmatched=[dc7],
            )  # fmt: skip
        ],
        upstream_change=(
            "Oracle EBS opened inventory org 7120 (DC7 Dallas) Mon 14:00; Qlik Replicate applied it at 14:06."
        ),
        path=[
            "oracle_ebs/mtl_onhand_quantities_detail",
            "qlik_replicate/ebs_inventory_cdc",
            "raw_ebs/mtl_onhand_quantities_detail",
            "ref_planning/region_map",
            "inventory/dim_warehouse",
            "inventory/fct_inventory_position",
        ],
        test_query=TEST_QUERY,
        owners=["team:inventory-analytics", "team:planning-ops"],  # as assets carry them
    )


def reference_blast(n_skus: int = 164, extra_assets: int = 0) -> BlastRadius:
    """In the shape ``dw_dagster.incidents.blast_radius`` builds: changes in recorded totals by name."""
    a = AffectedAsset
    reorder = {"before": 31, "after": 195, "newly_flagged": n_skus}
    assets = [
        a(asset_key="mart/mart_days_of_supply", name="MART_DAYS_OF_SUPPLY", kind="coalesce",
          owners=["team:inventory-analytics"], change={"rows_affected": 1260}),
        a(asset_key="thoughtspot/network_days_of_supply", name='Liveboard "Network days of supply"',
          kind="thoughtspot", owners=["team:supply-chain-planning"],
          next_read="09:00 S&OP meeting, Tue 2025-06-17 09:00 America/Chicago"),
        a(asset_key="mart/mart_reorder_candidates", name="Reorder candidates", kind="coalesce",
          owners=["team:inventory-analytics"],
          change={"reorder_candidates": reorder, "rows_affected": n_skus}),
        a(asset_key="buyers/reorder_candidates_list", name="Reorder candidates list (buyers)",
          kind="thoughtspot", owners=["team:buyers"],
          next_read="buyers' morning expedite review, Tue 2025-06-17 07:30 America/Chicago"),
    ]  # fmt: skip
    assets += [
        a(asset_key=f"mart/extra_{i}", name=f"EXTRA_{i}", kind="coalesce", owners=["team:data-platform"])
        for i in range(extra_assets)
    ]
    return BlastRadius(
        assets=assets,
        newly_flagged=[f"SKU-{100000 + 7 * i}" for i in range(n_skus)],
        summary={
            "downstream_assets": len(assets),
            "reorder_candidates_before": 31,
            "reorder_candidates_after": 195,
            "newly_flagged": n_skus,
            "consumers": 2,
        },  # fmt: skip
    )


NODE_DIFF = """--- FCT_INVENTORY_POSITION (deployed)
+++ FCT_INVENTORY_POSITION (proposed)
@@ join @@
-  INNER JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }} "DIM_WAREHOUSE"
+  LEFT JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }} "DIM_WAREHOUSE"
   ON "DIM_WAREHOUSE"."ORGANIZATION_ID" = "STG_ONHAND"."ORGANIZATION_ID"
@@ columns @@
-  REGION: '"DIM_WAREHOUSE"."REGION"'
+  REGION: COALESCE("DIM_WAREHOUSE"."REGION", 'UNMAPPED')
@@ tests @@
+- name: NO_UNMATCHED_DIM_WAREHOUSE
+  templateString: SELECT 1 WHERE 1 = 0
"""


def reference_plan(incident_id: str, diff: str = NODE_DIFF) -> RemediationPlan:
    created = datetime(2025, 6, 17, 7, 35, tzinfo=UTC)
    row = ReferenceRow(
        asset_key="ref_planning/region_map", table_parts=("DW_PROD", "REF_PLANNING", "REGION_MAP"),
        key_column="ORGANIZATION_ID",
        values={"ORGANIZATION_ID": 7120, "WAREHOUSE_CODE": "DC7", "WAREHOUSE_NAME": None, "REGION": "South"},
        drafted_from={"WAREHOUSE_CODE": "RAW_EBS.MTL_PARAMETERS", "REGION": "the donor ORGANIZATION_ID 7020"},
        required=["ORGANIZATION_ID", "WAREHOUSE_CODE", "WAREHOUSE_NAME", "REGION"],
    )  # fmt: skip
    node = NodeChange(
        environment_id="2", environment_name="PROD", node_id="n-fct", node_name="FCT_INVENTORY_POSITION",
        asset_key="inventory/fct_inventory_position", before={}, after={}, diff=diff,
        right_ref=("INVENTORY", "DIM_WAREHOUSE"), test_name="NO_UNMATCHED_DIM_WAREHOUSE",
    )  # fmt: skip
    rerun = ScopedRerun(
        environment_id="2",
        environment_name="PROD",
        include_selector="{name: DIM_WAREHOUSE} {name: FCT_INVENTORY_POSITION}+",
        reason="rebuild the position and everything downstream of it",
    )
    return RemediationPlan(
        plan_id=f"PLAN-{incident_id}-1", incident_id=incident_id, domain="inventory", autonomy="L3",
        proposals=[
            Proposal(proposal_id="p1", kind=ProposalKind.REFERENCE_ROW, title="Add 7120 to the region map",
                     owners=["planning-ops"], reference_row=row),
            Proposal(proposal_id="p2", kind=ProposalKind.NODE_CHANGE, title="Keep unmatched orgs in FCT_INVENTORY_POSITION",
                     owners=["inventory-analytics"], node_change=node),
            Proposal(proposal_id="p3", kind=ProposalKind.SCOPED_RERUN, title="Rerun the position and downstream",
                     owners=["inventory-analytics"], rerun=rerun),
        ],
        expectations=[Expectation(kind="reconciles", subject="network_onhand_units")],
        created_at=created, expires_at=created + timedelta(hours=12),
    )  # fmt: skip


def reference_receipt(incident_id: str, run_id: str = "d1a2b3c4-0000-4000-8000-00000000abcd",
                      plan: RemediationPlan | None = None, verified: bool = True) -> Receipt:  # fmt: skip
    plan = plan or reference_plan(incident_id)
    at = datetime(2025, 6, 17, 7, 40, tzinfo=UTC)
    approvals = [
        Approval(plan_id=plan.plan_id, team="inventory-analytics", approver="Priya Raman",
                 email="priya.raman@distributor.example", at=at, run_id=run_id),
        Approval(plan_id=plan.plan_id, team="planning-ops", approver="Dana Ortiz",
                 email="dana.ortiz@distributor.example", at=at + timedelta(minutes=2), run_id=run_id,
                 values={"WAREHOUSE_NAME": "Dallas"}),
    ]  # fmt: skip
    change = Change(
        proposal_id="p1", what="Added ORGANIZATION_ID 7120 to \"DW_PROD\".\"REF_PLANNING\".\"REGION_MAP\": "
        "WAREHOUSE_CODE=DC7, WAREHOUSE_NAME=Dallas, REGION=South",
        table_parts=("DW_PROD", "REF_PLANNING", "REGION_MAP"), key_column="ORGANIZATION_ID", key_value=7120,
        added=True, at=at + timedelta(minutes=25),
    )  # fmt: skip
    checks = [
        VerificationResult(expectation=Expectation(kind="reconciles", subject="network_onhand_units"),
                           passed=verified, observed={"value": 2_331_945.3333333335, "gap_change": 3.25},
                           detail="network_onhand_units 2,331,945 against ebs_onhand_units 2,335,120: gap +3 from the usual"),
        VerificationResult(expectation=Expectation(kind="node_test_passed", subject="NO_UNMATCHED_DIM_WAREHOUSE"),
                           passed=True, detail="node test NO_UNMATCHED_DIM_WAREHOUSE passed in the rerun"),
        VerificationResult(expectation=Expectation(kind="back_to_baseline", subject="reorder_candidates", target=31),
                           passed=True, observed={"value": 31.0}, detail="reorder_candidates is 31, back to 31 (±3)"),
    ]  # fmt: skip
    diagnosis = reference_diagnosis(incident_id)
    return Receipt(
        incident_id=incident_id, plan_id=plan.plan_id, cause=diagnosis.cause,
        # As a check records it: unrounded.
        evidence={**diagnosis.evidence, "target_change_pct": -1.7960491884065721},
        proposals=plan.proposals, approvals=approvals, changes=[change], dagster_run_id=run_id,
        coalesce_run_id=17, coalesce_run_as="PRIYA_RAMAN", verification=checks, verified=verified,
        undo=["`dw-dagster undo INC --as <owner>` deletes the row(s) added: ORGANIZATION_ID 7120",
              "In Coalesce, revert FCT_INVENTORY_POSITION (apply the diff in reverse) and deploy."],
        written_at=at + timedelta(minutes=44),
    )  # fmt: skip
