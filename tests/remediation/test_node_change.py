"""The proposed node change: which join becomes LEFT, which columns are bucketed, the added test, the diff."""

from __future__ import annotations

import pytest

from dw_dagster.coalesce.workspace_models import CoalesceNode
from dw_dagster.records.remediation import NodeChange
from dw_dagster.remediation.node_change import definition, is_deployed, keep_unmatched, unified_diff

TABLES = {("STAGE", "STG_ONHAND"): '"DB"."STAGE"."STG_ONHAND"', ("INVENTORY", "DIM_WAREHOUSE"): '"DB"."INVENTORY"."DIM_WAREHOUSE"',
          ("STAGE", "STG_ITEMS"): '"DB"."STAGE"."STG_ITEMS"'}  # fmt: skip
RIGHT = '"DB"."INVENTORY"."DIM_WAREHOUSE"'


def node(join: str) -> CoalesceNode:
    def col(name: str, data_type: str, transform: str = "") -> dict:
        return {"columnID": name, "name": name, "dataType": data_type, "transform": transform}

    return CoalesceNode.model_validate(
        {
            "id": "n1",
            "name": "FCT_INVENTORY_POSITION",
            "nodeType": "Fact",
            "locationName": "INVENTORY",
            "metadata": {
                "columns": [
                    col("ORGANIZATION_ID", "NUMBER(38,0)"),
                    col("WAREHOUSE_CODE", "VARCHAR(10)"),
                    col("REGION", "VARCHAR(30)", 'UPPER("WH"."REGION")'),
                    col("WAREHOUSE_ID", "NUMBER(38,0)"),
                    col("SKU", "VARCHAR(40)"),
                ],
                "sourceMapping": [{"name": "FCT_INVENTORY_POSITION", "join": {"joinCondition": join}}],
                "appliedNodeTests": [
                    # The published shape: all five fields are always sent (docs/coalesce-api.md).
                    {
                        "name": "NO_NEGATIVE_ONHAND",
                        "description": "",
                        "continueOnFailure": False,
                        "runOrder": "After",
                        "templateString": "SELECT 1 WHERE FALSE",
                    }
                ],
            },
        }  # fmt: skip
    )


RIGHT_COLUMNS = {"WAREHOUSE_CODE": "WAREHOUSE_CODE", "REGION": "REGION", "WAREHOUSE_ID": "WAREHOUSE_ID"}
JOIN = """FROM {{ ref('STAGE', 'STG_ONHAND') }} "STG_ONHAND"
LEFT JOIN {{ ref('STAGE', 'STG_ITEMS') }} "STG_ITEMS" ON "STG_ONHAND"."INVENTORY_ITEM_ID" = "STG_ITEMS"."INVENTORY_ITEM_ID"
INNER JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }} AS "WH" ON "STG_ONHAND"."ORGANIZATION_ID" = "WH"."ORGANIZATION_ID\""""


def resolve(location: str, name: str) -> str:
    return TABLES[(location, name)]


def test_only_the_inner_join_to_the_right_table_becomes_left():
    after, ref, test = keep_unmatched(node(JOIN), RIGHT, resolve, RIGHT_COLUMNS)
    assert "LEFT JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }} AS \"WH\" ON" in after["join"]
    assert "INNER" not in after["join"]
    assert "LEFT JOIN {{ ref('STAGE', 'STG_ITEMS') }}" in after["join"], "the other join is left alone"
    assert test == "NO_UNMATCHED_DIM_WAREHOUSE"


def test_text_columns_from_the_right_side_are_bucketed_and_numbers_left_null():
    after, _, _ = keep_unmatched(node(JOIN), RIGHT, resolve, RIGHT_COLUMNS)
    by = {c["name"]: c["transform"] for c in after["columns"]}
    assert by["WAREHOUSE_CODE"] == """COALESCE("WH"."WAREHOUSE_CODE", 'UNMAPPED')""", (
        "the alias in the join is used"
    )
    assert by["REGION"] == """COALESCE(UPPER("WH"."REGION"), 'UNMAPPED')""", (
        "an existing transform is wrapped"
    )
    assert by["WAREHOUSE_ID"] == "" and by["SKU"] == "" and by["ORGANIZATION_ID"] == ""
    (added,) = [t for t in after["nodeTests"] if t["name"] == "NO_UNMATCHED_DIM_WAREHOUSE"]
    assert (
        added["sql"]
        == """SELECT * FROM {{ ref('INVENTORY', 'FCT_INVENTORY_POSITION') }} WHERE "WAREHOUSE_CODE" = 'UNMAPPED'"""
    )
    assert [t["name"] for t in after["nodeTests"]][0] == "NO_NEGATIVE_ONHAND", "existing tests are kept"


def test_a_bare_join_is_an_inner_join():
    after, _, _ = keep_unmatched(node(JOIN.replace("INNER JOIN", "JOIN")), RIGHT, resolve, RIGHT_COLUMNS)
    assert "LEFT JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }}" in after["join"]


