"""The ops store's database and schema are named as a user names them to the connector (``SNOWFLAKE_DATABASE``,
the metrics file's ``ops_schema``) and resolved as Snowflake resolves them: ``dw_wh_test`` is DW_WH_TEST in
every statement, as at login, on the local Snowflake whose quoted names are case-sensitive."""

from __future__ import annotations

import pytest
from snowflake.connector.errors import ProgrammingError

from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


def test_names_resolve_upper_case_unless_quoted():
    assert OpsSchema("dw_prod", "dw_ops").table("INCIDENTS") == '"DW_PROD"."DW_OPS"."INCIDENTS"'
    assert OpsSchema('"Mixed_Case"', '"ops"').qualified == '"Mixed_Case"."ops"'


def test_a_lower_case_database_setting_reaches_the_upper_case_database(warehouse: WarehouseResource):
    ops = OpsSchema("dw_wh_test", "ids_lower")
    with ops.connect(warehouse, "test.identifiers") as conn:
        cur = conn.cursor()
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {ops.qualified}")
        cur.execute(f"CREATE OR REPLACE TABLE {ops.table('T')} (N NUMBER(38,0))")
        cur.execute(f"INSERT INTO {ops.table('T')} VALUES (1)")
        cur.execute(f"SELECT COUNT(*) FROM {ops.table('T')}")
        assert cur.fetchall() == [(1,)]
        with pytest.raises(ProgrammingError, match="Database 'dw_wh_test' does not exist or not authorized"):
            cur.execute('SELECT COUNT(*) FROM "dw_wh_test"."IDS_LOWER"."T"')
