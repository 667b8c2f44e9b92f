"""A join whose ON clause also relates the two sides by a range (a type-2 dimension's validity, an FX rate's
validity period) is measured under its whole condition: a left row with no version valid on its date matches
nothing, and its key is named, though other versions of the key are on the right. On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.keys import rows_series
from dw_dagster.checks.metrics import RecordedTotal, load_metrics_file
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.joins import measure_join, parse_joins, unmatched_rows_query
from dw_dagster.incidents.value_loss import diagnose_fall
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

METRICS = Path(__file__).resolve().parent / "worlds" / "meters" / "metrics.yaml"
TONIGHT = date(2025, 10, 28)

# Calls rated by the version of the caller's tariff valid on the call's day: the range reads the FROM table,
# the key the table joined before it.
TARIFF_JOIN = """FROM {{ ref('RAW', 'CALLS') }} "CALLS"
INNER JOIN {{ ref('CORE', 'LINES') }} "LINES" ON "CALLS"."LINE_ID" = "LINES"."LINE_ID"
INNER JOIN {{ ref('CORE', 'TARIFF_VERSIONS') }} "TV"
  ON "LINES"."TARIFF_ID" = "TV"."TARIFF_ID"
  AND "CALLS"."CALL_DAY" >= "TV"."VALID_FROM" AND "CALLS"."CALL_DAY" < "TV"."VALID_TO\""""

# Invoices converted at the rate valid on the invoice day: the range reads the left table itself.
FX_JOIN = """FROM {{ ref('RAW', 'INVOICES') }} inv
JOIN {{ ref('REF', 'FX_RATES') }} fx
  ON inv.CURRENCY = fx.CURRENCY AND inv.INVOICE_DAY BETWEEN fx.RATE_FROM AND fx.RATE_TO"""


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


@pytest.fixture(scope="module")
def conn():
    with diagnosis_db("RAW", "CORE", "REF", "MART") as conn:
        c = conn.cursor()
        c.execute('CREATE TABLE "DB"."RAW"."CALLS" (CALL_ID NUMBER(38,0), LINE_ID NUMBER(38,0), CALL_DAY DATE, SECONDS NUMBER(38,0))')  # fmt: skip
        c.execute(
            'INSERT INTO "DB"."RAW"."CALLS" VALUES (1, 10, \'2025-10-28\', 60), (2, 10, \'2025-10-28\', 30),'
            " (3, 20, '2025-10-28', 90), (4, 30, '2025-10-28', 45), (5, 20, '2025-10-01', 15)"
        )
        c.execute('CREATE TABLE "DB"."CORE"."LINES" (LINE_ID NUMBER(38,0), TARIFF_ID NUMBER(38,0))')
        c.execute('INSERT INTO "DB"."CORE"."LINES" VALUES (10, 1), (20, 2), (30, 2)')
        c.execute(
            'CREATE TABLE "DB"."CORE"."TARIFF_VERSIONS" (TARIFF_VERSION_ID NUMBER(38,0), TARIFF_ID NUMBER(38,0),'
            " EUR_PER_MIN NUMBER(8,4), VALID_FROM DATE, VALID_TO DATE)"
        )
        # Tariff 2's current version (valid since 15 October) was deleted tonight: its closed one is left.
        c.execute(
            'INSERT INTO "DB"."CORE"."TARIFF_VERSIONS" VALUES (101, 1, 0.10, \'2025-01-01\', \'9999-12-31\'),'
            " (201, 2, 0.20, '2025-01-01', '2025-10-15')"
        )
        c.execute('CREATE TABLE "DB"."RAW"."INVOICES" (INVOICE_ID NUMBER(38,0), CURRENCY VARCHAR, INVOICE_DAY DATE, AMOUNT NUMBER(18,2))')  # fmt: skip
        c.execute(
            "INSERT INTO \"DB\".\"RAW\".\"INVOICES\" VALUES (1, 'USD', '2025-10-28', 100), (2, 'BRL', '2025-10-28', 400),"
            " (3, 'BRL', '2025-09-10', 50), (4, 'USD', '2025-09-10', 10)"
        )
        c.execute(
            'CREATE TABLE "DB"."REF"."FX_RATES" (RATE_ID NUMBER(38,0), CURRENCY VARCHAR, RATE_FROM DATE,'
            " RATE_TO DATE, RATE NUMBER(18,6))"
        )
        # BRL's rate for October (RATE_ID 4) went; September's is still there.
        c.execute(
            "INSERT INTO \"DB\".\"REF\".\"FX_RATES\" VALUES (1, 'USD', '2025-09-01', '2025-09-30', 0.9),"
            " (2, 'USD', '2025-10-01', '2025-10-31', 0.92), (3, 'BRL', '2025-09-01', '2025-09-30', 0.17)"
        )
        yield conn


