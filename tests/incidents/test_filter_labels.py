"""The rows a node's WHERE condition leaves out, measured on DuckDB under fakesnow (the local Snowflake's
engine) and named by the condition's columns: a condition on several columns names each column of each
group, one label per column, as a join key of several columns is named."""

from __future__ import annotations

import fakesnow
import pytest
import snowflake.connector

from dw_dagster.context.joins import ParsedFilter
from dw_dagster.incidents.joins import measure_filter
from dw_dagster.records.keys import split_labels

TABLE = '"DB"."RAW"."SHIPMENTS"'


@pytest.fixture(scope="module")
def cur():
    with fakesnow.patch():
        conn = snowflake.connector.connect(
            database="DB", schema="RAW", paramstyle="qmark"
        )  # as the product binds
        c = conn.cursor()
        c.execute('CREATE SCHEMA IF NOT EXISTS "DB"."RAW"')
        c.execute(f"CREATE TABLE {TABLE} (ZONE VARCHAR, STATE VARCHAR, QTY NUMBER(38,0))")
        c.execute(
            f"INSERT INTO {TABLE} VALUES ('N', 'OPEN', 5), ('N', 'VOID', 7), ('N', 'VOID', 1),"
            " (NULL, 'OPEN', 4), ('S', 'OPEN', 3)"
        )
        yield c
        conn.close()


def test_a_condition_on_two_columns_names_each_column_of_each_group(cur):
    flt = ParsedFilter(TABLE, 'L."STATE" <> \'VOID\' AND L."ZONE" IS NOT NULL', ("ZONE", "STATE"))
    effect = measure_filter(cur, "core/fct_shipments", flt, "QTY", None)
    assert (effect.join_type, effect.dropped_rows, effect.dropped_units) == ("WHERE", 3, 12)
    assert [(g.label, g.rows, g.units) for g in effect.unmatched] == [
        ("ZONE=N, STATE=VOID", 2, 8.0),
        ("ZONE IS NULL, STATE=OPEN", 1, 4.0),
    ]
    assert split_labels(effect.unmatched[1].label) == ["ZONE IS NULL", "STATE=OPEN"]


def test_a_condition_on_one_column_keeps_its_one_label(cur):
    flt = ParsedFilter(TABLE, "L.\"STATE\" <> 'VOID'", ("STATE",))
    effect = measure_filter(cur, "core/fct_shipments", flt, "QTY", None)
    assert [(g.label, g.rows, g.units) for g in effect.unmatched] == [("STATE=VOID", 2, 8.0)]
    assert effect.unmatched[0].parts == []