def test_no_inner_join_to_the_table_is_an_error_naming_the_node():
    left_already = JOIN.replace("INNER JOIN", "LEFT OUTER JOIN")
    with pytest.raises(ValueError, match="FCT_INVENTORY_POSITION: no inner join to INVENTORY.DIM_WAREHOUSE"):
        keep_unmatched(node(left_already), RIGHT, resolve, RIGHT_COLUMNS)
    with pytest.raises(ValueError, match="does not read"):
        keep_unmatched(node(JOIN), '"DB"."X"."OTHER"', resolve, RIGHT_COLUMNS)
    with pytest.raises(ValueError, match="no text column"):
        keep_unmatched(node(JOIN), RIGHT, resolve, {"WAREHOUSE_ID": "WAREHOUSE_ID"})


def test_the_diff_is_a_unified_diff_of_the_definition():
    before = definition(node(JOIN))
    after, _, _ = keep_unmatched(node(JOIN), RIGHT, resolve, RIGHT_COLUMNS)
    diff = unified_diff(before, after, "INVENTORY/FCT_INVENTORY_POSITION")
    lines = diff.splitlines()
    assert lines[0] == "--- a/INVENTORY/FCT_INVENTORY_POSITION.yml" and lines[1].startswith("+++ b/")
    assert any(line.startswith("-") and "INNER JOIN" in line for line in lines)
    assert any(line.startswith("+") and "LEFT JOIN {{ ref('INVENTORY'" in line for line in lines)
    assert "+- name: NO_UNMATCHED_DIM_WAREHOUSE" in lines


def _change(join: str = JOIN) -> NodeChange:
    before = definition(node(join))
    after, ref, test = keep_unmatched(node(join), RIGHT, resolve, RIGHT_COLUMNS)
    return NodeChange(environment_id="2", node_id="n1", node_name="FCT_INVENTORY_POSITION", asset_key="a", before=before,
                      after=after, diff="", right_ref=ref, test_name=test)  # fmt: skip


def test_deployed_means_the_join_the_bucketed_columns_and_the_test_are_there():
    change = _change()
    assert change.right_ref == ("INVENTORY", "DIM_WAREHOUSE")
    assert not is_deployed(change.before, change)
    assert is_deployed(change.after, change)
    typed = {
        **change.after,
        "join": change.after["join"].replace("LEFT JOIN", "left outer join").replace(" ON", "\n   ON"),
    }
    assert is_deployed(typed, change), "however the owner typed the LEFT join"
    unrelated = {
        **change.after,
        "columns": [*change.after["columns"], {"name": "NEW", "dataType": "VARCHAR", "transform": "1"}],
    }
    assert is_deployed(unrelated, change), "an unrelated edit does not matter"
    assert not is_deployed({**change.after, "join": change.before["join"]}, change), (
        "the join still inner is not it"
    )
    no_test = {**change.after, "nodeTests": change.before["nodeTests"]}
    assert not is_deployed(no_test, change)


def test_aliases_and_comments_are_read_as_sql_reads_them():
    on_right_away = JOIN.replace('AS "WH" ON', "ON").replace('"WH".', '"DIM_WAREHOUSE".')
    after, _, _ = keep_unmatched(node(on_right_away), RIGHT, resolve, {"WAREHOUSE_CODE": "WAREHOUSE_CODE"})
    assert after["columns"][1]["transform"] == """COALESCE("DIM_WAREHOUSE"."WAREHOUSE_CODE", 'UNMAPPED')""", (
        "ON is no alias"
    )
    unquoted = JOIN.replace('AS "WH"', "wh").replace('"WH".', "wh.")
    after, _, _ = keep_unmatched(node(unquoted), RIGHT, resolve, {"WAREHOUSE_CODE": "WAREHOUSE_CODE"})
    assert after["columns"][1]["transform"] == """COALESCE("WH"."WAREHOUSE_CODE", 'UNMAPPED')""", (
        "unquoted: upper case"
    )
    commented = "-- INNER JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }} \"OLD\"\n" + JOIN
    after, _, _ = keep_unmatched(node(commented), RIGHT, resolve, RIGHT_COLUMNS)
    assert after["join"].startswith("-- INNER JOIN"), "a commented-out join is left as it is"
    assert "LEFT JOIN {{ ref('INVENTORY', 'DIM_WAREHOUSE') }} AS \"WH\"" in after["join"]


def stage(transform: str = "") -> CoalesceNode:
    return CoalesceNode.model_validate(
        {
            "id": "n2",
            "name": "STG_ORDER_LINES",
            "nodeType": "Stage",
            "locationName": "STAGE",
            "metadata": {
                "columns": [
                    {"columnID": "c1", "name": "STORE_ID", "dataType": "NUMBER(38,0)", "transform": ""},
                    {"columnID": "c2", "name": "REVENUE", "dataType": "NUMBER(18,2)", "transform": transform},
                ],
                "sourceMapping": [
                    {
                        "name": "STG_ORDER_LINES",
                        "join": {"joinCondition": "FROM {{ ref('RAW', 'ORDER_LINES') }} \"OL\""},
                    }
                ],
                "appliedNodeTests": [],
            },
        }  # fmt: skip
    )


