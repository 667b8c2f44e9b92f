"""The e-commerce world in Slack: a world written only as files, its night of a new storefront missing from
the store map played through the real machinery. Its messages speak its own words (products, its totals,
its teams), never the distributor's; a receipt for its incident, however long, reaches its threads whole
and before the resolution."""

from __future__ import annotations

import re
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from slack_checks import check_limits, check_reads_like_slack, texts
from world_cache import running_copy

from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications import IncidentNotifier, wording_for
from dw_dagster.records.remediation import (
    Approval,
    Expectation,
    NodeChange,
    Proposal,
    ProposalKind,
    Receipt,
    ReferenceRow,
    ScopedRerun,
    VerificationResult,
)
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon
from dw_local.scenarios.model import load_scenario
from dw_local.scenarios.suite import SUITE_DIR

pytestmark = pytest.mark.world
SCENARIO = SUITE_DIR / "ecommerce" / "new_storefront_unmapped.yaml"
# Words of the distributor's world: none may reach a message of another world.
DISTRIBUTOR_WORDS = re.compile(r"\bSKUs?\b|expedite|\bEBS\b|\bDC\d*\b|\bbuyers?\b|on-hand|S&(amp;)?OP", re.I)


@pytest.fixture(scope="module")
def shop():
    scenario = load_scenario(SCENARIO)
    world = scenario.world
    tmp = Path(tempfile.mkdtemp(prefix="dw-ecommerce-slack-"))
    try:
        with running_copy(world, tmp) as lw:
            daemon = LocalDaemon(lw, env=world.env())
            for k in range(len(scenario.file.nights)):
                world.play_night(lw, scenario.night_index(k), scenario.events[k])
                daemon.tick()
            metrics = load_metrics_file(world.env()["DW_METRICS_FILE"])
            store = IncidentStore(
                daemon.defs.resources["snowflake"], OpsSchema(world.database, metrics.ops_schema)
            )
            (incident,) = store.list(status="open")
            context = load_context_file(world.env()["DW_CONTEXT_FILE"])
            yield SimpleNamespace(
                lw=lw, daemon=daemon, store=store, incident=incident, context=context, metrics=metrics,
                database=world.database,
            )  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _messages(shop) -> list[dict]:
    return httpx.get(f"{shop.lw.slack_url}/_sink/messages").json()["messages"]


def _kind(m: dict) -> str:
    return m["metadata"]["event_payload"]["message_key"].split("|")[2]


def test_its_messages_speak_its_own_words(shop):
    messages = _messages(shop)
    assert messages, "the incident reached its owners"
    diagnosis, _ = latest_diagnosis(shop.store, shop.incident.incident_id)
    roots = [m for m in messages if _kind(m) == "incident"]
    assert {m["channel"] for m in roots} >= {"#ecom-analytics"}
    whole = "\n".join(texts(m) + m["text"] for m in messages)
    assert not DISTRIBUTOR_WORDS.search(whole), DISTRIBUTOR_WORDS.search(whole)
    # Its items are products, its totals are its own.
    key = next(k for k in diagnosis.keys if k.distinct_items)
    assert f"over {key.distinct_items:,} products" in whole
    assert "Daily revenue change" in whole and "Shop revenue change" in whole
    assert "E-commerce analytics (#ecom-analytics)" in whole
    # Words a person reads without decoding: the headline's metric names as words, the upstream change with
    # its subject (the key), each side of a join on its own table.
    headline = roots[0]["blocks"][0]["text"]["text"].split(" · ", 2)[-1]
    assert not re.search(r"(?<![/\w])[a-z0-9]+_[a-z0-9_]+", headline), headline
    assert diagnosis.upstream_change and diagnosis.upstream_change.startswith(diagnosis.keys[0].label)
    for join in diagnosis.joins:
        left, _, right = join.on[0].partition(" = ")
        assert "." in left and "." in right and left != right, join.on
    for m in messages:
        check_limits(m)
        check_reads_like_slack(m)
        assert re.search(r"http://localhost:3000/runs/[0-9a-f-]{36}", texts(m)), "linked to the diagnosis run"