def test_the_range_conditions_of_a_join_are_kept_with_the_rows_that_reach_it():
    _, tariff = parse_joins(TARIFF_JOIN, _resolve)
    assert tariff.on == [("TARIFF_ID", "TARIFF_ID")] and tariff.left_table == '"DB"."CORE"."LINES"'
    assert [r.shown for r in tariff.relations] == [
        '"CALLS"."CALL_DAY" >= "TV"."VALID_FROM"',
        '"CALLS"."CALL_DAY" < "TV"."VALID_TO"',
    ]
    # The call's day is read from the calls the tariff join receives, not from the lines.
    assert tariff.left_from() == (
        '(SELECT "LINES".*, "CALLS"."CALL_DAY" AS "CALLS.CALL_DAY" FROM "DB"."RAW"."CALLS" AS "CALLS"'
        ' INNER JOIN "DB"."CORE"."LINES" AS "LINES" ON "CALLS"."LINE_ID" = "LINES"."LINE_ID")'
    )
    (fx,) = parse_joins(FX_JOIN, _resolve)
    assert fx.on == [("CURRENCY", "CURRENCY")] and fx.left_from("AMOUNT") == '"DB"."RAW"."INVOICES"'
    assert [r.sql for r in fx.relations] == ['L."INVOICE_DAY" BETWEEN R."RATE_FROM" AND R."RATE_TO"']


@pytest.mark.parametrize(
    ("join_text", "measure", "label", "rows", "units"),
    [
        (TARIFF_JOIN, None, "TARIFF_ID=2", 2, 2.0),  # the lines carry no measure: the calls are counted
        (FX_JOIN, "AMOUNT", "CURRENCY=BRL", 1, 400.0),
    ],
)
def test_a_key_with_no_valid_version_matches_nothing_under_the_whole_condition(
    conn, join_text, measure, label, rows, units
):
    join = parse_joins(join_text, _resolve)[-1]
    effect = measure_join(conn.cursor(), "mart/fct", join, measure, None)
    (gap,) = effect.unmatched
    assert (gap.label, gap.rows, gap.units) == (label, rows, units)
    # Its other versions are on the right: the range excludes them, and the node's own text says which.
    assert "excluded by the join's condition" in gap.change and join.relations[0].shown in gap.change
    # Versions that do not overlap are no fan-out.
    assert effect.duplicated_rows == 0 and join.relations[-1].shown in effect.on
    # The query a person runs reads the same rows.
    cur = conn.cursor()
    cur.execute(unmatched_rows_query(join, measure))
    assert [(str(r[0]), r[1]) for r in cur.fetchall()] == [(label.split("=")[1], rows)]


def _diagnosed(
    conn, graph: LineageGraph, name: str, asset: str, table: str, fall: float, keyed: str, went: str
):
    """The fall of ``name`` diagnosed through the joins, ``keyed``'s rows having lost ``went`` tonight (its
    recorded keys, as the volume check records a small keyed table's)."""
    history = HistorySession(conn, OpsSchema("DB"))
    before = {"KEEP=1": 1.0, went: 1.0}
    history.record_metric(rows_series(keyed), TONIGHT - timedelta(days=1), 2.0, before, None, None)
    history.record_metric(rows_series(keyed), TONIGHT, 1.0, {"KEEP=1": 1.0}, None, None)
    total = RecordedTotal(
        name=name, owner="finance", asset=asset, sql=f'SELECT SUM("{name.upper()}") AS "VALUE" FROM {table}'
    )
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", title=f"{name} fell",
                        business_date=TONIGHT, severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name=f"total_{name}", asset_key=asset, business_date=TONIGHT,
                      summary=f"{name} fell", cause_scope="job")  # fmt: skip
    ctx = DiagnosisContext(graph, load_metrics_file(METRICS), _resolve, history, conn.cursor())
    return diagnose_fall(incident, finding, total, ctx, fall, {"total": name})


