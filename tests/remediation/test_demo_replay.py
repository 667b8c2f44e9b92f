"""`dw-dagster demo replay --json`: the reference night end to end, numbers as PRODUCT.md tells them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from world_cache import WORLD_CACHE

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def timeline(seeded_template, tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("replay") / "world"
    script = Path(sys.executable).with_name("dw-dagster")
    done = subprocess.run(
        [str(script), "demo", "replay", "--json", "--root", str(root), "--cache", str(WORLD_CACHE.resolve())],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def by_system(timeline, system):
    return [e for e in timeline if e["system"] == system]


def test_every_event_has_time_system_what_numbers(timeline):
    assert len(timeline) >= 12
    for e in timeline:
        assert {"time", "system", "what", "numbers"} <= set(e), e


def test_the_night_as_product_md_tells_it(timeline):
    ebs = by_system(timeline, "Oracle EBS")[0]
    assert ebs["numbers"] == {"org_id": 7120, "units": 41_800, "skus": 1_260}
    assert "DC7 (Dallas)" in ebs["what"] and "DC2 (Memphis)" in ebs["what"] and "Mon" in ebs["time"]
    coalesce = [e for e in by_system(timeline, "Coalesce") if "Every test passes" in e["what"]]
    assert coalesce and coalesce[0]["numbers"]["failed"] == 0
    diagnosis = by_system(timeline, "dw-dagster + Snowflake")[0]["numbers"]
    assert diagnosis["org_id"] == "7120" and diagnosis["gap_units"] == 41_800 and diagnosis["skus"] == 1_260
    assert round(diagnosis["network_change_pct"], 1) == -1.8 and round(diagnosis["ebs_change_pct"], 1) == 0.2
    assert (diagnosis["reorder_rows_before"], diagnosis["reorder_rows_after"]) == (31, 195)
    assert diagnosis["newly_flagged_skus"] == 164 and "09:00 S&OP" in diagnosis["next_read"]
    slack = by_system(timeline, "Slack")[0]["numbers"]
    assert (
        slack["channels"] == ["#buyers", "#inventory-analytics", "#planning-ops"]
        and slack["hold_skus"] == 164
    )


def test_approvals_through_the_command_then_remediation(timeline):
    held = [e for e in by_system(timeline, "Dagster") if "held for approval" in e["what"]]
    assert held and held[0]["numbers"]["launched_without_approval"] == 0
    approvals = by_system(timeline, "approvals")
    assert [a["what"].split("--as ")[1].split('"')[1] for a in approvals] == ["Priya Raman", "Dana Ortiz"]
    assert "07:40" in approvals[0]["time"] and "waiting for planning-ops" in approvals[0]["what"]
    assert "released" in approvals[1]["what"]
    added = by_system(timeline, "Snowflake")[0]
    assert (
        "ORGANIZATION_ID 7120" in added["what"]
        and "WAREHOUSE_CODE=DC7" in added["what"]
        and "REGION=South" in added["what"]
    )
    rerun = [e for e in by_system(timeline, "Coalesce") if e["what"].startswith("Rerun")][0]
    assert "{name: FCT_INVENTORY_POSITION}+" in rerun["what"] and "as PRIYA_RAMAN completed" in rerun["what"]


def test_it_ends_verified_with_the_receipt(timeline):
    verification = [e for e in timeline if e["what"].startswith("Verification")][0]
    assert verification["what"].startswith("Verification passed")
    assert verification["numbers"]["reorder_candidates.value"] == 31
    assert verification["numbers"]["NO_UNMATCHED_DIM_WAREHOUSE.passed"] is True
    assert verification["numbers"]["network_onhand_units.passed"] is True
    last = timeline[-1]
    assert last["what"].startswith("Receipt") and last["numbers"] == {"verified": True}
    receipt = last["receipt"]
    assert receipt["verified"] and {a["approver"] for a in receipt["approvals"]} == {
        "Priya Raman",
        "Dana Ortiz",
    }
    assert receipt["coalesce_run_id"] and receipt["dagster_run_id"] and receipt["undo"]
    assert "7120" in receipt["cause"]


def test_the_incident_event_carries_the_numbers_that_opened_it(timeline):
    (opened,) = [e for e in by_system(timeline, "dw-dagster") if e["what"].endswith("opens")]
    numbers = opened["numbers"]
    assert (numbers["total"], numbers["source_total"]) == ("network_onhand_units", "ebs_onhand_units")
    assert round(numbers["change_pct"], 1) == -1.8 and round(numbers["source_change_pct"], 1) == 0.2
    assert numbers["gap_units"] == 41_800 and numbers["gap_units"] > numbers["tolerance_units"]


def test_after_the_fix_nothing_opens_and_the_fix_explains_what_its_row_counts_did(timeline):
    after = [e for e in timeline if "(open incidents:" in e["what"]]
    assert len(after) == 2, "the rerun's checks, then the next nightly run's"
    for e in after:
        assert e["numbers"]["open_incidents"] == 0 and e["numbers"]["errored"] == 0, e
        explained = {x.rsplit(" (", 1)[0] for x in e["explained"]}
        red = {c.split(":")[0] for c in e["failed_checks"]}
        # The rebuilt tables' row counts stepped up (the dropped rows are back): not an incident.
        assert red <= explained, (red, explained)
    # The fact's rows stepped up with the key the fix mapped: explained by the fix's record, or by the
    # volume check itself (the key's rows are new in the reference table), never an incident.
    stepped = {x.rsplit(" (", 1)[0] for e in after for x in e["explained"]} | {
        x.split(": ", 1)[0] for e in after for x in e["levels"] if "new level from" in x
    }
    assert "volume on inventory/fct_inventory_position" in stepped, after
    (shown,) = [
        e for e in by_system(timeline, "Dagster") if e["what"].startswith("dw/incidents after the fix")
    ]
    assert shown["numbers"]["first_entry"] == "receipt"
