"""A total above its sources is not a loss: rows a join drops make a total fall short of its sources, never
exceed them. A reconciliation whose gap fell below its usual (the target over-counted) is looked for as copies
in every table the total is built through, a lookup or a bridge loaded twice included, and the copies are named
by the key the table is joined on. A standing unmatched key on the path (dropped every night) must not be
named instead. Two shapes: parcels through an account lookup (inner join), commissions through a store-to-rep
split bridge (left join with a default). On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 10, 27)
N = "NUMBER(38,0)"


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


PARCELS = {
    "schemas": ("RAW", "REF", "CORE"),
    "graph": [
        node_spec("raw/scans", "DB.RAW.SCANS", {"ACCOUNT_ID": N, "KG": N}),
        node_spec("ref/accounts", "DB.REF.ACCOUNTS", {"ACCOUNT_ID": N, "TIER": "VARCHAR"}),
        node_spec(
            "core/fct_parcels",
            "DB.CORE.FCT_PARCELS",
            {"ACCOUNT_ID": N, "TIER": "VARCHAR", "KG": N},
            {
                "ACCOUNT_ID": [("raw/scans", "ACCOUNT_ID")],
                "TIER": [("ref/accounts", "TIER")],
                "KG": [("raw/scans", "KG")],
            },
            "FROM {{ ref('RAW', 'SCANS') }} \"S\"\n"
            'INNER JOIN {{ ref(\'REF\', \'ACCOUNTS\') }} "A" ON "S"."ACCOUNT_ID" = "A"."ACCOUNT_ID"',
        ),
    ],  # fmt: skip
    "tables": [
        'CREATE TABLE "DB"."RAW"."SCANS" (ACCOUNT_ID NUMBER(38,0), KG NUMBER(38,0))',
        # Account 77 was never loaded into the lookup: its 70 kg are dropped on every night, by design.
        'INSERT INTO "DB"."RAW"."SCANS" VALUES (10, 400), (10, 230), (11, 300), (77, 70)',
        'CREATE TABLE "DB"."REF"."ACCOUNTS" (ACCOUNT_ID NUMBER(38,0), TIER VARCHAR)',
        # Tonight account 10's row was loaded twice.
        "INSERT INTO \"DB\".\"REF\".\"ACCOUNTS\" VALUES (10, 'GOLD'), (10, 'GOLD'), (11, 'SILVER')",
        'CREATE TABLE "DB"."CORE"."FCT_PARCELS" AS SELECT S.ACCOUNT_ID, A.TIER, S.KG FROM "DB"."RAW"."SCANS" S'
        ' JOIN "DB"."REF"."ACCOUNTS" A ON S.ACCOUNT_ID = A.ACCOUNT_ID',
    ],
    "metrics": {
        "totals": [
            {
                "name": "scanned_kg",
                "owner": "o",
                "asset": "raw/scans",
                "sql": "SELECT SUM(\"KG\") AS \"VALUE\" FROM {{ ref('RAW', 'SCANS') }}",
            },
            {
                "name": "parcel_kg",
                "owner": "o",
                "asset": "core/fct_parcels",
                "group_keys": ["TIER"],
                "reconcile_with": {"total": "scanned_kg"},
                "sql": 'SELECT "TIER", SUM("KG") AS "VALUE" FROM {{ ref(\'CORE\', \'FCT_PARCELS\') }} GROUP BY 1',
            },
        ]
    },  # fmt: skip
    "total": ("parcel_kg", "core/fct_parcels", "scanned_kg"),
    "values": (930.0, 1560.0),  # the last good nights, tonight: account 10's 630 kg counted twice
    "expect": ("ref/accounts", "ACCOUNT_ID=10"),
}

COMMISSIONS = {
    "schemas": ("POS", "CRM", "MART"),
    "graph": [
        node_spec("pos/sales", "DB.POS.SALES", {"STORE_ID": N, "AMOUNT": N}),
        node_spec(
            "crm/rep_split", "DB.CRM.REP_SPLIT", {"STORE_ID": N, "REP_ID": "VARCHAR", "SPLIT": "FLOAT"}
        ),
        node_spec(
            "mart/fct_commission",
            "DB.MART.FCT_COMMISSION",
            {"STORE_ID": N, "REP_ID": "VARCHAR", "CREDITED": "FLOAT"},
            {
                "STORE_ID": [("pos/sales", "STORE_ID")],
                "REP_ID": [("crm/rep_split", "REP_ID")],
                "CREDITED": [("pos/sales", "AMOUNT"), ("crm/rep_split", "SPLIT")],
            },
            "FROM {{ ref('POS', 'SALES') }} \"SALES\"\n"
            'LEFT JOIN {{ ref(\'CRM\', \'REP_SPLIT\') }} "RS" ON "SALES"."STORE_ID" = "RS"."STORE_ID"',
        ),
    ],  # fmt: skip
    "tables": [
        'CREATE TABLE "DB"."POS"."SALES" (STORE_ID NUMBER(38,0), AMOUNT NUMBER(38,0))',
        # Store 9 is a house store with no rep: its sales are credited whole (COALESCE(SPLIT, 1)) every night.
        'INSERT INTO "DB"."POS"."SALES" VALUES (5, 1000), (6, 500), (9, 200)',
        'CREATE TABLE "DB"."CRM"."REP_SPLIT" (STORE_ID NUMBER(38,0), REP_ID VARCHAR, SPLIT FLOAT)',
        # Tonight store 5's two rows were exported twice.
        "INSERT INTO \"DB\".\"CRM\".\"REP_SPLIT\" VALUES (5, 'R1', 0.6), (5, 'R2', 0.4), (5, 'R1', 0.6),"
        " (5, 'R2', 0.4), (6, 'R3', 1.0)",
        'CREATE TABLE "DB"."MART"."FCT_COMMISSION" AS SELECT S.STORE_ID, COALESCE(R.REP_ID, \'HOUSE\') AS REP_ID,'
        ' S.AMOUNT * COALESCE(R.SPLIT, 1) AS CREDITED FROM "DB"."POS"."SALES" S'
        ' LEFT JOIN "DB"."CRM"."REP_SPLIT" R ON S.STORE_ID = R.STORE_ID',
    ],
    "metrics": {
        "totals": [
            {
                "name": "sales",
                "owner": "o",
                "asset": "pos/sales",
                "sql": "SELECT SUM(\"AMOUNT\") AS \"VALUE\" FROM {{ ref('POS', 'SALES') }}",
            },
            {
                "name": "credited",
                "owner": "o",
                "asset": "mart/fct_commission",
                "group_keys": ["REP_ID"],
                "reconcile_with": {"total": "sales"},
                "sql": 'SELECT "REP_ID", SUM("CREDITED") AS "VALUE" FROM {{ ref(\'MART\', \'FCT_COMMISSION\') }} GROUP BY 1',
            },
        ]
    },  # fmt: skip
    "total": ("credited", "mart/fct_commission", "sales"),
    "values": (1700.0, 2700.0),  # store 5's 1,000 credited twice
    "expect": ("crm/rep_split", "STORE_ID=5"),
}


@pytest.mark.parametrize("shape", [PARCELS, COMMISSIONS], ids=["parcels", "commissions"])
def test_a_total_above_its_sources_is_copies_in_a_table_it_is_built_through_not_a_loss(shape):
    name, asset, source = shape["total"]
    good, tonight = shape["values"]
    with diagnosis_db(*shape["schemas"]) as conn:
        cur = conn.cursor()
        for sql in shape["tables"]:
            cur.execute(sql)
        history = HistorySession(conn, OpsSchema("DB"))
        for days in range(3, 0, -1):
            history.record_metric(name, TONIGHT - timedelta(days=days), good, {}, None, None)
        history.record_metric(name, TONIGHT, tonight, {}, None, None)
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-1", cause_key="k", status="open", title=f"{name} above {source}",
                            business_date=TONIGHT, severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        # The reconciliation's gap (source minus target) fell below its usual by the units counted twice.
        surplus = good - tonight
        finding = Finding(
            check_name=f"total_{name}", asset_key=asset, business_date=TONIGHT, cause_scope="job",
            summary=f"{name} no longer reconciles with {source}",
            evidence={"total": name, "reconciliation": {
                "source": source, "passed": False, "gap_change": surplus, "tolerance": 1.0, "groups": [],
                "source_change_pct": 0.0, "target_change_pct": 100 * (tonight / good - 1)}},
        )  # fmt: skip
        graph = LineageGraph(shape["graph"])
        metrics = MetricsFile.model_validate(shape["metrics"])
        ctx = DiagnosisContext(graph, metrics, _resolve, history, conn.cursor())
        d = diagnose(incident, [finding], ctx)
    table, key = shape["expect"]
    assert d.classification is CauseClass.DUPLICATION, (d.classification, d.cause, d.notes)
    assert d.evidence["duplicates_in"] == table and d.cause_asset == table
    assert [k.label for k in d.keys] == [key], d.keys
    assert any("above its sources" in n for n in d.notes), d.notes