def test_a_fall_through_a_range_join_names_the_version_that_went_and_the_key_left_without_one(conn):
    graph = LineageGraph(
        [
            node_spec("raw/calls", "DB.RAW.CALLS", {"CALL_ID": "NUMBER(38,0)", "LINE_ID": "NUMBER(38,0)", "CALL_DAY": "DATE", "SECONDS": "NUMBER(38,0)"}),
            node_spec("core/lines", "DB.CORE.LINES", {"LINE_ID": "NUMBER(38,0)", "TARIFF_ID": "NUMBER(38,0)"}),
            node_spec("core/tariff_versions", "DB.CORE.TARIFF_VERSIONS", {"TARIFF_VERSION_ID": "NUMBER(38,0)", "TARIFF_ID": "NUMBER(38,0)", "EUR_PER_MIN": "NUMBER(8,4)", "VALID_FROM": "DATE", "VALID_TO": "DATE"}),
            node_spec("mart/fct_calls", "DB.MART.FCT_CALLS", {"CALL_ID": "NUMBER(38,0)", "TARIFF_ID": "NUMBER(38,0)", "CHARGE_EUR": "NUMBER(18,4)"},
                      {"CALL_ID": [("raw/calls", "CALL_ID")], "TARIFF_ID": [("core/lines", "TARIFF_ID")],
                       "CHARGE_EUR": [("raw/calls", "SECONDS"), ("core/tariff_versions", "EUR_PER_MIN")]},
                      TARIFF_JOIN),
        ]
    )  # fmt: skip
    table = "{{ ref('MART', 'FCT_CALLS') }}"
    d = _diagnosed(conn, graph, "charge_eur", "mart/fct_calls", table, 135.0, "core/tariff_versions", "TARIFF_VERSION_ID=202")  # fmt: skip
    assert d is not None
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
    assert [k.label for k in d.keys] == ["TARIFF_VERSION_ID=202", "TARIFF_ID=2"]
    assert d.keys[0].rows == d.keys[1].rows == 2 and "TARIFF_ID=2 has no row" in d.cause
    # The units are the calls' seconds, read where the calls reach the join, not a count of lines.
    assert d.keys[0].units == d.keys[1].units == 135.0
    assert "excluded by the join's condition" in d.keys[1].change
    assert d.joins[0].right == '"DB"."CORE"."TARIFF_VERSIONS"'


def test_a_fall_through_a_between_join_names_the_rate_that_went(conn):
    graph = LineageGraph(
        [
            node_spec("raw/invoices", "DB.RAW.INVOICES", {"INVOICE_ID": "NUMBER(38,0)", "CURRENCY": "VARCHAR", "INVOICE_DAY": "DATE", "AMOUNT": "NUMBER(18,2)"}),
            node_spec("ref/fx_rates", "DB.REF.FX_RATES", {"RATE_ID": "NUMBER(38,0)", "CURRENCY": "VARCHAR", "RATE_FROM": "DATE", "RATE_TO": "DATE", "RATE": "NUMBER(18,6)"}),
            node_spec("mart/fct_invoices", "DB.MART.FCT_INVOICES", {"INVOICE_ID": "NUMBER(38,0)", "CURRENCY": "VARCHAR", "AMOUNT_EUR": "NUMBER(18,2)"},
                      {"INVOICE_ID": [("raw/invoices", "INVOICE_ID")], "CURRENCY": [("raw/invoices", "CURRENCY")],
                       "AMOUNT_EUR": [("raw/invoices", "AMOUNT"), ("ref/fx_rates", "RATE")]},
                      FX_JOIN),
        ]
    )  # fmt: skip
    table = "{{ ref('MART', 'FCT_INVOICES') }}"
    d = _diagnosed(conn, graph, "amount_eur", "mart/fct_invoices", table, 400.0, "ref/fx_rates", "RATE_ID=4")
    assert d is not None
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
    assert [k.label for k in d.keys] == ["RATE_ID=4", "CURRENCY=BRL"]
    assert d.keys[0].units == 400.0 and d.cause.startswith("mart/fct_invoices inner-joins")
