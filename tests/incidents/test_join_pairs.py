"""A join whose ON equates the right table with two tables joined before it: each parsed join pairs the
right table with one left table, never a column of one read on the other's table."""

from __future__ import annotations

import pytest

from dw_dagster.incidents.joins import parse_joins, unmatched_rows_query


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


@pytest.mark.parametrize(
    ("join_text", "left", "pairs"),
    [
        # order lines priced by item and the warehouse's region
        (
            """FROM {{ ref('RAW', 'LINES') }} "L"
            JOIN {{ ref('REF', 'WAREHOUSES') }} "W" ON "W"."WAREHOUSE_ID" = "L"."WAREHOUSE_ID"
            LEFT JOIN {{ ref('REF', 'PRICES') }} "P" ON "P"."ITEM_ID" = "L"."ITEM_ID" AND "P"."REGION" = "W"."REGION" """,
            '"DB"."RAW"."LINES"',
            [("ITEM_ID", "ITEM_ID")],
        ),
        # meter readings rated by the tariff of the meter's site: the other table's pair written first
        (
            """FROM {{ ref('RAW', 'READINGS') }} "RD"
            INNER JOIN {{ ref('REF', 'SITES') }} "S" ON "RD"."SITE" = "S"."SITE"
            INNER JOIN {{ ref('REF', 'TARIFFS') }} "T" ON "T"."TARIFF" = "S"."TARIFF" AND "T"."METER_KIND" = "RD"."KIND" """,
            '"DB"."REF"."SITES"',
            [("TARIFF", "TARIFF")],
        ),
    ],
)
def test_a_join_on_two_earlier_tables_pairs_the_right_table_with_one_of_them(join_text, left, pairs):
    first, second = parse_joins(join_text, _resolve)
    assert (second.left_table, second.on) == (left, pairs)
    # Every column the diagnosis reads on the left is that table's own.
    query = unmatched_rows_query(second, None)
    assert f"FROM {left} L" in query and all(f'L."{c}"' in query for c, _ in pairs)
    assert first.on and first.left_table != first.right_table
