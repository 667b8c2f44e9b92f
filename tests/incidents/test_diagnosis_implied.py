"""A reconciliation the pipeline implies is diagnosed as a declared one is: the joins between its sources (a
UNION's two inputs) and the total are measured, and the one whose dropped units explain the gap names its keys.
On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg
from diagnosis_db import diagnosis_db

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 9, 29)


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


def _spec(key: str, columns: list[str], lineage: dict[str, list[str]] | None = None, join: str | None = None):
    location, name = key.split("/")
    metadata: dict = {
        "dagster/table_name": f"DB.{location.upper()}.{name.upper()}",
        "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(c, "NUMBER(38,0)") for c in columns]),
    }
    deps = sorted({s.rsplit(".", 1)[0] for sources in (lineage or {}).values() for s in sources})
    if lineage:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(
            deps_by_column={
                c: [dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(s.rsplit(".", 1)[0]),
                                      column_name=s.rsplit(".", 1)[1]) for s in sources]
                for c, sources in lineage.items()
            }
        )  # fmt: skip
    if join:
        metadata.update({"coalesce/join": join, "coalesce/node_type": "Fact"})
    return dg.AssetSpec(key, deps=deps, metadata=metadata, kinds={"coalesce", "snowflake"} if join else None)


GRAPH = LineageGraph([
    _spec("raw/depot_scans", ["DEPOT", "ACCOUNT_ID", "KG"]),
    _spec("raw/partner_parcels", ["HUB", "ACCOUNT_ID", "WEIGHT_G"]),
    _spec("ref/accounts", ["ACCOUNT_ID"]),
    _spec("stage/stg_parcels", ["SITE", "ACCOUNT_ID", "KG"],
          {"SITE": ["raw/depot_scans.DEPOT", "raw/partner_parcels.HUB"],
           "ACCOUNT_ID": ["raw/depot_scans.ACCOUNT_ID", "raw/partner_parcels.ACCOUNT_ID"],
           "KG": ["raw/depot_scans.KG", "raw/partner_parcels.WEIGHT_G"]}),
    _spec("core/fct_parcels", ["SITE", "ACCOUNT_ID", "KG"],
          {"SITE": ["stage/stg_parcels.SITE"], "ACCOUNT_ID": ["stage/stg_parcels.ACCOUNT_ID"],
           "KG": ["stage/stg_parcels.KG"]},
          join="FROM {{ ref('STAGE', 'STG_PARCELS') }} \"S\"\n"
               "INNER JOIN {{ ref('REF', 'ACCOUNTS') }} \"A\" ON \"S\".\"ACCOUNT_ID\" = \"A\".\"ACCOUNT_ID\""),
])  # fmt: skip

METRICS = MetricsFile.model_validate(
    {
        "totals": [
            {"name": "scanned_kg", "owner": "o", "asset": "raw/depot_scans",
             "sql": "SELECT SUM(\"KG\") AS \"VALUE\" FROM {{ ref('RAW', 'DEPOT_SCANS') }}"},
            {"name": "partner_kg", "owner": "o", "asset": "raw/partner_parcels",
             "sql": "SELECT SUM(\"WEIGHT_G\" / 1000) AS \"VALUE\" FROM {{ ref('RAW', 'PARTNER_PARCELS') }}"},
            {"name": "parcel_kg", "owner": "o", "asset": "core/fct_parcels", "item_key": "ACCOUNT_ID",
             "sql": "SELECT SUM(\"KG\") AS \"VALUE\" FROM {{ ref('CORE', 'FCT_PARCELS') }}"},
        ]
    }
)  # fmt: skip


def test_an_implied_gap_is_traced_to_the_inner_join_that_drops_a_new_key():
    with diagnosis_db("RAW", "REF", "STAGE", "CORE") as conn:
        cur = conn.cursor()
        cur.execute(
            'CREATE TABLE "DB"."RAW"."DEPOT_SCANS" (DEPOT NUMBER(38,0), ACCOUNT_ID NUMBER(38,0), KG NUMBER(38,0))'
        )
        cur.execute('INSERT INTO "DB"."RAW"."DEPOT_SCANS" VALUES (1, 10, 500), (1, 11, 300), (2, 77, 70)')
        cur.execute(
            'CREATE TABLE "DB"."RAW"."PARTNER_PARCELS" (HUB NUMBER(38,0), ACCOUNT_ID NUMBER(38,0), WEIGHT_G NUMBER(38,0))'
        )
        cur.execute('INSERT INTO "DB"."RAW"."PARTNER_PARCELS" VALUES (9, 10, 130000)')
        cur.execute('CREATE TABLE "DB"."REF"."ACCOUNTS" (ACCOUNT_ID NUMBER(38,0))')
        cur.execute('INSERT INTO "DB"."REF"."ACCOUNTS" VALUES (10), (11)')  # account 77 is not loaded yet
        cur.execute(
            'CREATE TABLE "DB"."STAGE"."STG_PARCELS" (SITE NUMBER(38,0), ACCOUNT_ID NUMBER(38,0), KG NUMBER(38,0))'
        )
        cur.execute(
            'INSERT INTO "DB"."STAGE"."STG_PARCELS" VALUES (1, 10, 500), (1, 11, 300), (2, 77, 70), (9, 10, 130)'
        )
        cur.execute(
            'CREATE TABLE "DB"."CORE"."FCT_PARCELS" (SITE NUMBER(38,0), ACCOUNT_ID NUMBER(38,0), KG NUMBER(38,0))'
        )
        cur.execute('INSERT INTO "DB"."CORE"."FCT_PARCELS" VALUES (1, 10, 500), (1, 11, 300), (9, 10, 130)')
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-1", cause_key="k", status="open", title="parcel_kg short",
                            business_date=TONIGHT, severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        # The finding as checks/implied.py words it: the sources largest first, the gap in the total's units.
        finding = Finding(
            check_name="total_parcel_kg", asset_key="core/fct_parcels", business_date=TONIGHT,
            summary="parcel_kg is 93.0% of partner_kg + scanned_kg tonight", cause_scope="job",
            evidence={"total": "parcel_kg", "reconciliation": {
                "inferred": True, "source": "scanned_kg", "sources": ["scanned_kg", "partner_kg"], "passed": False,
                "gap_change": 70.0, "tolerance": 10.0, "groups": [],
                "source_change_pct": 0.4, "target_change_pct": -6.6}},
        )  # fmt: skip
        ctx = DiagnosisContext(GRAPH, METRICS, _resolve, HistorySession(conn, OpsSchema("DB")), conn.cursor())
        d = diagnose(incident, [finding], ctx)
    assert d.classification is CauseClass.VALUE_LOSS, (d.cause, d.notes)
    assert [k.label for k in d.keys] == ["ACCOUNT_ID=77"] and d.keys[0].units == 70
    assert d.cause_asset == "core/fct_parcels" and d.joins[0].join_type == "INNER"
    # The path runs from both inputs of the union.
    assert {"raw/depot_scans", "raw/partner_parcels"} <= set(d.path)
