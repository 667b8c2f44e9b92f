"""The messages as a person reads them in Slack: Block Kit within Slack's limits, the pipeline's own words,
numbers rounded, Slack dates, no Python reprs, mrkdwn only, a link to the exact run, the receipt and the
proposal whole however long, and routing from the context file. Fast: no server."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from reference_night import (
    NODE_DIFF,
    reference_blast,
    reference_diagnosis,
    reference_incident,
    reference_plan,
    reference_receipt,
)
from slack_checks import check_limits, check_reads_like_slack
from slack_checks import texts as _texts

from dw_dagster.checks.metrics import MetricsFile, load_metrics_file
from dw_dagster.context.models import Autonomy, ContextFile, load_context_file
from dw_dagster.notifications import (
    DagsterLinks,
    Wording,
    alerts_allowed,
    dagster_ui_url,
    hold_mode_for,
    hold_notice,
    incident_message,
    proposal_messages,
    proposed_hold_notice,
    receipt_messages,
    resolution_message,
    route_incident,
    update_message,
    wording_for,
)
from dw_dagster.notifications.hold_message import hold_note
from dw_dagster.notifications.text import fmt_number, fmt_value, humanise, lower_first, slack_date
from dw_dagster.records.incidents import BlastRadius, KeyGap
from dw_local.slack_render import render_blocks, render_log, render_message
from dw_local.world import DISTRIBUTOR_DIR

REPO = Path(__file__).resolve().parents[2]
ECOMMERCE_DIR = REPO / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce"
RUN = "4f1c2d3e-aaaa-4bbb-8ccc-000000000042"


@pytest.fixture(scope="module")
def context() -> ContextFile:
    return load_context_file(DISTRIBUTOR_DIR / "context.yaml")


@pytest.fixture(scope="module")
def metrics() -> MetricsFile:
    return load_metrics_file(DISTRIBUTOR_DIR / "metrics.yaml")


def _reference(context, metrics):
    inc = reference_incident()
    diagnosis, blast = reference_diagnosis(inc.incident_id), reference_blast()
    return inc, diagnosis, blast, wording_for(context, metrics, diagnosis, blast)


def test_incident_message_carries_the_reference_numbers_in_the_pipelines_words(context, metrics, monkeypatch):
    monkeypatch.setenv("DAGSTER_UI_URL", "https://dagster.example.com/")
    inc, diagnosis, blast, wording = _reference(context, metrics)
    note = hold_note(route_incident(context, diagnosis, blast), context, wording)
    msg = incident_message(
        inc, diagnosis, blast, context=context, run_id=RUN, hold_note=note, wording=wording
    ).payload()
    check_limits(msg)
    check_reads_like_slack(msg)
    blocks, text = msg["blocks"], _texts(msg)
    assert blocks[0]["type"] == "header"
    assert "ERROR" in blocks[0]["text"]["text"] and inc.incident_id in blocks[0]["text"]["text"]
    for needle in [
        "-1.8%", "+0.2%", "41,800", "ORGANIZATION_ID = 7120", "over 1,260 SKUs",
        "reorder candidates 31 → 195 (newly flagged 164)", "Reorder candidates list (buyers)",
        "09:00 S&amp;OP meeting", "MART_DAYS_OF_SUPPLY",
        "Planning operations (#planning-ops)", "<@U0INVAN01>", "<@U0PLANOP1>", "value loss",
        "164 newly flagged SKUs", "Buyers (#buyers) told to hold expedite orders on these SKUs",
        # The evidence names the totals it compares, as the metrics file does.
        "Network onhand units change", "Ebs onhand units change",
    ]:  # fmt: skip
        assert needle in text, needle
    # The test query in a code block, escaped for mrkdwn (its "<>" would otherwise read as a link).
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b]
    query = next(t for t in sections if "Test query" in t)
    assert "```" in query and "&lt;&gt; 0" in query and "<>" not in query
    # The exact run it speaks of (the diagnosis), and the incident's runs by their tag.
    buttons = next(b for b in blocks if b["type"] == "actions")["elements"]
    assert buttons[0]["url"] == f"https://dagster.example.com/runs/{RUN}"
    assert buttons[1]["url"] == (
        f"https://dagster.example.com/runs?q%5B%5D=tag%3Adw%2Fincident_id%3D{inc.incident_id}"
    )
    assert f"https://dagster.example.com/runs/{RUN}" in msg["text"]
    # Opened at 02:30 in Chicago: a Slack date, each reader sees it in their own zone.
    opened = int(inc.opened_at.timestamp())
    assert f"<!date^{opened}^{{date_short_pretty}} {{time}}|2025-06-17 07:30 UTC>" in text
    assert inc.incident_id in msg["text"] and "41,800" in msg["text"]
    assert dagster_ui_url({}) == "http://localhost:3000"


def test_words_come_from_the_context_and_metrics_files(context, metrics):
    inc, diagnosis, blast, wording = _reference(context, metrics)
    assert wording == Wording(
        item_noun="SKUs", flagged_noun="SKUs", hold_action="Hold expedite orders",
        target_total="network_onhand_units", source_total="ebs_onhand_units",
    )  # fmt: skip
    # Files that name nothing: neutral words, and nothing of the distributor's (its data aside).
    bare_ctx = context.model_copy(update={"domains": {}})
    diagnosis = diagnosis.model_copy(update={"test_query": None})
    blast = blast.model_copy(
        update={
            "assets": [a.model_copy(update={"name": a.asset_key, "next_read": None}) for a in blast.assets],
            "newly_flagged": [f"X{i}" for i in range(164)],
        }
    )
    bare = wording_for(bare_ctx, MetricsFile(), diagnosis, blast)
    assert (bare.item_noun, bare.flagged_noun, bare.hold_action) == ("items", "items", "Hold decisions")
    r = route_incident(bare_ctx, diagnosis, blast, hold="act")
    for m in (
        incident_message(inc, diagnosis, blast, context=bare_ctx, wording=bare, hold_note=hold_note(r, bare_ctx, bare)),
        hold_notice(inc, blast, wording=bare),
        proposed_hold_notice(inc, blast, consumer_channels=["#c"], wording=bare),
    ):  # fmt: skip
        payload = json.dumps(m.payload())
        assert not re.search(r"\bSKUs?\b|expedite", payload, re.I), payload[:300]
        assert "items" in payload
    # The e-commerce world's files: its items are products; it sets no hold action.
    ecom_ctx = load_context_file(ECOMMERCE_DIR / "context.yaml")
    ecom = load_metrics_file(ECOMMERCE_DIR / "metrics.yaml")
    path = diagnosis.model_copy(
        update={"path": ["raw_shop/order_lines", "ref_marketing/store_map", "sales/fct_sales"]}
    )
    words = wording_for(ecom_ctx, ecom, path, BlastRadius())
    assert (words.item_noun, words.target_total, words.source_total) == (
        "products",
        "daily_revenue",
        "shop_revenue",
    )
    assert words.hold_action == "Hold decisions"
    assert (
        lower_first("Hold expedite orders") == "hold expedite orders"
        and lower_first("SAP orders") == "SAP orders"
    )


def test_numbers_as_a_person_writes_them():
    assert fmt_value("target_change_pct", -1.7960491884065721) == "-1.8%"
    assert fmt_value("source_change_pct", 0.2) == "+0.2%"
    assert fmt_value("baseline_max_change_pct", 0.3) == "0.3%", "a bound carries no sign"
    assert fmt_value("gap_change_pct", 0.031) == "+0.03%"
    assert fmt_value("gap_units", 41800.0) == "41,800"
    assert fmt_value("value", 2_331_945.3333333335) == "2,331,945"
    assert fmt_value("days_of_supply", 12.3456) == "12.3"
    assert fmt_value("ratio", 0.031249) == "0.031"
    assert fmt_number(0.25) == "0.25" and fmt_number(-7.0) == "-7"
    # No repr: a mapping, a list, a flag, nothing.
    assert (
        fmt_value("", {"WAREHOUSE_NAME": "Dallas", "REGION": "South"})
        == "WAREHOUSE_NAME = Dallas, REGION = South"
    )
    assert fmt_value("keys", ["7120", "7130"]) == "7120, 7130"
    assert (fmt_value("", True), fmt_value("", None)) == ("yes", "none")


def test_names_are_humanised_by_their_shape_not_a_word_list():
    assert humanise("rows_affected") == "Rows affected"
    assert humanise("target_change_pct") == "Target change"
    assert humanise("rowsAffected") == "Rows affected"
    # The warehouse's identifiers and asset keys stay as the data spells them.
    assert humanise("NO_UNMATCHED_DIM_WAREHOUSE") == "NO_UNMATCHED_DIM_WAREHOUSE"
    assert humanise("mart/mart_days_of_supply") == "mart/mart_days_of_supply"
    # No list of one world's words: a name reads the same whatever the world calls its things.
    assert humanise("ebs_onhand_units") == "Ebs onhand units"
    assert humanise("sku_count") == "Sku count"


def test_product_code_carries_no_world_vocabulary():
    """The messages' code names nothing of one world: its words come from the context and metrics files."""
    words = re.compile(r"\bSKUs?\b|expedite|\bEBS\b|\bDC\d*\b|\bbuyers?\b|on-hand|onhand|S&OP", re.I)
    files = [
        *sorted((REPO / "dw_dagster" / "notifications").glob("*.py")),
        REPO / "dw_dagster/notifications/receipt_text.py",
    ]
    found = [(f.name, m.group()) for f in files for m in words.finditer(f.read_text())]
    assert found == []


