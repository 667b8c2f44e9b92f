"""Small keyed tables: the key a table is known by, and how a change of its rows is named."""

from __future__ import annotations

import dagster as dg

from dw_dagster.checks.keys import KeyChange, key_label, new_key_candidates, unique_column


def _spec(**constraints) -> dg.AssetSpec:
    columns = [
        dg.TableColumn(name="NAME", type="VARCHAR"),
        dg.TableColumn(name="STORE_ID", type="NUMBER", constraints=dg.TableColumnConstraints(**constraints)),
    ]
    return dg.AssetSpec(
        key="sales/dim_store", metadata={"dagster/column_schema": dg.TableSchema(columns=columns)}
    )


def test_the_key_is_the_column_declared_unique():
    assert unique_column(_spec(unique=True)) == "STORE_ID"
    assert unique_column(_spec(unique=False)) is None
    assert unique_column(dg.AssetSpec(key="x")) is None


def test_a_change_is_named_by_its_keys():
    assert key_label("STORE_ID", 7.0) == "STORE_ID=7"
    change = KeyChange(column="STORE_ID", appeared={"STORE_ID=7": 7}, went=["STORE_ID=2"])
    assert change.describe() == "1 row appeared: STORE_ID=7; 1 row went: STORE_ID=2"
    many = KeyChange(column="SKU", appeared={f"SKU={k}": k for k in range(8)})
    assert many.describe() == "8 rows appeared: SKU=0, SKU=1, SKU=2, SKU=3, SKU=4 and 3 more"
    assert KeyChange(column="SKU").describe() == ""


def test_only_upstream_tables_keyed_on_a_column_the_table_has_explain_it():
    changes = {
        "sales/dim_store": KeyChange(column="STORE_ID", appeared={"STORE_ID=7": 7}),
        "sales/dim_product": KeyChange(column="PRODUCT_ID", appeared={"PRODUCT_ID=1": 1}),
        "sales/dim_region": KeyChange(column="REGION_ID"),
    }
    found = new_key_candidates(
        ["sales/dim_product", "sales/dim_region", "sales/dim_store"], changes, ["STORE_ID", "REGION_ID"]
    )
    assert [a for a, _ in found] == ["sales/dim_store"]
