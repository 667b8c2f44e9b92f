"""The share of its sources' rows a total kept is read against the recorded totals its measure is built from,
the implied reconciliation's own answer (``checks.implied.built_from``): through column lineage, not every
total on a Source table the measure reads. A second total of another column of the same Source table is not a
source (its rows counted twice halved the share). Two shapes: meter readings through a lookup join into a fact;
parcels weighed by two feeds in a UNION into a fact priced at the accounts' rates."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession, group_rows_series
from dw_dagster.checks.implied import built_from
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import _kept_share
from dw_dagster.incidents.evidence import DiagnosisContext, measure_columns
from dw_dagster.warehouse.ops import OpsSchema

DAY = date(2026, 9, 29)
JOIN = "FROM {{ ref('RAW', 'X') }} \"X\""  # a built node's join text (read by nothing here)

METERS = LineageGraph([
    node_spec("raw/readings", "DB.RAW.READINGS", {"METER_ID": "VARCHAR", "KWH": "NUMBER", "KW": "NUMBER"}),
    node_spec("ref/meters", "DB.REF.METERS", {"METER_ID": "VARCHAR", "REGION": "VARCHAR"}),
    node_spec("core/fct_consumption", "DB.CORE.FCT_CONSUMPTION",
              {"METER_ID": "VARCHAR", "REGION": "VARCHAR", "KWH": "NUMBER"},
              {"METER_ID": [("raw/readings", "METER_ID")], "REGION": [("ref/meters", "REGION")],
               "KWH": [("raw/readings", "KWH")]}, JOIN),
])  # fmt: skip

PARCELS = LineageGraph([
    node_spec("raw/depot_scans", "DB.RAW.DEPOT_SCANS", {"DEPOT": "VARCHAR", "ACCOUNT_ID": "NUMBER", "KG": "NUMBER",
                                                        "PIECES": "NUMBER"}),
    node_spec("raw/partner_parcels", "DB.RAW.PARTNER_PARCELS", {"HUB": "VARCHAR", "ACCOUNT_ID": "NUMBER",
                                                                "WEIGHT_G": "NUMBER"}),
    node_spec("ref/accounts", "DB.REF.ACCOUNTS", {"ACCOUNT_ID": "NUMBER", "RATE": "NUMBER"}),
    node_spec("stage/stg_parcels", "DB.STAGE.STG_PARCELS", {"SITE": "VARCHAR", "ACCOUNT_ID": "NUMBER", "KG": "NUMBER"},
              {"SITE": [("raw/depot_scans", "DEPOT"), ("raw/partner_parcels", "HUB")],
               "ACCOUNT_ID": [("raw/depot_scans", "ACCOUNT_ID"), ("raw/partner_parcels", "ACCOUNT_ID")],
               "KG": [("raw/depot_scans", "KG"), ("raw/partner_parcels", "WEIGHT_G")]}, JOIN),
    node_spec("core/fct_parcels", "DB.CORE.FCT_PARCELS", {"SITE": "VARCHAR", "KG": "NUMBER", "CHARGE": "NUMBER"},
              {"SITE": [("stage/stg_parcels", "SITE")], "KG": [("stage/stg_parcels", "KG")],
               "CHARGE": [("stage/stg_parcels", "KG"), ("ref/accounts", "RATE")]}, JOIN),
])  # fmt: skip


def _total(name: str, asset: str, value: str, key: str) -> dict:
    schema, table = asset.upper().split("/")
    return {
        "name": name,
        "owner": "o",
        "asset": asset,
        "sql": f'SELECT "{key}", {value} AS "VALUE", COUNT(*) AS "ROWS" FROM {{{{ ref(\'{schema}\', '
        f"'{table}') }}}} GROUP BY 1",
        "group_keys": [key],
        "hurts": "down",
        "baseline": {"weeks": 6, "min_relative_change": 0.2},
    }


# shape: (graph, totals, the fact's total, its sources' totals, a second total of a source's other column)
SHAPES = {
    "meters": (
        METERS,
        [
            _total("metered_kwh", "raw/readings", 'SUM("KWH")', "METER_ID"),
            _total("peak_kw", "raw/readings", 'SUM("KW")', "METER_ID"),
            _total("billed_kwh", "core/fct_consumption", 'SUM("KWH")', "REGION"),
        ],
        "billed_kwh",
        ["metered_kwh"],
    ),
    "parcels": (
        PARCELS,
        [
            _total("scanned_kg", "raw/depot_scans", 'SUM("KG")', "DEPOT"),
            _total("pieces", "raw/depot_scans", 'SUM("PIECES")', "DEPOT"),
            _total("partner_kg", "raw/partner_parcels", 'SUM("WEIGHT_G" / 1000)', "HUB"),
            _total("accounts", "ref/accounts", 'SUM("RATE")', "ACCOUNT_ID"),
            _total("parcel_kg", "core/fct_parcels", 'SUM("KG")', "SITE"),
            _total("charged", "core/fct_parcels", 'SUM("CHARGE")', "SITE"),
        ],
        "parcel_kg",
        ["partner_kg", "scanned_kg"],
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_total_is_built_from_its_measure_s_sources_not_every_total_on_their_tables(shape):
    graph, totals, target, sources, = SHAPES[shape]  # fmt: skip
    metrics = MetricsFile.model_validate({"calendar": {"holidays": []}, "totals": totals})
    measures = {t.name: measure_columns(t) for t in metrics.totals}
    assert built_from(graph, metrics.get(target), metrics.totals, measures) == tuple(sources)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_kept_share_counts_each_source_s_rows_once(shape):
    """The fact keeps all its sources' rows on the good nights and 90% tonight: the share is 0.9 of 1.0 (a
    second total on a source's table counted its rows again: 0.45 of 0.5 on the readings)."""
    graph, totals, target, sources = SHAPES[shape]
    metrics = MetricsFile.model_validate({"calendar": {"holidays": []}, "totals": totals})
    nights = [DAY - timedelta(days=k) for k in range(10, 0, -1)]
    rows, at = [], datetime(2026, 9, 1, tzinfo=UTC)
    for i, d in enumerate([*nights, DAY]):
        per_table = {"raw/readings": 400.0 + 40 * (i % 4), "raw/depot_scans": 300.0 + 30 * (i % 3),
                     "raw/partner_parcels": 200.0 + 25 * (i % 5), "ref/accounts": 50.0}  # fmt: skip
        for t in metrics.totals:
            if t.asset in per_table:
                rows.append((group_rows_series(t.name), d, per_table[t.asset], "{}", at))
        delivered = sum(per_table[metrics.get(s).asset] for s in sources)
        rows.append((group_rows_series(target), d, delivered * (0.9 if d == DAY else 1.0), "{}", at))
    with diagnosis_db() as conn:
        cur = conn.cursor()
        cur.executemany(
            'INSERT INTO "DB"."DW_OPS"."METRIC_HISTORY" (METRIC, BUSINESS_DATE, VALUE, GROUPS, RECORDED_AT)'
            " VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        ctx = DiagnosisContext(graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                               HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip
        assert _kept_share(ctx, metrics.get(target), DAY, nights) == (0.9, 1.0)