def test_slack_dates_show_in_the_readers_time_zone():
    at = datetime(2025, 6, 17, 7, 30, tzinfo=UTC)
    token = slack_date(at)
    assert token == "<!date^1750145400^{date_short_pretty} {time}|2025-06-17 07:30 UTC>"
    chicago, tokyo = ZoneInfo("America/Chicago"), ZoneInfo("Asia/Tokyo")
    assert render_blocks(
        [{"type": "section", "text": {"type": "mrkdwn", "text": f"opened {token}"}}], chicago
    ) == ("opened Jun 17, 2025 02:30 CDT")
    assert "16:30 JST" in render_blocks(
        [{"type": "context", "elements": [{"type": "mrkdwn", "text": token}]}], tokyo
    )
    # A time among the evidence is a date token too, kept through the escaping of data (which is escaped).
    inc = reference_incident()
    d = reference_diagnosis(inc.incident_id)
    d.evidence = {"last_load": at, "note": "a <b> & c"}
    shown = render_message(incident_message(inc, d, BlastRadius()).payload(), chicago)
    assert "Last load: Jun 17, 2025 02:30 CDT" in shown and "Note: a <b> & c" in shown


def test_hold_notice_and_its_proposed_variant(context, metrics):
    inc, _, blast, wording = _reference(context, metrics)
    links = DagsterLinks("http://localhost:3000")
    approval = "hold notices while an incident is open (L3)"
    payload = hold_notice(
        inc, blast, wording=wording, standing_approval=approval, links=links, run_id=RUN
    ).payload()
    check_limits(payload)
    check_reads_like_slack(payload)
    text = _texts(payload)
    assert payload["blocks"][0]["text"]["text"].startswith(
        ":octagonal_sign: Hold expedite orders on 164 SKUs"
    )
    assert "first 100 of 164" in text and "… and 64 more SKUs" in text
    assert "SKU-100000" in text and "standing approval" in text
    why = "on *Reorder candidates* tonight that the data does not support (reorder candidates 31 → 195)"
    assert why in text
    assert "Hold expedite orders" in payload["text"] and f"http://localhost:3000/runs/{RUN}" in text

    payload = proposed_hold_notice(
        inc,
        blast,
        consumer_channels=["#buyers"],
        autonomy="L2 propose",
        wording=wording,
        links=links,
        run_id=RUN,
    ).payload()
    check_limits(payload)
    check_reads_like_slack(payload)
    text, title = _texts(payload), payload["blocks"][0]["text"]["text"]
    assert "Proposed: tell #buyers to hold expedite orders" in title
    assert "Not sent." in text and "L2 propose" in text and "… and 64 more SKUs" in text
    assert payload["text"].startswith("Proposed (not sent)") and f"/runs/{RUN}" in text


