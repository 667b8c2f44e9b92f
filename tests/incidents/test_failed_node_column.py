"""A Coalesce node that failed on a column its build reads: a schema change when a table above it declares the
column (dropped or renamed in the warehouse since: the pipeline's metadata still lists it), a failed load when
none does (the node's newly deployed definition reads a column no source has). Two shapes (a customer
dimension over the customer master, a premise dimension over the network model), each with Snowflake's error
and the local Snowflake's."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.failed_load import diagnose_failed
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

DAY = date(2027, 10, 27)
NUM, TEXT = "NUMBER(38,0)", "VARCHAR"
# node, its source, the source's columns (the one the node copies first), the lookup and its columns.
SHAPES = {
    "customers": ("core/dim_customer", "masterdata/customers", ["CUSTOMER_ID", "CUSTOMER_NAME", "GROUP_ID"],
                  "masterdata/customer_groups", ["GROUP_ID", "SALES_DISTRICT"]),
    "premises": ("core/dim_premise", "network/premises", ["PREMISE_ID", "ADDRESS", "FEEDER_ID"],
                 "network/feeders", ["FEEDER_ID", "REGION"]),
}  # fmt: skip
ERRORS = {
    "snowflake": 'SQL compilation error: error line 1 at position 7\ninvalid identifier \'"{table}"."{column}"\'',
    "local": '002043 (02000): Binder Error: Table "{table}" does not have a column named "{column}"',
}


def _diagnose(shape: str, column: str, error: str):
    node, source, columns, lookup, lookup_columns = SHAPES[shape]
    table = source.split("/")[1].upper()
    specs = [
        node_spec(source, f"DB.RAW.{table}", dict.fromkeys(columns, NUM)),
        node_spec(lookup, f"DB.RAW.{lookup.split('/')[1].upper()}", dict.fromkeys(lookup_columns, TEXT)),
        node_spec(node, f"DB.CORE.{node.split('/')[1].upper()}", dict.fromkeys([*columns, lookup_columns[1]], TEXT),
                  {**{c: [(source, c)] for c in columns}, lookup_columns[1]: [(lookup, lookup_columns[1])]},
                  "FROM {{ ref('RAW', 'X') }} \"S\""),
    ]  # fmt: skip
    with diagnosis_db("RAW", "CORE") as conn:
        return _failed(specs, conn, node, ERRORS[error].format(table=table, column=column))


def _failed(specs: list, conn, node: str, said: str):
    """The diagnosis of ``node``'s failed build, its error ``said``, on the pipeline of ``specs``."""
    ctx = DiagnosisContext(LineageGraph(specs), MetricsFile.model_validate({}), lambda loc, name: name,
                           HistorySession(conn, OpsSchema("DB")), conn.cursor())  # fmt: skip
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", title="failed", business_date=DAY,
                        severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name="coalesce_run", asset_key=node, business_date=DAY, cause_scope="job",
                      summary=f"{node} failed: {said}", evidence={"failed_query": "Insert", "error": said})  # fmt: skip
    return diagnose_failed(incident, finding, ctx)


@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_column_its_source_declares_is_a_schema_change_one_none_declares_a_failed_load(shape, error):
    _, _, columns, _, _ = SHAPES[shape]
    dropped = _diagnose(shape, columns[1], error)
    assert dropped.classification is CauseClass.SCHEMA_CHANGE, dropped.cause
    deployed = _diagnose(shape, f"{columns[1]}_V2", error)
    assert deployed.classification is CauseClass.FAILED_LOAD, deployed.cause
    assert f"reads {columns[1]}_V2, which none of its inputs declares" in deployed.cause


def test_its_inputs_alone_are_read_and_a_quoted_name_whole():
    # A stage between the source and the node stopped passing CUSTOMER_NAME: the node's input no longer
    # declares it, though the source two levels up does (the change is in the pipeline, not the source).
    specs = [
        node_spec("masterdata/customers", "DB.RAW.CUSTOMERS", dict.fromkeys(["CUSTOMER_ID", "CUSTOMER_NAME"], NUM)),
        node_spec("stage/stg_customers", "DB.CORE.STG_CUSTOMERS", {"CUSTOMER_ID": NUM},
                  {"CUSTOMER_ID": [("masterdata/customers", "CUSTOMER_ID")]}, "FROM {{ ref('RAW', 'CUSTOMERS') }} \"C\""),
        node_spec("core/dim_customer", "DB.CORE.DIM_CUSTOMER", {"CUSTOMER_ID": NUM},
                  {"CUSTOMER_ID": [("stage/stg_customers", "CUSTOMER_ID")]}, "FROM {{ ref('CORE', 'STG_CUSTOMERS') }} \"S\""),
        # A system whose columns nobody knows, feeding a node.
        node_spec("crm/export", "DB.RAW.EXPORT", {}),
        node_spec("core/dim_crm", "DB.CORE.DIM_CRM", {"ID": NUM}, {"ID": [("crm/export", "ID")]},
                  "FROM {{ ref('RAW', 'EXPORT') }} \"E\""),
    ]  # fmt: skip
    with diagnosis_db("RAW", "CORE") as conn:

        def diagnosed(node: str, said: str):
            return _failed(specs, conn, node, said).classification

        name = 'invalid identifier \'"S"."CUSTOMER_NAME"\''
        assert diagnosed("core/dim_customer", name) is CauseClass.FAILED_LOAD
        # No input's columns known: nothing says the node changed.
        assert diagnosed("core/dim_crm", "invalid identifier 'E.NAME'") is CauseClass.SCHEMA_CHANGE
        # A quoted name with a dot in it is one name: the stage declares CUSTOMER_ID, not "ID.X".
        assert (
            diagnosed("core/dim_customer", 'invalid identifier \'"S"."CUSTOMER_ID"\'')
            is CauseClass.SCHEMA_CHANGE
        )
        assert (
            diagnosed("core/dim_customer", 'invalid identifier \'"S"."A.CUSTOMER_ID"\'')
            is CauseClass.FAILED_LOAD
        )
