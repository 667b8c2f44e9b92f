"""A checks step's context in one statement: the accepted levels, the incident days and the fixed incidents
read by ``HistorySession.night_context`` are what ``rebases``, ``incident_days`` and the incident store read
one by one, and a verified fix's levels are recorded from it (local Snowflake, no world)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from ops_warehouse import ops_schema, warehouse  # noqa: F401 - the fixture
from warehouse_statements import statements

from dw_dagster.checks.history import HistoryStore, Rebase, volume_series
from dw_dagster.checks.levels import remediation_levels

DAY = date(2026, 3, 10)


def _incident(cur, ops, incident_id: str, day: date | None, updated: datetime) -> None:
    cur.execute(
        f"INSERT INTO {ops.table('INCIDENTS')} (INCIDENT_ID, CAUSE_KEY, STATUS, BUSINESS_DATE, OPENED_AT,"
        " UPDATED_AT) VALUES (%s, %s, 'resolved', %s, %s, %s)",
        (incident_id, incident_id, day, updated, updated),
    )


def _event(cur, ops, incident_id: str, key: str, kind: str, detail: dict) -> None:
    cur.execute(
        f"INSERT INTO {ops.table('INCIDENT_EVENTS')} (INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL)"
        " VALUES (%s, %s, %s, %s, %s)",
        (incident_id, key, kind, datetime.now(UTC), json.dumps(detail)),
    )


def test_night_context_reads_levels_incident_days_and_fixes_in_one_statement(warehouse):  # noqa: F811
    _, wh = warehouse
    ops = ops_schema(wh, "NIGHT_CONTEXT")
    now = datetime.now(UTC)
    store = HistoryStore(wh, ops, check="volume", dagster_run_id="r1")
    with store.session("test") as history:
        cur = history.cur
        _incident(cur, ops, "fixed", DAY - timedelta(days=2), now)
        _event(cur, ops, "fixed", "f1", "finding", {"asset_key": "mart/a"})
        _event(cur, ops, "fixed", "f2", "finding", {"asset_key": "mart/b"})
        _event(cur, ops, "fixed", "r1", "receipt", {"verified": True})
        _incident(cur, ops, "unverified", DAY - timedelta(days=3), now)
        _event(cur, ops, "unverified", "f1", "finding", {"asset_key": "mart/c"})
        _event(cur, ops, "unverified", "r1", "receipt", {"verified": False})
        _incident(cur, ops, "no_receipt", DAY - timedelta(days=1), now)
        _event(cur, ops, "no_receipt", "f1", "finding", {"asset_key": "mart/d"})
        _incident(cur, ops, "tonight", DAY, now)
        _event(cur, ops, "tonight", "r1", "receipt", {"verified": True})
        _incident(cur, ops, "long_ago", DAY - timedelta(days=400), now)
        history.record_rebase(Rebase(series="volume:mart/e", from_date=DAY - timedelta(days=5), kind="accepted",
                                     reason="owner", accepted_by="ana"))  # fmt: skip
        history.record_rebase(
            Rebase(series="volume:mart/e", from_date=DAY - timedelta(days=9), kind="explained", reason="keys")
        )
        since = DAY - timedelta(days=90)

        with statements() as sent:
            ctx = history.night_context(since, DAY)
        assert len(sent) == 1
        assert ctx.levels == history.rebases(since)
        assert ctx.incident_days == history.incident_days(since)
        assert ctx.incident_days == {DAY - timedelta(days=d) for d in (0, 1, 2, 3)}
        assert [(i.incident_id, i.verified, i.assets) for i in ctx.fixed] == [
            ("fixed", True, {"mart/a", "mart/b"}),
            ("unverified", False, {"mart/c"}),
        ]

        downstream = {"mart/a": {"mart/e"}, "mart/b": set()}
        new = remediation_levels(
            history, ctx.fixed, DAY, lambda a: [volume_series(a)], downstream.__getitem__
        )
        assert sorted(r.series for r in new) == ["volume:mart/a", "volume:mart/b", "volume:mart/e"]

        def plain(levels):
            return {
                s: [(r.from_date, r.kind, r.reason, r.accepted_by) for r in rs] for s, rs in levels.items()
            }

        assert plain(ctx.with_levels(new, since)) == plain(history.rebases(since))
        again = remediation_levels(
            history, ctx.fixed, DAY, lambda a: [volume_series(a)], downstream.__getitem__
        )
        assert again == [], "recorded once"
