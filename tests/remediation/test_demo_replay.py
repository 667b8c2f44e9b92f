"""`dw-dagster demo replay --json`: the reference night end to end, numbers as PRODUCT.md tells them, and
every value it wrote to Snowflake bound, never in a statement's text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot.tokens import TokenType
from world_cache import WORLD_CACHE

from dw_local.world import DISTRIBUTOR_DIR

pytestmark = pytest.mark.world
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def replayed(seeded_template, tmp_path_factory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("replay") / "world"
    script = Path(sys.executable).with_name("dw-dagster")
    done = subprocess.run(
        [str(script), "demo", "replay", "--json", "--root", str(root), "--cache", str(WORLD_CACHE.resolve())],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return root, json.loads(done.stdout)


@pytest.fixture(scope="module")
def timeline(replayed) -> list[dict]:
    return replayed[1]


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


# -- every value bound --------------------------------------------------------------------------------------

# The ops tables whose rows are the night's findings, diagnoses, incidents, Slack payloads and approvals.
RECORDS = ("INCIDENTS", "INCIDENT_EVENTS", "SLACK_OUTBOX", "SLACK_THREADS", "AUDIT_TRAIL")
WRITE = re.compile(r'^\s*(?:MERGE INTO|INSERT INTO|UPDATE) "[^"]+"\."DW_OPS"\."(\w+)"')


def _sent(snowflake: Path, template: Path) -> list[tuple[str, str]]:
    """``(text, status)`` of each statement dw-dagster sent during the replay: the local Snowflake's
    QUERY_HISTORY, less what the seeded template already held."""
    with duckdb.connect(str(template / "SNOWFLAKE.db"), read_only=True) as con:
        before = {r[0] for r in con.execute("SELECT QUERY_ID FROM ACCOUNT_USAGE.QUERY_HISTORY").fetchall()}
    with duckdb.connect(str(snowflake / "SNOWFLAKE.db"), read_only=True) as con:
        rows = con.execute(
            "SELECT QUERY_ID, QUERY_TEXT, QUERY_TAG, EXECUTION_STATUS FROM ACCOUNT_USAGE.QUERY_HISTORY"
        ).fetchall()
    return [
        (text, status)
        for qid, text, tag, status in rows
        if qid not in before
        and (json.loads(tag) if (tag or "").startswith("{") else {}).get("app") == "dw-dagster"
    ]


def _leaves(value: Any) -> Iterator[Any]:
    """Every string and number in a value, JSON text included (a DETAIL, a PAYLOAD)."""
    if isinstance(value, str):
        yield value
        if value[:1] in "[{":
            try:
                yield from _leaves(json.loads(value))
            except json.JSONDecodeError:
                pass
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def _records(snowflake: Path) -> dict[str, list[tuple]]:
    with duckdb.connect(str(snowflake / "DW_PROD.db"), read_only=True) as con:
        return {t: con.execute(f'SELECT * FROM DW_OPS."{t}"').fetchall() for t in RECORDS}


def _literals(text: str) -> tuple[list[str], list[float]]:
    tokens = sqlglot.Dialect.get_or_raise("snowflake").tokenize(text)
    return (
        [t.text for t in tokens if t.token_type == TokenType.STRING],
        [float(t.text) for t in tokens if t.token_type == TokenType.NUMBER],
    )


def test_no_value_of_the_night_is_in_a_statements_text_and_every_write_ran_bound(replayed, seeded_template):
    """The issue's test: every statement the local Snowflake received from dw-dagster during the reference
    night (its QUERY_HISTORY holds the text as sent): no finding, diagnosis, incident id, Slack payload or
    approval written into it, the writes of those records all run with their values bound."""
    root, _ = replayed
    sent = _sent(root / "snowflake", seeded_template / "snowflake")
    records = _records(root / "snowflake")
    assert records["INCIDENTS"] and records["SLACK_OUTBOX"], (
        "the night opened an incident and posted to Slack"
    )
    kinds = {r[2] for r in records["INCIDENT_EVENTS"]}
    assert {"finding", "diagnosis", "approval", "receipt"} <= kinds, kinds
    values = {v for rows in records.values() for row in rows for cell in row for v in _leaves(cell)}
    texts = {v for v in values if isinstance(v, str) and len(v) >= 3}
    numbers = {float(v) for v in values if not isinstance(v, str) and abs(v) >= 100}
    # A string literal the product writes itself ('open', 'sent') or takes from its configuration (a node's
    # join condition) is part of the statement's shape; anything else would be a value written into it.
    shapes = "\n".join(
        [p.read_text() for p in (REPO / "dw_dagster").rglob("*.py")]
        + [p.read_text() for p in DISTRIBUTOR_DIR.glob("*.yaml")]
    )
    written: list[tuple[str, str]] = []
    for text, _status in sent:
        strings, numeric = _literals(text)
        written += [(s, text[:160]) for s in strings if f"'{s}'" not in shapes]
        written += [(str(n), text[:160]) for n in numeric if n in numbers]
        # Nothing of the night's records anywhere in the text, identifiers aside.
        written += [(v, text[:160]) for v in texts if len(v) >= 12 and f"'{v}" in text]
    assert not written, f"{len(written)} values written into statement texts, e.g. {written[:5]}"
    # The records were written by statements that bound their values, and every statement ran.
    targets: dict[str, list[tuple[str, str]]] = {}
    for text, status in sent:
        write = WRITE.match(text)
        if write:
            targets.setdefault(write[1], []).append((text, status))
    assert set(RECORDS) <= set(targets), sorted(targets)
    for table in RECORDS:
        assert all("?" in text and status == "SUCCESS" for text, status in targets[table]), table
    assert all(status == "SUCCESS" for _, status in sent), [t[:160] for t, s in sent if s != "SUCCESS"][:5]