def test_the_receipt_is_whole_and_reads_like_slack(context, metrics):
    inc, _, _, wording = _reference(context, metrics)
    links = DagsterLinks("http://localhost:3000")
    receipt = reference_receipt(inc.incident_id)
    (msg,) = receipt_messages(receipt, context=context, links=links, wording=wording)
    payload = msg.payload()
    check_limits(payload)
    check_reads_like_slack(payload)
    shown = render_message(payload, ZoneInfo("America/Chicago"))
    for needle in [
        "Receipt · INC-20250616-dc7a01 · verified", "Verification passed", "Cause", "7120",
        "Network onhand units change: -1.8%", "Gap units: 41,800",
        "Priya Raman for Inventory analytics (#inventory-analytics), Jun 17, 2025 02:40 CDT",
        "Dana Ortiz for Planning operations (#planning-ops), Jun 17, 2025 02:42 CDT, set WAREHOUSE_NAME = Dallas",
        "Coalesce run 17 `{name: DIM_WAREHOUSE} {name: FCT_INVENTORY_POSITION}+` in PROD, as PRIYA_RAMAN",
        "+  LEFT JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }}", "NO_UNMATCHED_DIM_WAREHOUSE passed",
        f"run {receipt.dagster_run_id[:8]} (http://localhost:3000/runs/{receipt.dagster_run_id})",
        "1. `dw-dagster undo INC --as <owner>`", "2. In Coalesce, revert",
    ]:  # fmt: skip
        assert needle in shown, needle
    # The node diff in full, as the plan has it.
    assert all(line in shown for line in NODE_DIFF.splitlines())


