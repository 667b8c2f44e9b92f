"""The review of new columns on the e-commerce world's own files (its Coalesce project in the API's shape,
its context file): the second world, beside the distributor's world test."""

from __future__ import annotations

import copy
from datetime import date
from pathlib import Path

import pytest

from dw_dagster.coalesce.workspace_models import CoalesceNode
from dw_dagster.context.models import load_context_file
from dw_dagster.governance.watch import SensitiveColumnWatch
from dw_local.coalesce_sim.api_shapes import node_detail
from dw_local.coalesce_sim.project import load_project
from dw_local.coalesce_sim.project_specs import column_id, node_id

WORLD = Path(__file__).resolve().parents[2] / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce"


@pytest.fixture(scope="module")
def deployed() -> list[dict]:
    project = load_project(WORLD / "project.yaml")
    env = project.environment("2")
    return [node_detail(n, env) for n in project.file.nodes]


def _nodes(raw: list[dict]) -> list[CoalesceNode]:
    return [CoalesceNode.model_validate(n) for n in raw]


def _key(node: CoalesceNode) -> str:
    return f"{node.location_name}/{node.name}".lower()


def _with_column(raw: list[dict], name: str, description: str = "", data_type: str = "VARCHAR(256)"):
    """The project after an engineer added ``name`` to ORDER_LINES and carried it into STG_ORDER_LINES."""
    out = copy.deepcopy(raw)
    by_name = {n["name"]: n for n in out}
    by_name["ORDER_LINES"]["metadata"]["columns"].append(
        {"columnID": column_id("RAW_SHOP", "ORDER_LINES", name), "name": name, "dataType": data_type,
         "description": description}
    )  # fmt: skip
    by_name["STG_ORDER_LINES"]["metadata"]["columns"].append(
        {"columnID": column_id("STAGE", "STG_ORDER_LINES", name), "name": name, "dataType": data_type,
         "sources": [{"columnReferences": [{"nodeID": node_id("RAW_SHOP", "ORDER_LINES"),
                                             "columnID": column_id("RAW_SHOP", "ORDER_LINES", name)}]}]}
    )  # fmt: skip
    return out


def _review(before: list[dict], after: list[dict]):
    context = load_context_file(WORLD / "context.yaml")
    previous = {n.id: [c.name for c in n.metadata.columns] for n in _nodes(before)}
    watch = SensitiveColumnWatch(context, warehouse=None)
    return watch.review(
        environment_id="2",
        nodes=_nodes(after),
        previous=previous,
        asset_key_of=_key,
        touched_node_ids=[],
        business_date=date(2025, 5, 28),
        coalesce_run_id="7",
    )


def test_a_sensitive_new_column_is_one_finding_for_the_governance_owner_with_its_path(deployed):
    review = _review(deployed, _with_column(deployed, "BUYER_EMAIL"))
    assert [n.label for n in review.new_columns] == [
        "raw_shop/order_lines.BUYER_EMAIL",
        "stage/stg_order_lines.BUYER_EMAIL",
    ]
    # The stage column is on the source column's path, not a finding of its own.
    (finding,) = review.findings
    assert finding.severity == "WARN" and finding.check_name == "sensitive_column"
    assert finding.asset_key == "raw_shop/order_lines"
    assert finding.evidence["category"] == "email" and finding.evidence["matched_by"] == "name"
    assert finding.evidence["owners"] == ["data-platform"]  # the context file's governance owner
    assert finding.evidence["downstream_columns"] == ["stage/stg_order_lines.BUYER_EMAIL"]
    assert "raw_shop/order_lines.BUYER_EMAIL -> stage/stg_order_lines.BUYER_EMAIL" in finding.summary
    assert finding.cause_scope == "sensitive_column:raw_shop/order_lines.BUYER_EMAIL"


def test_a_description_is_read_too(deployed):
    review = _review(deployed, _with_column(deployed, "CONTACT", description="Customer's phone number"))
    assert [f.evidence["category"] for f in review.findings] == ["phone"]
    assert review.findings[0].evidence["matched_by"] == "description"


def test_a_new_column_that_is_not_sensitive_raises_nothing(deployed):
    review = _review(deployed, _with_column(deployed, "GIFT_WRAP", data_type="BOOLEAN"))
    assert len(review.new_columns) == 2 and review.findings == []


def test_unchanged_columns_and_a_new_node_raise_nothing(deployed):
    assert _review(deployed, deployed).new_columns == []
    # A node never seen before (a new table) becomes known without a finding.
    before = [n for n in deployed if n["name"] != "ORDER_LINES"]
    review = _review(before, _with_column(deployed, "BUYER_EMAIL"))
    assert [n.label for n in review.new_columns] == ["stage/stg_order_lines.BUYER_EMAIL"]
    assert [f.asset_key for f in review.findings] == ["stage/stg_order_lines"]
