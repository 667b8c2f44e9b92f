"""Coalesce's ``{{ ref(...) }}`` templates: finding and resolving them, and quoting what they resolve to."""

from __future__ import annotations

import pytest

from dw_dagster.coalesce.sql import RefSyntaxError, find_refs, resolve_refs
from dw_dagster.sql import quote_identifier, table_reference

JOIN = """FROM {{ ref('STAGE', 'STG_ONHAND') }} "STG_ONHAND"
INNER JOIN {{ref("INVENTORY","DIM_WAREHOUSE")}} "DIM_WAREHOUSE"
  ON "STG_ONHAND"."ORGANIZATION_ID" = "DIM_WAREHOUSE"."ORGANIZATION_ID"
LEFT JOIN {{ ref_no_link('STAGE', 'STG_ONHAND') }} "AGAIN" ON TRUE"""


def resolver(location: str, name: str) -> str:
    return table_reference("DW_PROD", location, name)


def test_refs_are_found_in_order_without_repeats() -> None:
    assert find_refs(JOIN) == [("STAGE", "STG_ONHAND"), ("INVENTORY", "DIM_WAREHOUSE")]
    assert find_refs("SELECT 1") == []


def test_refs_resolve_to_quoted_tables_and_leave_the_rest() -> None:
    assert resolve_refs(JOIN, resolver) == (
        'FROM "DW_PROD"."STAGE"."STG_ONHAND" "STG_ONHAND"\n'
        'INNER JOIN "DW_PROD"."INVENTORY"."DIM_WAREHOUSE" "DIM_WAREHOUSE"\n'
        '  ON "STG_ONHAND"."ORGANIZATION_ID" = "DIM_WAREHOUSE"."ORGANIZATION_ID"\n'
        'LEFT JOIN "DW_PROD"."STAGE"."STG_ONHAND" "AGAIN" ON TRUE'
    )
    # Templates other than refs are not this module's business.
    assert resolve_refs("{{ this }} {{ ref('A', 'B') }}", resolver) == '{{ this }} "DW_PROD"."A"."B"'


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("FROM {{ ref('STAGE') }}", 5),
        ("FROM x JOIN {{ ref('STAGE', ) }}", 12),
        ("{{ ref('', 'NAME') }}", 0),
        ("{{ ref('A', 'B') }} {{ ref('A', 'B' }}", 20),
    ],
)
def test_a_malformed_ref_is_an_error_at_its_position(text: str, position: int) -> None:
    with pytest.raises(RefSyntaxError) as info:
        find_refs(text)
    assert info.value.position == position
    assert f"position {position}" in str(info.value)
    with pytest.raises(RefSyntaxError):
        resolve_refs(text, resolver)


def test_identifiers_from_metadata_are_quoted() -> None:
    assert quote_identifier("Mixed Case") == '"Mixed Case"'
    # A quote inside a name is doubled, so metadata cannot end the identifier early.
    assert quote_identifier('X"; DROP TABLE T; --') == '"X""; DROP TABLE T; --"'
    assert table_reference("DB", "SCHEMA", "NAME") == '"DB"."SCHEMA"."NAME"'