def test_a_receipt_longer_than_a_message_is_split_never_cut(context):
    # A node change touching hundreds of columns: far past one message's 50 blocks and 3,000 characters a section.
    diff = "\n".join(
        f'-  COL_{i:04d}: \'"STG"."COL_{i:04d}"\'\n+  COL_{i:04d}: COALESCE("STG"."COL_{i:04d}", 0)'
        for i in range(900)
    )
    inc = reference_incident()
    receipt = reference_receipt(inc.incident_id, plan=reference_plan(inc.incident_id, diff=diff))
    parts = receipt_messages(receipt, context=context)
    assert len(parts) >= 3
    payloads = [m.payload() for m in parts]
    for i, p in enumerate(payloads, 1):
        check_limits(p)
        check_reads_like_slack(p)
        assert f"part {i} of {len(parts)}" in _texts(p) and f"part {i} of {len(parts)}" in p["text"]
    # Put back together, the parts hold the whole diff, in order, and every section once.
    whole = "\n".join(render_message(p) for p in payloads)
    code = "\n".join(re.findall(r"```\n(.*?)\n```", whole, flags=re.S))
    assert diff in code
    for heading in ("Cause", "Approvals", "Changes", "Runs", "Verification", "Undo"):
        assert len(re.findall(rf"^{heading}$", whole.replace("*", ""), flags=re.M)) == 1, heading
    # The link to the run closes the last part.
    assert payloads[-1]["blocks"][-2]["type"] == "actions" and all(
        b["type"] != "actions" for p in payloads[:-1] for b in p["blocks"]
    )


