"""A name that matches nothing is answered "no such ..." with the closest names that exist."""

from __future__ import annotations

from dw_dagster.app.commands.lookup import closest, no_such


def test_the_closest_names_come_first_and_case_does_not_matter():
    known = ["INC-20250616-7035b2", "INC-20250618-11aa02", "INC-20250512-9f0c11"]
    assert closest("INC-20250616-7035b3", known)[0] == "INC-20250616-7035b2"
    assert closest("inc-20250616-7035b2", known)[0] == "INC-20250616-7035b2"
    assert closest("mart/mart_reorder_candidate", ["mart/mart_reorder_candidates", "stage/stg_onhand"]) == [
        "mart/mart_reorder_candidates"
    ]
    assert closest("zzz", known) == []


def test_no_such_names_what_where_and_the_closest():
    error = no_such("incident", "INC-20250616-7035b3", ["INC-20250616-7035b2"], "DW_OPS.INCIDENTS")
    assert error.message == (
        "no such incident 'INC-20250616-7035b3' in DW_OPS.INCIDENTS; closest: INC-20250616-7035b2"
    )
    assert no_such("asset", "x", []).message == "no such asset 'x'"
