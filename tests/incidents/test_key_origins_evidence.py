"""A dropped key's origin worded by the evidence (``origins.key_origins``), on DuckDB under fakesnow: a key
the reference lacks was deleted only if it was there before (its rows date from the target's last good
night or earlier); a key first seen on the incident's first night is new on its second night too, and is
missing from the reference, never "deleted". Two shapes: a grid's meters (a key of two text columns) and a
telecom's subscribers (one numeric column)."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession, Reading
from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.joins import measure_join, parse_joins
from dw_dagster.incidents.origins import key_origins
from dw_dagster.warehouse.ops import OpsSchema

METRICS = Path(__file__).resolve().parent / "worlds" / "meters" / "metrics.yaml"
METERS_NIGHT = date(2025, 10, 28)
"""The incident's second night on the meters: 27 October, its first, is flagged on the target total."""
SUBSCRIBERS_NIGHT = date(2025, 11, 5)
"""The incident's second night on the subscribers: 4 November has an incident (the total was not flagged)."""
METERS_JOIN = """FROM {{ ref('RAW', 'READINGS') }} "RD"
INNER JOIN {{ ref('REF', 'UNITS') }} "U" ON "RD"."SITE" = "U"."SITE" AND "RD"."TAG" = "U"."TAG\""""
SUBSCRIBERS_JOIN = """FROM {{ ref('RAW', 'USAGE') }} "US"
INNER JOIN {{ ref('REF', 'SUBSCRIBERS') }} "S" ON "US"."SUBSCRIBER_ID" = "S"."SUBSCRIBER_ID\""""


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


@pytest.fixture(scope="module")
def conn():
    with diagnosis_db("RAW", "REF") as conn:
        yield conn


@pytest.fixture(scope="module")
def ctx(conn):
    c = conn.cursor()
    c.execute('CREATE TABLE "DB"."REF"."UNITS" (SITE VARCHAR, TAG VARCHAR)')
    c.execute('INSERT INTO "DB"."REF"."UNITS" VALUES (\'N\', \'A-1\')')  # N/A-3 deleted, N/A-7 never added
    c.execute(
        'CREATE TABLE "DB"."RAW"."READINGS" (SITE VARCHAR, TAG VARCHAR, QTY NUMBER(38,0), READ_ON DATE)'
    )
    c.execute(
        'INSERT INTO "DB"."RAW"."READINGS" VALUES'
        " ('N', 'A-1', 10, '2025-10-28'), ('N', 'A-3', 40, '2025-10-01'), ('N', 'A-3', 40, '2025-10-28'),"
        " ('N', 'A-7', 30, '2025-10-27'), ('N', 'A-7', 30, '2025-10-28')"
    )
    c.execute('CREATE TABLE "DB"."REF"."SUBSCRIBERS" (SUBSCRIBER_ID NUMBER(38,0), PLAN_ID NUMBER(38,0))')
    c.execute('INSERT INTO "DB"."REF"."SUBSCRIBERS" VALUES (1001, 12)')  # 1002 deleted, 2900001 never loaded
    c.execute(
        'CREATE TABLE "DB"."RAW"."USAGE" (SUBSCRIBER_ID NUMBER(38,0), MB NUMBER(38,0), SESSION_DAY DATE)'
    )
    c.execute(
        'INSERT INTO "DB"."RAW"."USAGE" VALUES (1001, 500, \'2025-11-05\'), (1002, 300, \'2025-09-12\'),'
        " (1002, 300, '2025-11-05'), (2900001, 90, '2025-11-04'), (2900001, 90, '2025-11-05')"
    )
    history = HistorySession(conn, OpsSchema("DB"))
    metrics = load_metrics_file(METRICS)
    total = metrics.totals[0]
    for d in (METERS_NIGHT - timedelta(days=k) for k in range(1, 6)):
        flagged = d == METERS_NIGHT - timedelta(days=1)
        history.record_night(d, {total.name: Reading(value=100.0, flagged=flagged)}, None, None)
    for d in (SUBSCRIBERS_NIGHT - timedelta(days=k) for k in range(1, 6)):
        history.record_night(d, {total.name: Reading(value=100.0)}, None, None)
    c.execute(
        'INSERT INTO "DB"."DW_OPS"."INCIDENTS" (INCIDENT_ID, CAUSE_KEY, STATUS, BUSINESS_DATE, OPENED_AT,'
        " UPDATED_AT) VALUES ('INC-1', 'job:usage', 'open', ?, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
        (SUBSCRIBERS_NIGHT - timedelta(days=1),),
    )
    graph = LineageGraph(
        [
            node_spec("raw/readings", "DB.RAW.READINGS", {"SITE": "VARCHAR", "TAG": "VARCHAR", "QTY": "NUMBER(38,0)", "READ_ON": "DATE"}),
            node_spec("ref/units", "DB.REF.UNITS", {"SITE": "VARCHAR", "TAG": "VARCHAR"}),
            node_spec("raw/usage", "DB.RAW.USAGE", {"SUBSCRIBER_ID": "NUMBER(38,0)", "MB": "NUMBER(38,0)", "SESSION_DAY": "DATE"}),
            node_spec("ref/subscribers", "DB.REF.SUBSCRIBERS", {"SUBSCRIBER_ID": "NUMBER(38,0)", "PLAN_ID": "NUMBER(38,0)"}),
        ]
    )  # fmt: skip
    return DiagnosisContext(graph, metrics, _resolve, history, c)


@pytest.mark.parametrize(
    ("join_sql", "measure", "night", "deleted", "new", "first_seen", "reference"),
    [
        (METERS_JOIN, "QTY", METERS_NIGHT, "TAG=A-3", "TAG=A-7", date(2025, 10, 27), '"DB"."REF"."UNITS"'),
        (SUBSCRIBERS_JOIN, "MB", SUBSCRIBERS_NIGHT, "SUBSCRIBER_ID=1002", "SUBSCRIBER_ID=2900001",
         date(2025, 11, 4), '"DB"."REF"."SUBSCRIBERS"'),
    ],
    ids=["meters-two-columns", "subscribers-one-column"],
)  # fmt: skip
def test_a_key_is_deleted_only_if_it_was_there_before(
    ctx, join_sql, measure, night, deleted, new, first_seen, reference
):
    (join,) = parse_joins(join_sql, _resolve)
    effect = measure_join(ctx.cursor, "fact", join, measure, None)
    total = ctx.metrics.totals[0]
    origins = {o.key.label: o for o in key_origins(ctx, effect, join, effect.unmatched, night, total, total)}
    assert origins[deleted].reference_changed and "deleted from" in origins[deleted].story
    # First seen on the incident's first night: new tonight too, and missing from the reference, not deleted.
    fresh = origins[new]
    assert not fresh.reference_changed, fresh.story
    assert "deleted" not in fresh.story and f"is missing from {reference}" in fresh.story, fresh.story
    assert fresh.key.new_in_source_since == first_seen and first_seen.isoformat() in fresh.story
