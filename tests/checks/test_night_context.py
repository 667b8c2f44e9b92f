"""A checks run's reads and writes of the ops schema, one statement each: the accepted levels, the incident
days, the fixed incidents and every series' history read by ``HistorySession.night_context`` are what
``rebases``, ``incident_days``, the incident store and ``metric_history`` read one by one, and a verified
fix's levels are recorded from it; ``record_night`` writes every series of a night at once (local Snowflake,
no world)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from ops_warehouse import ops_schema, warehouse  # noqa: F401 - the fixture
from warehouse_statements import statements

from dw_dagster.checks.history import HistoryStore, Reading, Rebase, volume_series
from dw_dagster.checks.levels import remediation_levels

DAY = date(2026, 3, 10)


def _incident(cur, ops, incident_id: str, day: date | None, updated: datetime) -> None:
    cur.execute(
        f"INSERT INTO {ops.table('INCIDENTS')} (INCIDENT_ID, CAUSE_KEY, STATUS, BUSINESS_DATE, OPENED_AT,"
        " UPDATED_AT) VALUES (?, ?, 'resolved', ?, ?, ?)",
        (incident_id, incident_id, day, updated, updated),
    )


def _event(cur, ops, incident_id: str, key: str, kind: str, detail: dict) -> None:
    cur.execute(
        f"INSERT INTO {ops.table('INCIDENT_EVENTS')} (INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL)"
        " VALUES (?, ?, ?, ?, ?)",
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


def test_night_context_reads_each_series_history_in_the_same_statement(warehouse):  # noqa: F811
    _, wh = warehouse
    ops = ops_schema(wh, "NIGHT_HISTORIES")
    with HistoryStore(wh, ops).session("test") as history:
        for back in range(1, 31):
            history.record_night(
                DAY - timedelta(days=back),
                {
                    "sales": Reading(value=100.0 + back, groups={"STORE_ID=1": 60.0, "STORE_ID=2": None}),
                    volume_series("sales/fct"): Reading(
                        value=1000.0 + back, source="count", flagged=back == 3
                    ),
                    "rows:sales/dim": Reading(value=2.0, groups={"ID=1": 1.0, "ID=2": 1.0}),
                },
                "r1",
                None,
            )
        wanted = {"sales": 20, volume_series("sales/fct"): 20, "rows:sales/dim": 5, "never": 20}
        with statements() as sent:
            ctx = history.night_context(
                DAY - timedelta(days=90), DAY, {s: DAY - timedelta(days=n) for s, n in wanted.items()}
            )
        assert len(sent) == 1
        for series, days in wanted.items():
            assert ctx.past[series] == history.metric_history(series, DAY, days)
        assert (
            len(ctx.past["sales"]) == 20 and len(ctx.past["rows:sales/dim"]) == 5 and ctx.past["never"] == {}
        )
        assert ctx.past["sales"][DAY - timedelta(days=1)].groups == {"STORE_ID=1": 60.0, "STORE_ID=2": None}
        assert [d for d, r in ctx.past[volume_series("sales/fct")].items() if r.flagged] == [
            DAY - timedelta(days=3)
        ]


def test_record_night_writes_every_series_in_one_statement_and_a_flag_stays(warehouse):  # noqa: F811
    _, wh = warehouse
    ops = ops_schema(wh, "NIGHT_WRITE")
    with HistoryStore(wh, ops).session("test") as history:
        with statements() as sent:
            history.record_night(
                DAY,
                {
                    "sales": Reading(value=1.0, groups={}),
                    volume_series("a"): Reading(value=5.0, source="count", flagged=True),
                },
                "r1",
                "c1",
            )
        assert len(sent) == 1
        # A rerun of the night (after a fix) replaces its values; the night stays out of the baselines.
        history.record_night(
            DAY,
            {"sales": Reading(value=2.0, groups={}), volume_series("a"): Reading(value=6.0, source="count")},
            "r2",
            "c2",
        )
        history.cur.execute(
            f"SELECT METRIC, VALUE, SOURCE, FLAGGED, DAGSTER_RUN_ID FROM {ops.table('METRIC_HISTORY')} ORDER BY 1"
        )
        assert history.cur.fetchall() == [
            ("sales", 2.0, None, False, "r2"),
            ("volume:a", 6.0, "count", True, "r2"),
        ]
        assert history.volume_history("a", DAY + timedelta(days=1), 1)[DAY].value == 6.0
        assert history.latest_volume("a") == DAY