def _shop_receipt(shop, diff: str, run_id: str) -> Receipt:
    """A receipt for this world's incident, in the shape the remediation job writes it (this world's
    context file names no reference table, so the product proposes no plan of its own here)."""
    iid = shop.incident.incident_id
    diagnosis, _ = latest_diagnosis(shop.store, iid)
    at = datetime(2025, 6, 17, 12, 5, tzinfo=UTC)
    row = ReferenceRow(
        asset_key="ref_marketing/store_map", table_parts=(shop.database, "REF_MARKETING", "STORE_MAP"),
        key_column="STORE_ID", values={"STORE_ID": 7, "CHANNEL": "web", "COUNTRY": "US"},
    )  # fmt: skip
    node = NodeChange(
        environment_id="2", node_id="n-fct-sales", node_name="FCT_SALES", asset_key="sales/fct_sales",
        before={}, after={}, diff=diff, right_ref=("SALES", "DIM_STORE"), test_name="NO_UNMATCHED_DIM_STORE",
    )  # fmt: skip
    rerun = ScopedRerun(environment_id="2", include_selector="{name: FCT_SALES}+", reason="rebuild the day")
    approvals = [
        Approval(plan_id=f"{iid}-p", team=team, approver=name, email=email, at=at, run_id=run_id)
        for team, name, email in [
            ("ecommerce-analytics", "Ana Souza", "ana.souza@retailer.example"),
            ("marketing-ops", "Ben Clarke", "ben.clarke@retailer.example"),
        ]
    ]
    check = VerificationResult(
        expectation=Expectation(kind="reconciles", subject="daily_revenue"), passed=True,
        observed={"value": 183_211.58333333334}, detail="daily_revenue 183,212 against shop_revenue 183,230",
    )  # fmt: skip
    return Receipt(
        incident_id=iid, plan_id=f"{iid}-p", cause=diagnosis.cause, evidence=diagnosis.evidence,
        proposals=[
            Proposal(proposal_id="p1", kind=ProposalKind.REFERENCE_ROW, title="Add STORE_ID 7 to the store map",
                     owners=["marketing-ops"], reference_row=row),
            Proposal(proposal_id="p2", kind=ProposalKind.NODE_CHANGE, title="Keep unmatched stores in FCT_SALES",
                     owners=["ecommerce-analytics"], node_change=node),
            Proposal(proposal_id="p3", kind=ProposalKind.SCOPED_RERUN, title="Rerun FCT_SALES and downstream",
                     owners=["ecommerce-analytics"], rerun=rerun),
        ],
        approvals=approvals, changes=[], dagster_run_id=run_id, coalesce_run_id=5, coalesce_run_as="ANA_SOUZA",
        verification=[check], verified=True,
        undo=["`dw-dagster undo` deletes STORE_ID 7 from the store map", "In Coalesce, revert FCT_SALES and deploy."],
        written_at=at,
    )  # fmt: skip


@pytest.mark.parametrize("columns", [3, 900], ids=["short", "longer-than-a-message"])
def test_a_receipt_reaches_its_threads_whole_then_the_resolution(shop, columns):
    diff = "\n".join(f'-  C{i}: "STG"."C{i}"\n+  C{i}: COALESCE("STG"."C{i}", 0)' for i in range(columns))
    run_id = f"{columns:08d}-0000-4000-8000-000000000000"
    receipt = _shop_receipt(shop, diff, run_id)
    diagnosis, radius = latest_diagnosis(shop.store, shop.incident.incident_id)
    notifier = IncidentNotifier(shop.daemon.defs.resources["slack"], shop.store, context=shop.context)
    wording = wording_for(shop.context, shop.metrics, diagnosis, radius)
    notifier.post_receipt(
        shop.incident, receipt, resolution="Fixed and verified on approval of Ana Souza.", wording=wording
    )
    messages = _messages(shop)
    owners = {m["channel"] for m in messages if _kind(m) == "incident"}
    assert owners
    for channel in owners:
        thread = [m for m in messages if m["channel"] == channel and run_id in m["text"] + texts(m)]
        kinds = [_kind(m) for m in thread]
        parts = [m for m in thread if _kind(m) == "receipt"]
        assert kinds == ["receipt"] * len(parts) + ["resolved"], kinds
        assert (len(parts) > 1) == (columns > 100), len(parts)
        sections = "\n".join(
            b["text"]["text"] for p in parts for b in p["blocks"] if b["type"] == "section" and "text" in b
        )
        code = "\n".join(re.findall(r"```\n(.*?)\n```", sections, flags=re.S))
        assert diff in code.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"), (
            "the whole diff, in order"
        )
        assert "Ana Souza for E-commerce analytics (#ecom-analytics)" in sections
        fields = [f["text"] for p in parts for b in p["blocks"] for f in b.get("fields", [])]
        assert "*Daily revenue change*" in "\n".join(fields), "the evidence in this world's words"
        for m in thread:
            check_limits(m)
            check_reads_like_slack(m)
        assert not DISTRIBUTOR_WORDS.search("\n".join(texts(m) + m["text"] for m in thread))
