"""Small keyed tables: the key a table is known by, how a change of its rows is named, and which column of a
table downstream holds a small table's key, whatever it is called there: followed down the column lineage
and across the joins that equate it with another column. Two pipelines where the key is renamed: ad
delivery whose fact carries the campaign by the export's own name (joined on it), and shop orders whose
mart carries the store from the dimension's side, renamed twice over two joins."""

from __future__ import annotations

import dagster as dg

from dw_dagster.checks.keys import KeyChange, key_columns, key_label, new_key_candidates, unique_column
from dw_dagster.context.lineage import LineageGraph


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


def _node(key: str, columns: dict[str, list[str]], join: str | None = None) -> dg.AssetSpec:
    """A Coalesce node: each column with the ``asset.COLUMN`` it is built from; its table is named as its
    key's last part, upper-cased, which is what its readers' refs name it by."""
    lineage = {
        c: [dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(s.rsplit(".", 1)[0]), column_name=s.rsplit(".", 1)[1]) for s in sources]
        for c, sources in columns.items()
        if sources
    }  # fmt: skip
    metadata: dict = {
        "dagster/table_name": f"DB.{key.split('/')[0].upper()}.{key.split('/')[1].upper()}",
        "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(c, "NUMBER") for c in columns]),
    }
    if lineage:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(deps_by_column=lineage)
    if join:
        metadata["coalesce/join"] = join
    deps = sorted({s.rsplit(".", 1)[0] for sources in columns.values() for s in sources})
    return dg.AssetSpec(key, deps=deps, metadata=metadata)


# The export names the campaign SRC_CAMPAIGN_ID; the fact joins on it and carries it as CAMPAIGN_KEY, next to
# a label built from the key and the name (not the key).
ADS = LineageGraph([
    _node("trading/campaigns", {"CAMPAIGN_ID": [], "NAME": []}),
    _node("delivery/dim_campaign", {"CAMPAIGN_ID": ["trading/campaigns.CAMPAIGN_ID"], "NAME": ["trading/campaigns.NAME"]},
          """FROM {{ ref('TRADING', 'CAMPAIGNS') }} "CAMPAIGNS\""""),
    _node("adserver/delivery", {"SRC_CAMPAIGN_ID": [], "SPEND": []}),
    _node("stage/stg_delivery", {"SRC_CAMPAIGN_ID": ["adserver/delivery.SRC_CAMPAIGN_ID"], "SPEND": ["adserver/delivery.SPEND"]},
          """FROM {{ ref('ADSERVER', 'DELIVERY') }} "DELIVERY\""""),
    _node("delivery/fct_delivery",
          {"CAMPAIGN_KEY": ["stage/stg_delivery.SRC_CAMPAIGN_ID"], "CAMPAIGN_NAME": ["delivery/dim_campaign.NAME"],
           "CAMPAIGN_LABEL": ["stage/stg_delivery.SRC_CAMPAIGN_ID", "delivery/dim_campaign.NAME"],
           "SPEND": ["stage/stg_delivery.SPEND"]},
          """FROM {{ ref('STAGE', 'STG_DELIVERY') }} "STG_DELIVERY"
INNER JOIN {{ ref('DELIVERY', 'DIM_CAMPAIGN') }} "DIM_CAMPAIGN"
  ON "STG_DELIVERY"."SRC_CAMPAIGN_ID" = "DIM_CAMPAIGN"."CAMPAIGN_ID\""""),
])  # fmt: skip

