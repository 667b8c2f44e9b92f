"""A total's SQL read again by another column (its attributes, its subsets' typical rows and signs) names the
total's table by its alias as the SQL writes it. Snowflake folds an unquoted alias to upper case: ``FROM T f``
is ``F``, so the column must be read as ``f."COL"`` (folded alike), never as ``"f"."COL"`` (the lower-case
name, which names nothing there; the local Snowflake, like DuckDB, ignores the case and cannot tell)."""

from __future__ import annotations

import pytest

from dw_dagster.checks.attributes import projected


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ('SELECT f."REGION", SUM(f."AMOUNT") AS "VALUE" FROM "DB"."CORE"."FCT" f GROUP BY 1', 'f."CHANNEL"'),
        (
            'SELECT "f"."REGION", SUM("f"."AMOUNT") AS "VALUE" FROM "DB"."CORE"."FCT" "f" GROUP BY 1',
            '"f"."CHANNEL"',
        ),
        ('SELECT "REGION", SUM("AMOUNT") AS "VALUE" FROM "DB"."CORE"."FCT" GROUP BY 1', '"CHANNEL"'),
    ],
)
def test_the_column_is_qualified_by_the_alias_as_written(sql, expected):
    found = projected(sql, "CHANNEL", lambda key, value: [key, value])
    assert found is not None
    rows, key = found
    assert key.sql(dialect="snowflake") == expected
    assert rows.sql(dialect="snowflake").startswith(f"SELECT {expected}, ")
