"""Diagnosis on the e-commerce world (written only as files) of the faults its public scenarios do not
play: a sign flip that fails the fact's own node test, a unit change by a factor no list of units holds,
and copies of the product catalogue that fail the dimension's unique test."""

from __future__ import annotations

import pytest
from nights import ECOMMERCE, Nights, SignFlip

from dw_dagster.incidents.audit import QUERY_BUDGET
from dw_dagster.records.incidents import CauseClass, Finding

pytestmark = [pytest.mark.world, pytest.mark.timeout(600)]
PRODUCTS = '"DW_SHOP"."RAW_SHOP"."PRODUCTS"'


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    n = Nights(ECOMMERCE, tmp_path_factory.mktemp("ecommerce"))
    out = {}
    try:
        (out["sign"],) = n.play(SignFlip(table="ORDER_LINES", column="UNIT_PRICE", where={"STORE_ID": 5}))
        n.resolve()
        (out["unit"],) = n.play(
            {"kind": "unit_change", "table": "ORDER_LINES", "column": "UNIT_PRICE", "factor": 0.27,
             "where": {"STORE_ID": 1}}
        )  # fmt: skip
        n.resolve()
        # The catalogue's toys are replicated twice (a connector re-sync without its cursor).
        n.sql(f"INSERT INTO {PRODUCTS} SELECT * FROM {PRODUCTS} WHERE \"CATEGORY\" = 'toys'")
        (out["copies"],) = n.play()
        n.resolve()
        n.sql(f"CREATE OR REPLACE TABLE {PRODUCTS} AS SELECT DISTINCT * FROM {PRODUCTS}")
        # Someone points the app storefront at the web channel: revenue moves between channels, totals hold.
        remapped = {"kind": "reference_row_remapped", "table": "STORE_MAP", "where": {"STORE_ID": 2},
                    "set": {"CHANNEL": "web"}}  # fmt: skip
        n.play(remapped)
        day = n.world.business_date(n.night - 1)
        out["shift"] = n.diagnose(
            Finding(check_name="total_channel_revenue", asset_key="mart/mart_channel_revenue", business_date=day,
                    summary="channel_revenue moved between channels", cause_scope="job:sales_nightly")
        )  # fmt: skip
        yield n, out
    finally:
        n.close()


def test_a_sign_flip_that_fails_the_node_test_is_a_sign_change_named_by_its_key(nights):
    _, out = nights
    d = out["sign"].diagnosis
    assert d.classification is CauseClass.SIGN_CHANGE, d.cause
    assert out["sign"].labels == ["STORE_ID=5"]
    assert "NO_NEGATIVE_REVENUE" in d.cause, "the failed test is evidence, not the class"
    assert d.keys[0].factor == pytest.approx(-1, rel=0.05) and d.evidence["measure"] == "UNIT_PRICE"


def test_a_unit_change_by_any_factor_is_measured(nights):
    _, out = nights
    d = out["unit"].diagnosis
    assert d.classification is CauseClass.UNIT_CHANGE, d.cause
    assert out["unit"].labels == ["STORE_ID=1"]
    assert d.keys[0].factor == pytest.approx(0.27, rel=0.06)
    assert d.evidence["measure"] == "UNIT_PRICE", "the source column that moved, of the two revenue reads"


def test_copies_that_fail_a_unique_test_are_duplication_in_their_source(nights):
    _, out = nights
    d = out["copies"].diagnosis
    assert d.classification is CauseClass.DUPLICATION, d.cause
    assert "PRODUCT_ID: Unique" in d.cause
    assert d.evidence["duplicates_in"] == "raw_shop/products" and d.evidence["duplicate_rows"] > 10
    assert all(k.column == "PRODUCT_ID" for k in d.keys)
    assert "team:data-platform" in d.owners


def test_a_shift_between_groups_is_traced_to_the_reference_row_that_changed(nights):
    _, out = nights
    d = out["shift"]
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
    assert [k.label for k in d.keys] == ["STORE_ID=2"]
    assert "CHANNEL=web" in d.keys[0].change and "CHANNEL=app" in d.keys[0].change
    assert "STORE_MAP" in d.cause and "team:marketing-ops" in d.owners


def test_the_audit_trail(nights):
    _, out = nights
    for found in (o for o in out.values() if hasattr(o, "diagnosis")):
        queries = found.diagnosis.queries
        assert 0 < len(queries) <= QUERY_BUDGET
        assert all(q.ms is not None and q.rows is not None for q in queries if q.error is None)
    drill = [q for q in out["unit"].diagnosis.queries if "tonight against the last good night" in q.purpose]
    assert drill and "?" in drill[0].sql and drill[0].params, "values are bound, not spliced"