def test_the_proposal_carries_approve_and_reject_for_the_held_run(context):
    inc = reference_incident()
    plan = reference_plan(inc.incident_id)
    (msg,) = proposal_messages(
        inc, plan, run_id=RUN, context=context, links=DagsterLinks("http://localhost:3000")
    )
    payload = msg.payload()
    check_limits(payload)
    check_reads_like_slack(payload)
    actions = [b for b in payload["blocks"] if b["type"] == "actions"]
    (decide,) = actions
    by_id = {e["action_id"]: e for e in decide["elements"]}
    assert json.loads(by_id["dw_approve"]["value"]) == {"plan_id": plan.plan_id, "run_id": RUN}
    assert json.loads(by_id["dw_reject"]["value"]) == {"plan_id": plan.plan_id, "run_id": RUN}
    assert (by_id["dw_approve"]["style"], by_id["dw_reject"]["style"]) == ("primary", "danger")
    assert by_id["dw_approve"]["confirm"]["confirm"]["text"] == "Approve"
    assert by_id["dw_open_run"]["url"] == f"http://localhost:3000/runs/{RUN}"
    text = _texts(payload)
    assert plan.plan_id in payload["text"]
    for needle in [
        "--set WAREHOUSE_NAME=...", '`dw-dagster approve INC-20250616-dc7a01 --as \\"Priya Raman\\"` (inventory-analytics)',
        "`ORGANIZATION_ID` = 7120", "`REGION` = South (from the donor ORGANIZATION_ID 7020)",
        "Planning operations (#planning-ops) <@U0PLANOP1>", "+  LEFT JOIN",
    ]:  # fmt: skip
        assert needle in text, needle
    # The terminal commands' placeholder is escaped: a raw <name> is a link or a mention in mrkdwn. Without a
    # context file no approver is known, and the approve line carries the placeholder too.
    assert '--as \\"&lt;name&gt;\\" --reason' in text
    unnamed = _texts(proposal_messages(inc, plan, run_id=RUN)[0].payload())
    assert unnamed.count("&lt;name&gt;") == 3 and "<name>" not in unnamed and "<name>" not in text
    # A plan too long for one message: split, the buttons once, on the last part.
    long = reference_plan(inc.incident_id, diff="\n".join(f"+  COL_{i}: 1" for i in range(4000)))
    parts = [m.payload() for m in proposal_messages(inc, long, run_id=RUN, context=context)]
    assert len(parts) > 1
    for p in parts:
        check_limits(p)
    kinds = [[b["type"] for b in p["blocks"]] for p in parts]
    assert [k.count("actions") for k in kinds] == [0] * (len(parts) - 1) + [1]


def test_updates_and_the_resolution_link_the_run_they_speak_of():
    inc = reference_incident()
    links = DagsterLinks("http://localhost:3000")
    update = update_message(inc, "Waiting for Priya Raman to deploy.", links=links, run_id=RUN).payload()
    resolved = resolution_message(
        inc, "Back in line.", verification={"reorder_candidates": 31.0, "network_onhand_units": 2331945.333},
        links=links, run_id=RUN,
    ).payload()  # fmt: skip
    for p in (update, resolved):
        check_limits(p)
        check_reads_like_slack(p)
        assert f"http://localhost:3000/runs/{RUN}" in _texts(p)
    assert "2,331,945" in _texts(resolved) and "reorder_candidates" not in resolved["text"]
    # Without a run, the incident's runs.
    bare = update_message(inc, "x", links=links).payload()
    assert "runs?q%5B%5D=tag%3Adw%2Fincident_id" in _texts(bare)


