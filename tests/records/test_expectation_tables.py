"""A plan's expectations keep tables as names, never as SQL text: verification quotes them where it builds its
statement, so a plan record edited to carry SQL runs none of it."""

from __future__ import annotations

import pytest

from dw_dagster.records.remediation import Expectation


def test_a_table_is_kept_as_its_three_names_and_quoted_where_used() -> None:
    e = Expectation(kind="rows_restored", subject="mart/x", target=3, table_parts=("DB", "MART", "X"))
    recorded = e.model_dump(mode="json")
    assert recorded["table_parts"] == ["DB", "MART", "X"] and "table" not in recorded
    assert e.table == '"DB"."MART"."X"'


def test_a_name_that_carries_sql_is_quoted_as_one_identifier() -> None:
    e = Expectation(
        kind="no_duplicates",
        subject="raw/t",
        columns=["A"],
        table_parts=("DB", "RAW", 'T" ; DROP TABLE X; --'),
    )
    assert e.table == '"DB"."RAW"."T"" ; DROP TABLE X; --"'


def test_a_plan_recorded_with_a_quoted_reference_reads_back_as_names() -> None:
    old = {
        "kind": "input_fresh",
        "subject": "s/t",
        "table": '"DB"."S"."T"',
        "source_table": '"DB"."RAW"."U"',
        "columns": ["A", "B"],
    }
    e = Expectation.model_validate(old)
    assert (e.table_parts, e.source_parts) == (("DB", "S", "T"), ("DB", "RAW", "U"))


def test_a_recorded_reference_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(ValueError, match="expected a fully qualified table"):
        Expectation.model_validate({"kind": "rows_restored", "subject": "s/t", "table": "SELECT 1"})