def test_a_unit_change_is_normalised_inside_the_columns_expression_for_its_key_only():
    from dw_dagster.remediation.node_change import normalise

    after, test = normalise(stage('"OL"."QUANTITY" * "OL"."UNIT_PRICE"'), "REVENUE", ("OL", "UNIT_PRICE"),
                            ("STORE_ID", "4", True), 100, ("STORE_ID", "REVENUE", 0.1, 10.0))  # fmt: skip
    revenue = next(c for c in after["columns"] if c["name"] == "REVENUE")["transform"]
    assert (
        revenue
        == '"OL"."QUANTITY" * CASE WHEN "OL"."STORE_ID" = 4 THEN "OL"."UNIT_PRICE" / 100 ELSE "OL"."UNIT_PRICE" END'
    )
    (added,) = after["nodeTests"]
    assert added["name"] == test == "SCALE_OF_REVENUE_STORE_ID_4"
    assert "NOT BETWEEN 0.1 * OTHERS_AVG AND 10 * OTHERS_AVG" in added["sql"]
    assert "{{ ref('STAGE', 'STG_ORDER_LINES') }}" in added["sql"]


def test_a_sign_change_on_a_text_key_restores_the_sign_and_tests_for_it():
    from dw_dagster.remediation.node_change import normalise

    after, test = normalise(stage(), "REVENUE", ("OL", "REVENUE"), ("STORE_ID", "O'Hare", False), -1,
                            ("STORE_ID", "REVENUE", 1.0, 1.0))  # fmt: skip
    revenue = next(c for c in after["columns"] if c["name"] == "REVENUE")["transform"]
    assert (
        revenue == """CASE WHEN "OL"."STORE_ID" = 'O\\'Hare' THEN -"OL"."REVENUE" ELSE "OL"."REVENUE" END"""
    )
    assert test.startswith("SIGN_OF_REVENUE") and '"REVENUE" < 0' in after["nodeTests"][0]["sql"]


def test_a_normalised_change_is_deployed_once_its_column_and_test_are():
    from dw_dagster.remediation.node_change import normalise

    before = definition(stage())
    after, test = normalise(stage(), "REVENUE", ("OL", "REVENUE"), ("STORE_ID", "4", True), 12,
                            ("STORE_ID", "REVENUE", 0.5, 2.0))  # fmt: skip
    change = NodeChange(kind="normalise", environment_id="2", node_id="n2", node_name="STG_ORDER_LINES",
                        asset_key="stage/stg_order_lines", before=before, after=after,
                        diff=unified_diff(before, after, "STAGE/STG_ORDER_LINES"), test_name=test)  # fmt: skip
    assert not is_deployed(before, change)
    assert is_deployed(after, change)
    assert not is_deployed({**after, "nodeTests": []}, change), "the test is part of the change"


def test_a_column_that_does_not_read_the_changed_source_column_is_refused():
    from dw_dagster.remediation.node_change import normalise

    with pytest.raises(ValueError, match="does not read OL.UNIT_PRICE"):
        normalise(stage('"OL"."QUANTITY" * 2'), "REVENUE", ("OL", "UNIT_PRICE"), ("STORE_ID", "4", True), 100,
                  ("STORE_ID", "REVENUE", 0.1, 10.0))  # fmt: skip


def test_a_key_value_from_data_stays_one_string_constant_in_the_column_and_the_test():
    """A node definition binds nothing, so the key is a literal there: Snowflake reads a backslash in a string
    constant as an escape, and a key ending its string would add SQL to the node and its test."""
    import sqlglot
    from sqlglot import exp

    from dw_dagster.remediation.node_change import normalise

    key = "x\\' OR 1=1 --"
    after, _ = normalise(stage(), "REVENUE", ("OL", "REVENUE"), ("STORE_ID", key, False), -1,
                         ("STORE_ID", "REVENUE", 1.0, 1.0))  # fmt: skip
    revenue = next(c for c in after["columns"] if c["name"] == "REVENUE")["transform"]
    test_sql = after["nodeTests"][0]["sql"].replace("{{ ref('STAGE', 'STG_ORDER_LINES') }}", "T")
    for text in (revenue, test_sql):
        tree = sqlglot.parse_one(text, read="snowflake")
        assert [s.this for s in tree.find_all(exp.Literal) if s.is_string] == [key], text
        assert not list(tree.find_all(exp.Or)), text


@pytest.mark.parametrize("value", ["nan", "1_000", "4 OR 1=1", "inf"])
def test_a_numeric_key_that_is_not_a_plain_number_is_refused(value):
    from dw_dagster.remediation.node_change import normalise

    with pytest.raises(ValueError, match=f"a numeric key written as a number, got {value!r}"):
        normalise(stage(), "REVENUE", ("OL", "REVENUE"), ("STORE_ID", value, True), -1,
                  ("STORE_ID", "REVENUE", 1.0, 1.0))  # fmt: skip
