"""The org-wide stop as signed, chained events and the audit trail, on the local Snowflake server: each attempt
of issue #29 that a row could make, refused.

- A ``resume`` row written by hand with a 2099 timestamp lifted a genuine stop, and after it a genuine stop
  printed "running": now the event in force is the last link of the signed chain, whatever a row's date.
- ``audit verify`` walks the trail and names the first record that does not verify: edited, deleted, written
  by hand, or an entry whose signature is not its signer's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from ops_warehouse import ops_schema, warehouse

from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import Finding
from dw_dagster.remediation.audit import AuditedStore, AuditTrail, TrailSigner
from dw_dagster.remediation.control import ControlError, ControlEvent, OrgControl
from dw_dagster.remediation.identity import Signer, load_private_key, new_key_pair, sign_record
from dw_dagster.remediation.signing import Seal
from dw_dagster.sql import placeholders

__all__ = ["warehouse"]
SEAL = Seal("s" * 40)


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    keys = {}
    for who in ("omar", "priya", "mallory"):
        pem, public = new_key_pair()
        (folder / who).write_bytes(pem)
        keys[who] = (load_private_key(folder / who), public)
    member = lambda name, email, who: {"name": name, "email": email, "approver_key": keys[who][1]}  # noqa: E731
    context = ContextFile.model_validate({
        "teams": {
            "data-platform": {"name": "Data platform", "slack_channel": "#data-platform",
                              "members": [member("Omar Haddad", "omar@x.example", "omar")]},
            "inventory-analytics": {"name": "Inventory", "slack_channel": "#inv",
                                    "members": [member("Priya Raman", "priya@x.example", "priya")]},
        },
        "domains": {"inventory": {"assets": ["inventory/*"], "escalation_team": "data-platform"}},
    })  # fmt: skip
    signers = {
        who: Signer(context.person(email), keys[who][0])
        for who, email in (("omar", "omar@x.example"), ("priya", "priya@x.example"))
    }
    return context, signers, keys


def _insert(wh, ops, **row) -> None:
    """What an insider with write access to the ops schema can do: add a control row."""
    columns = ["EVENT_AT", "ACTION", "ACTOR", *(k for k in row if k not in ("EVENT_AT", "ACTION", "ACTOR"))]
    values = [
        row.get("EVENT_AT", datetime.now(UTC)),
        row["ACTION"],
        row["ACTOR"],
        *(row[c] for c in columns[3:]),
    ]
    with ops.connect(wh, "test") as conn:
        conn.cursor().execute(
            f"INSERT INTO {ops.table('CONTROL_EVENTS')} ({', '.join(columns)}) VALUES ({placeholders(len(columns))})",
            tuple(values),
        )


def test_a_forged_resume_row_dated_2099_lifts_no_stop_and_a_later_stop_takes_effect(warehouse, people):
    _, wh = warehouse
    context, signers, _ = people
    ops = ops_schema(wh, "OPS_STOP_FORGED")
    control = OrgControl(wh, ops, context)
    assert control.set("stop", signers["omar"], "warehouse migration").stopped
    _insert(wh, ops, EVENT_AT=datetime(2099, 1, 1, tzinfo=UTC), ACTION="resume", ACTOR="Omar Haddad")
    state = control.state()
    assert state.stopped and state.actor == "Omar Haddad", "the 2099 row lifts nothing"
    assert any("resume by 'Omar Haddad' dated 2099-01-01" in i and "unsigned" in i for i in state.ignored)
    assert "ignored 1 control row: resume by" in state.describe(), "and it is reported"
    assert control.set("resume", signers["omar"]).stopped is False
    again = control.set("stop", signers["omar"], "again")
    assert again.stopped and again.seq == 3, "a genuine stop after the forged row takes effect"
    assert not control.dispatch_allowed()


def test_only_the_governing_team_stops_and_resumes_and_a_row_signed_by_anyone_else_is_ignored(
    warehouse, people
):
    _, wh = warehouse
    context, signers, keys = people
    ops = ops_schema(wh, "OPS_STOP_GOVERNED")
    control = OrgControl(wh, ops, context)
    control.set("stop", signers["omar"], "incident review")
    with pytest.raises(ControlError, match="Priya Raman may not resume: .* governing team \\(data-platform"):
        control.set("resume", signers["priya"])
    # Priya signs a resume anyway and writes it as the next link; Mallory's key is nobody's.
    head = control.state()
    for who, email in (("priya", "priya@x.example"), ("mallory", "mallory@x.example")):
        event = ControlEvent(seq=head.seq + 1, prev=head.head, action="resume", actor=who, email=email,
                             at=datetime.now(UTC).isoformat())  # fmt: skip
        proof = sign_record(keys[who][0], event.record())
        _insert(wh, ops, ACTION="resume", ACTOR=who, SEQ=event.seq, PREV_HASH=event.prev, EMAIL=email,
                SIGNED_AT=event.at, PROOF=json.dumps(proof.model_dump()))  # fmt: skip
    state = control.state()
    assert state.stopped
    assert any("Priya Raman is not a member of the governing team" in i for i in state.ignored)
    assert any("nobody's approver_key" in i for i in state.ignored)


def test_two_events_on_the_same_link_the_stop_wins_and_the_other_is_reported_out_of_order(warehouse, people):
    _, wh = warehouse
    context, signers, keys = people
    ops = ops_schema(wh, "OPS_STOP_RACE")
    control = OrgControl(wh, ops, context)
    control.set("stop", signers["omar"], "first")
    head = control.state()
    # Two events written for the same next link (two people at once, or a captured event replayed later).
    for action in ("resume", "stop"):
        event = ControlEvent(seq=head.seq + 1, prev=head.head, action=action, actor="Omar Haddad",
                             email="omar@x.example", reason=action, at=datetime.now(UTC).isoformat())  # fmt: skip
        _insert(wh, ops, EVENT_AT=datetime(2099, 1, 1, tzinfo=UTC), ACTION=action, ACTOR="Omar Haddad",
                REASON=action, SEQ=event.seq, PREV_HASH=event.prev, EMAIL="omar@x.example", SIGNED_AT=event.at,
                PROOF=json.dumps(sign_record(keys["omar"][0], event.record()).model_dump()))  # fmt: skip
    state = control.state()
    assert state.stopped and state.seq == 2 and state.reason == "stop"
    assert any("resume by 'Omar Haddad' (event 2): out of order" in i for i in state.ignored)
    assert control.set("resume", signers["omar"]).seq == 3, "the next event follows the one in force"


def _finding(day: int) -> Finding:
    return Finding(check_name="total", asset_key="inventory/fct", business_date=datetime(2025, 6, day).date(),
                   summary="total failed", cause_scope="job:nightly", evidence={"gap": 1})  # fmt: skip


def _rows(wh, ops, sql: str, *args) -> None:
    with ops.connect(wh, "test") as conn:
        conn.cursor().execute(
            sql.format(events=ops.table("INCIDENT_EVENTS"), trail=ops.table("AUDIT_TRAIL")), args
        )


def test_audit_verify_names_an_edited_a_deleted_and_a_hand_written_record(warehouse, people, monkeypatch):
    monkeypatch.setenv("DW_SIGNING_KEY", "s" * 40)  # this process is the code location: it seals its entries
    _, wh = warehouse
    context, signers, _ = people
    ops = ops_schema(wh, "OPS_AUDIT")
    plain = IncidentStore(wh, ops)
    incident = plain.record_finding(_finding(16)).incident.incident_id
    store = AuditedStore(plain, TrailSigner(seal=SEAL))
    for i in range(3):
        assert store.append_event(incident, "approval", f"approval|p|r|team{i}", {"team": f"team{i}", "n": i})
    store.append_event(incident, "slack_message", "msg|1", {"not": "audited"})
    OrgControl(wh, ops, context).set("stop", signers["omar"], "audit test")
    trail = AuditTrail(wh, ops)
    control = OrgControl(wh, ops, context)
    report = trail.verify(context, SEAL, control.records())
    assert report.entries == 4 and report.verified, report.problems

    _rows(wh, ops, "UPDATE {events} SET DETAIL = ? WHERE EVENT_KEY = ?", json.dumps({"team": "x", "n": 1}),
          "approval|p|r|team1")  # fmt: skip
    report = trail.verify(context, SEAL, control.records())
    assert report.problems[0] == (
        f"entry 2 (approval 'approval|p|r|team1' of {incident}): the record in the warehouse is not the one "
        "appended: edited"
    )
    assert not trail.verify(context, None, control.records()).verified, (
        "without the key: errored, never passed"
    )

    _rows(wh, ops, "DELETE FROM {events} WHERE EVENT_KEY = ?", "approval|p|r|team0")
    plain.append_event(incident, "approval", "approval|p|r|forged", {"team": "forged"})
    problems = trail.verify(context, SEAL, control.records()).problems
    assert problems[0].startswith("entry 1 (approval 'approval|p|r|team0'") and problems[0].endswith(
        "deleted"
    )
    assert (
        f"approval 'approval|p|r|forged' of {incident}: not on the audit trail: written outside dw-dagster"
        in problems
    )
    _insert(wh, ops, EVENT_AT=datetime(2099, 1, 1, tzinfo=UTC), ACTION="resume", ACTOR="Omar Haddad")
    assert any(
        "control|unsigned|resume by 'Omar Haddad'" in p
        for p in trail.verify(context, SEAL, control.records()).problems
    )


def test_entries_signed_by_a_person_verify_with_their_key_and_a_broken_link_is_named(warehouse, people):
    _, wh = warehouse
    context, _, keys = people
    ops = ops_schema(wh, "OPS_AUDIT_PERSON")
    plain = IncidentStore(wh, ops)
    incident = plain.record_finding(_finding(17)).incident.incident_id
    # A person's shell: no code location key, their own approver key signs what they record.
    priya = AuditedStore(plain, TrailSigner(person_email="priya@x.example", key=keys["priya"][0]))
    priya.append_event(incident, "undo", "undo|1", {"by": "Priya Raman"})
    unproven = AuditedStore(plain, TrailSigner())
    unproven.append_event(incident, "refused", "refused|1", {"reason": "must prove who runs it"})
    unproven.append_event(incident, "approval", "approval|x", {"team": "t"})
    trail = AuditTrail(wh, ops)
    report = trail.verify(context, None)
    assert report.entries == 3 and report.problems == [
        f"entry 3 (approval 'approval|x' of {incident}): unsigned ('unproven')"
    ], "an unproven person's refusal is a link; an unsigned approval is not accepted"
    # Mallory signs an entry as Priya with her own key: not Priya's signature.
    forged = AuditedStore(plain, TrailSigner(person_email="priya@x.example", key=keys["mallory"][0]))
    forged.append_event(incident, "change", "change|1", {"what": "x"})
    assert "entry 4 (change 'change|1' of " in trail.verify(context, None).problems[1]
    assert trail.verify(context, None).problems[1].endswith("its signature is not priya@x.example's")
    _rows(wh, ops, "UPDATE {trail} SET PREV_HASH = 'sha256:00' WHERE SEQ = 2")
    assert any(p.startswith("entry 2 (refused") and "does not follow entry 1" in p
               for p in trail.verify(context, None).problems)  # fmt: skip