def test_blocks_stay_within_slack_limits_at_scale(context):
    inc = reference_incident()
    many_keys = [
        KeyGap(column="INVENTORY_ITEM_ID", value=str(500000 + i), units=33.0 + i % 7, rows=1)
        for i in range(1260)
    ]
    diagnosis = reference_diagnosis(inc.incident_id, keys=many_keys)
    diagnosis.evidence.update({f"extra_metric_{i}": i * 1000 for i in range(20)})
    diagnosis.test_query = "SELECT 1 -- " + "x" * 10_000
    diagnosis.path = [f"schema_{i}/node_with_a_long_name_{i}" for i in range(300)]
    blast = reference_blast(n_skus=164, extra_assets=60)
    msg = incident_message(inc, diagnosis, blast, context=context).payload()
    check_limits(msg)
    text = _texts(msg)
    assert "more keys" in text and "more affected assets" in text and "more parts of the query" in text
    assert msg["blocks"][-2]["type"] == "actions"  # the Dagster link survives the cut

    big = reference_blast(n_skus=5000)
    big.newly_flagged = [f"SKU-LONG-IDENTIFIER-{i:08d}" for i in range(5000)]
    words = Wording(flagged_noun="SKUs")
    for m in (
        hold_notice(inc, big, max_items=None, wording=words),
        proposed_hold_notice(inc, big, consumer_channels=["#buyers"], max_items=None, wording=words),
    ):
        payload = m.payload()
        check_limits(payload)
        assert "more SKUs" in _texts(payload)


def test_the_log_shows_the_blocks_as_a_person_sees_them(context, metrics):
    inc, diagnosis, blast, wording = _reference(context, metrics)
    root = incident_message(inc, diagnosis, blast, context=context, run_id=RUN, wording=wording).payload()
    reply = update_message(inc, "Owners are reviewing the proposal.", run_id=RUN).payload()
    log = [
        {"ts": "1750145880.000100", "channel": "#planning-ops", "thread_ts": None, **root},
        {"ts": "1750145890.000100", "channel": "#buyers", "thread_ts": None, "text": "plain &lt;text&gt;", "blocks": None},
        {"ts": "1750146000.000200", "channel": "#planning-ops", "thread_ts": "1750145880.000100", **reply},
    ]  # fmt: skip
    shown = render_log(log, ZoneInfo("America/Chicago"))
    lines = shown.splitlines()
    assert lines[0] == "##### #planning-ops" and "##### #buyers" in lines
    # The blocks, not the fallback: the fields, the buttons, the mentions, the date in the reader's zone.
    for needle in [
        "Gap units: 41,800", "ORGANIZATION_ID = 7120", "[Diagnosis run in Dagster → http://localhost:3000/runs/",
        "@U0PLANOP1", "opened Jun 17, 2025 02:30 CDT", "  ↳ [2025-06-17 02:40:00 CDT] reply",
        "    :memo: *Update* · INC-20250616-dc7a01", "plain <text>",
    ]:  # fmt: skip
        assert needle in shown, needle
    assert shown.index("##### #buyers") > shown.index("    :memo: *Update*"), "a thread under its root"


