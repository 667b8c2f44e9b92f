"""Every value bound (dw_dagster/warehouse/connections.py): a value that would break or inject SQL if it were
written into a statement's text (a quote, ``'); DROP``, ``%s``, ``?``) reaches each family of statements the
product writes (incidents and their events, the Slack outbox, the series' histories and levels, a reference
row's insert, check and undo, a key count, a measured part, a configured draft_sql) and comes back as the same
data, and no statement text the connector sent holds it."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from sqlglot import exp

from dw_dagster.checks.history import HistoryStore, Reading, Rebase
from dw_dagster.checks.keys import rows_with_keys
from dw_dagster.checks.measure import Binds, Part, measure, quoted_table
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.outbox import SlackOutbox
from dw_dagster.records.incidents import Finding
from dw_dagster.records.remediation import Approval, ReferenceRow
from dw_dagster.remediation.changes import apply_row, row_present, undo_statement
from dw_dagster.sql import placeholders, positional, table_reference
from dw_dagster.warehouse.migrations import migrate
from dw_dagster.warehouse.ops import OpsSchema

MARK = "bnd7q"
# Each would end the string, start a statement, or be read as a placeholder if it were in the text.
HOSTILE = f"O'Brien {MARK}'); DROP TABLE T; -- %s %(key)s ? \\' \""
DB, SCHEMA = "DW_WH_TEST", "BOUND"
DAY = date(2026, 3, 10)


@pytest.fixture
def ops(warehouse) -> OpsSchema:
    ops = OpsSchema(DB, "OPS_BOUND")
    migrate(warehouse, ops)
    return ops


def _no_value_in_any_text(sent) -> None:
    texts = [s.sql for s in sent]
    assert texts, "statements were sent"
    assert not [t for t in texts if MARK in t], "a value was written into a statement's text"


def test_incident_records_and_slack_payloads_round_trip_as_data(warehouse, ops, sent):
    store = IncidentStore(warehouse, ops)
    finding = Finding(
        check_name=f"total {HOSTILE}", asset_key="mart/orders", business_date=DAY, summary=HOSTILE,
        cause_scope=f"job:{HOSTILE}", evidence={"note": HOSTILE, "gap_units": 41800},
    )  # fmt: skip
    recorded = store.record_finding(finding)
    incident = recorded.incident
    assert (
        recorded.new_incident
        and incident.title == HOSTILE
        and incident.detail["cause_scope"] == f"job:{HOSTILE}"
    )
    assert store.append_event(incident.incident_id, "note", f"note|{HOSTILE}", {"text": HOSTILE})
    assert not store.append_event(incident.incident_id, "note", f"note|{HOSTILE}", {"text": "again"})
    store.update_detail(incident.incident_id, related=HOSTILE)
    store.transition(incident.incident_id, "resolved", by=HOSTILE, reason=HOSTILE, key=HOSTILE)
    again = store.get(incident.incident_id)
    assert again is not None and again.status == "resolved" and again.detail["related"] == HOSTILE
    (note,) = store.events(incident.incident_id, kind="note")
    (status,) = store.events(incident.incident_id, kind="status")
    assert note.event_key == f"note|{HOSTILE}" and note.detail == {"text": HOSTILE}
    assert status.detail["by"] == status.detail["reason"] == HOSTILE
    assert [i.incident_id for i in store.list(status=("resolved", HOSTILE))] == [incident.incident_id]

    outbox = SlackOutbox(warehouse, ops)
    now = datetime.now(UTC)
    payload = {"text": HOSTILE, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": HOSTILE}}]}
    with outbox.connect("test") as cur:
        key, new = outbox.enqueue(cur, incident.incident_id, f"#{HOSTILE}", "alert", HOSTILE, payload, now)
        msg = outbox.get(cur, key)
        assert new and msg is not None and msg.payload == payload and msg.channel == f"#{HOSTILE}"
        assert outbox.thread_root(cur, msg.thread_key) == key and msg.root_key == key
        assert outbox.claim(cur, msg, HOSTILE, now)
        assert outbox.mark_failed(cur, key, HOSTILE, "failed", HOSTILE, now)
        failed = outbox.get(cur, key)
        assert failed is not None and failed.last_error == HOSTILE and failed.status == "pending"
        assert outbox.claim(cur, failed, "c2", now)
        assert outbox.mark_sent(cur, key, "c2", HOSTILE, "1.2", None, now)
        assert outbox.known_channel_id(cur, f"#{HOSTILE}") == HOSTILE
        assert outbox.thread_channels(cur, incident.incident_id, ("alert",)) == [f"#{HOSTILE}"]
    _no_value_in_any_text(sent)


def test_histories_levels_and_reference_rows_round_trip_as_data(warehouse, ops, sent):
    series = f"total:{HOSTILE}"
    groups = {f"STORE={HOSTILE}": 3.5, "STORE=2": None}
    with HistoryStore(warehouse, ops).session("test") as history:
        history.record_night(DAY, {series: Reading(value=7.25, groups=groups, source=HOSTILE)}, HOSTILE, None)
        history.flag_metric(series, DAY)
        assert history.record_rebase(
            Rebase(series=series, from_date=DAY, kind="accepted", reason=HOSTILE, accepted_by=HOSTILE)
        )
        recorded = history.latest_metric(series)
        past = history.night_context(DAY, date(2026, 3, 11), {series: DAY})
    assert recorded is not None and recorded.value == 7.25 and recorded.groups == groups and recorded.flagged
    assert past.past[series][DAY].groups == groups
    (level,) = past.levels[series]
    assert level.reason == level.accepted_by == HOSTILE

    table = (DB, SCHEMA, "REGION_MAP")
    with warehouse.tagged_connection("test") as conn:
        cur = conn.cursor()
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{DB}"."{SCHEMA}"')
        cur.execute(
            f'CREATE OR REPLACE TABLE {table_reference(*table)} ("CODE" VARCHAR, "NAME" VARCHAR, "BY" VARCHAR)'
        )
        row = ReferenceRow(
            asset_key="ref/region_map", table_parts=table, key_column="CODE",
            values={"CODE": HOSTILE, "NAME": None}, audit_columns={"by": "BY"},
        )  # fmt: skip
        approval = Approval(
            plan_id="p", team="t", approver=HOSTILE, email="a@example.com", at=datetime.now(UTC), run_id="r",
            values={"NAME": HOSTILE},
        )  # fmt: skip
        change = apply_row(cur, "p1", row, approval)
        assert change.added and row_present(cur, change)
        assert not apply_row(cur, "p1", row, approval).added, "found there as approved"
        cur.execute(f"SELECT * FROM {table_reference(*table)}")
        assert cur.fetchall() == [(HOSTILE, HOSTILE, HOSTILE)]
        assert rows_with_keys(cur, table, "CODE", [HOSTILE, "other"]) == 1

        binds = Binds()
        count = exp.select(exp.Count(this=exp.Star())).from_(quoted_table(*table))
        matching = count.where(exp.column("NAME", quoted=True).eq(binds(HOSTILE)))
        measured = measure(cur, [Part(("one",), matching), Part(("all",), count)], binds)
        assert measured[("one",)] == [(1,)] and measured[("all",)] == [(1,)]

        draft = f'SELECT "NAME", \'100%%\' AS P FROM {table_reference(*table)} WHERE "CODE" = %(key)s'
        cur.execute(*positional(draft, {"key": HOSTILE}))
        assert cur.fetchall() == [(HOSTILE, "100%")]

        cur.execute(*undo_statement(change))
        assert not row_present(cur, change)
    _no_value_in_any_text(sent)


def test_placeholders_and_positional_refuse_what_they_cannot_bind():
    assert placeholders(3) == "?, ?, ?"
    with pytest.raises(ValueError, match="at least one value"):
        placeholders(0)
    assert positional("SELECT %(a)s, %(b)s, %(a)s, '5%%'", {"a": 1, "b": "x"}) == (
        "SELECT ?, ?, ?, '5%'",
        (1, "x", 1),
    )
    with pytest.raises(ValueError, match=r"%\(kee\)s: no such value to bind; expected one of key"):
        positional("SELECT %(kee)s", {"key": 1})
    with pytest.raises(ValueError, match="a % at 19 that is neither"):
        positional("SELECT 1 WHERE X = %s", {"key": 1})