# Orders name the store OUTLET_ID, which the fact keeps; it also takes the dimension's STORE_ID as STORE_KEY,
# and the mart, joined to products, carries that on as SELLER_ID. The orders' own PRODUCT_ID joins elsewhere and is no store.
SHOP = LineageGraph([
    _node("sales/dim_store", {"STORE_ID": [], "REGION": []}),
    _node("sales/dim_product", {"PRODUCT_ID": [], "CATEGORY": []}),
    _node("raw/orders", {"ORDER_ID": [], "OUTLET_ID": [], "PRODUCT_ID": []}),
    _node("sales/fct_orders",
          {"ORDER_ID": ["raw/orders.ORDER_ID"], "STORE_KEY": ["sales/dim_store.STORE_ID"],
           "OUTLET_ID": ["raw/orders.OUTLET_ID"], "PRODUCT_ID": ["raw/orders.PRODUCT_ID"], "REGION": ["sales/dim_store.REGION"]},
          """FROM {{ ref('RAW', 'ORDERS') }} "O"
LEFT JOIN {{ ref('SALES', 'DIM_STORE') }} "S" ON "S"."STORE_ID" = "O"."OUTLET_ID\""""),
    _node("mart/order_lines",
          {"ORDER_ID": ["sales/fct_orders.ORDER_ID"], "SELLER_ID": ["sales/fct_orders.STORE_KEY"],
           "CATEGORY": ["sales/dim_product.CATEGORY"]},
          """FROM {{ ref('SALES', 'FCT_ORDERS') }} "F"
INNER JOIN {{ ref('SALES', 'DIM_PRODUCT') }} "P" ON "F"."PRODUCT_ID" = "P"."PRODUCT_ID\""""),
])  # fmt: skip


def test_a_key_renamed_across_a_join_is_followed_to_the_column_that_holds_it():
    # Joined on the export's own column: the fact's copy of that column holds the key.
    assert key_columns(ADS, "delivery/dim_campaign", "CAMPAIGN_ID", "delivery/fct_delivery") == [
        "CAMPAIGN_KEY"
    ]
    # Taken from the dimension, and the orders' own column it is joined on (written right side first).
    assert key_columns(SHOP, "sales/dim_store", "STORE_ID", "sales/fct_orders") == ["STORE_KEY", "OUTLET_ID"]
    # Renamed twice, two joins down.
    assert key_columns(SHOP, "sales/dim_store", "STORE_ID", "mart/order_lines") == ["SELLER_ID"]
    # Another table's key is not this one's.
    assert key_columns(SHOP, "sales/dim_product", "PRODUCT_ID", "mart/order_lines") == []


def test_new_keys_explain_a_table_that_holds_them_under_another_name():
    campaign = KeyChange(column="CAMPAIGN_ID", appeared={"CAMPAIGN_ID=3010": 3010})
    assert new_key_candidates(ADS, "delivery/fct_delivery", {"delivery/dim_campaign": campaign}) == [
        ("delivery/dim_campaign", campaign, "CAMPAIGN_KEY")
    ]
    store = KeyChange(column="STORE_ID", appeared={"STORE_ID=7": 7})
    product = KeyChange(column="PRODUCT_ID", appeared={"PRODUCT_ID=1": 1})
    changes = {"sales/dim_store": store, "sales/dim_product": product}
    assert new_key_candidates(SHOP, "mart/order_lines", changes) == [("sales/dim_store", store, "SELLER_ID")]


def test_where_the_lineage_does_not_say_a_key_is_held_under_its_own_name():
    changes = {
        "sales/dim_store": KeyChange(column="STORE_ID", appeared={"STORE_ID=7": 7}),
        "sales/dim_product": KeyChange(column="PRODUCT_ID", appeared={"PRODUCT_ID=1": 1}),
        "sales/dim_region": KeyChange(column="REGION_ID"),
    }
    graph = LineageGraph([
        _node("sales/dim_store", {"STORE_ID": []}), _node("sales/dim_product", {"PRODUCT_ID": []}),
        _node("sales/dim_region", {"REGION_ID": []}), _node("sales/orders", {"STORE_ID": [], "REGION_ID": []}),
    ] + [dg.AssetSpec("sales/orders_wide", deps=["sales/dim_store", "sales/dim_product", "sales/dim_region"],
                      metadata={"dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn("STORE_ID"), dg.TableColumn("REGION_ID")])})])  # fmt: skip
    found = new_key_candidates(graph, "sales/orders_wide", changes)
    assert [(a, c) for a, _, c in found] == [("sales/dim_store", "STORE_ID")]