def test_routing_from_the_context_file(context):
    inc = reference_incident()
    diagnosis, blast = reference_diagnosis(inc.incident_id), reference_blast()
    # The distributor's inventory domain: L3 with a standing approval for hold notices to the buyers.
    r = route_incident(context, diagnosis, blast)
    assert r.owner_channels == ("#inventory-analytics", "#planning-ops")
    assert r.consumer_channels == ("#buyers",) and r.consumer_teams == ("buyers",)
    assert r.hold == "act" and r.autonomy == "L3 (domain inventory)"
    assert route_incident(context, diagnosis, blast, stopped=True).hold == "propose"  # the org-wide stop
    inventory = context.domains["inventory"]
    for changed, expected in [
        ({"autonomy": Autonomy.L2}, "propose"),
        ({"standing_approvals": []}, "propose"),
        ({"autonomy": Autonomy.L0}, "none"),
    ]:
        ctx = context.model_copy(update={"domains": {"inventory": inventory.model_copy(update=changed)}})
        assert route_incident(ctx, diagnosis, blast).hold == expected, changed
    # L0: nothing automated, not even the alert; L1 and up, and assets in no domain, are alerted.
    l0 = context.model_copy(
        update={"domains": {"inventory": inventory.model_copy(update={"autonomy": Autonomy.L0})}}
    )
    assert not alerts_allowed(l0, diagnosis, blast)
    assert alerts_allowed(context, diagnosis, blast) and alerts_allowed(
        context.model_copy(update={"domains": {}}), diagnosis, blast
    )
    # L4: every downstream reader is warned at once, the S&OP Liveboard's owners too.
    l4 = context.model_copy(
        update={"domains": {"inventory": inventory.model_copy(update={"autonomy": Autonomy.L4})}}
    )
    r = route_incident(l4, diagnosis, blast)
    assert r.hold == "act" and r.consumer_channels == ("#buyers", "#sop")
    # No domain: observe only (propose), and the hold goes to the owners of the flagged list.
    bare = context.model_copy(update={"domains": {}})
    r = route_incident(bare, diagnosis, blast)
    assert (r.hold, r.consumer_teams, r.autonomy) == ("propose", ("inventory-analytics",), "L1 (no domain)")
    assert hold_mode_for("L4", standing_approval=True, stopped=True) == "propose"
    assert hold_mode_for("L3", standing_approval=False) == "propose"
    assert hold_mode_for("L0", standing_approval=True) == "none"
    assert route_incident(context, diagnosis, BlastRadius(), hold="act").hold == "none"

    by_email = diagnosis.model_copy(update={"owners": ["dana.ortiz@distributor.example", "planning-ops"]})
    assert route_incident(context, by_email, blast).owner_channels == ("#planning-ops",)
    stray = diagnosis.model_copy(update={"owners": ["nobody"]})
    with pytest.raises(ValueError, match="no owner on the path"):
        route_incident(context, stray, blast)
    r = route_incident(context, stray, blast, fallback_channel="#data-platform")
    assert r.owner_channels == ("#data-platform",) and r.unrouted == ("nobody",)


def test_what_people_read_has_subjects_words_and_no_statistics_for_business_readers(context, metrics):
    from dw_dagster.notifications.hold_message import hold_notice
    from dw_dagster.notifications.incident_asset import incident_materialization
    from dw_dagster.notifications.text import humanise_names

    inc, diagnosis, blast, wording = _reference(context, metrics)
    technical = inc.model_copy(update={"title": "reorder_candidates = 195 SKUs against an expected 31 "
                                                 "(+164 SKUs, robust z +29.3); moved: share 2.1% -> 9.8%"})  # fmt: skip
    # The headline reads the metric's name as words; asset keys and identifiers stay as the data spells them.
    header = incident_message(technical, diagnosis, blast, context=context, wording=wording).blocks[0]
    assert (
        "reorder candidates = 195 SKUs" in header.text.text and "reorder_candidates" not in header.text.text
    )
    assert humanise_names("mart/mart_reorder_candidates and ORGANIZATION_ID") == (
        "mart/mart_reorder_candidates and ORGANIZATION_ID"
    )
    # The hold notice goes to the people who act on the list: what it means for them, not the statistics.
    held = json.dumps(hold_notice(technical, blast, wording=wording).payload())
    assert "robust z" not in held and "share" not in held and inc.incident_id in held
    # Each dw/incidents event says which incident it is about; its JSON figures are rounded.
    event = incident_materialization(technical, [], diagnosis, blast)
    assert event.description.startswith(f"{inc.incident_id}: reorder candidates = 195 SKUs")
    floats = re.findall(r"-?\d+\.\d+", json.dumps(event.metadata["incident_json"].value))
    assert floats and all(len(f.split(".")[1]) <= 2 or f.startswith(("0.00", "-0.00")) for f in floats), (
        floats
    )


def test_the_incident_page_names_the_class_in_words():
    from dw_dagster.notifications.incident_view import incident_markdown

    incident = reference_incident()
    diagnosis = reference_diagnosis(incident.incident_id)
    page = incident_markdown(incident, [], diagnosis)
    assert f"#### Diagnosis: {diagnosis.classification.value.replace('_', ' ')}" in page
    assert diagnosis.classification.value not in page.split("#### Diagnosis:")[1].splitlines()[0]
