"""An in-process fakesnow database for the diagnosis's unit tests: database ``DB`` with the schemas a test's
pipeline uses and the ops tables the diagnosis reads (``DW_OPS``), no server, no world."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any

import dagster as dg
import fakesnow
import snowflake.connector

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.value_loss import diagnose_fall
from dw_dagster.records.incidents import Diagnosis, Finding, Incident
from dw_dagster.warehouse.ops import TABLES, OpsSchema


@contextmanager
def diagnosis_db(*schemas: str) -> Iterator[Any]:
    """A connection to ``DB`` with ``schemas`` and ``DW_OPS`` (its metric history and incidents) created."""
    with fakesnow.patch():
        # Bound server-side, as the product's own connections bind (warehouse/connections.py).
        conn = snowflake.connector.connect(database="DB", schema="RAW", paramstyle="qmark")
        cur = conn.cursor()
        for schema in (*schemas, "DW_OPS"):
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "DB"."{schema}"')
        cur.execute(f'CREATE TABLE "DB"."DW_OPS"."METRIC_HISTORY" ({TABLES["METRIC_HISTORY"]})')
        cur.execute(f'CREATE TABLE "DB"."DW_OPS"."INCIDENTS" ({TABLES["INCIDENTS"]})')
        try:
            yield conn
        finally:
            conn.close()


def node_spec(key: str, table: str, types: dict[str, str], lineage=None, join=None, reads=()) -> dg.AssetSpec:
    """A Coalesce node's asset spec: a Source table, or (with ``lineage``: column -> [(asset, column)], and its
    ``join`` text) a node built from others; ``reads``: the tables its join reads no column from (a WHERE
    subquery's)."""
    metadata = {
        "dagster/table_name": table,
        "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in types.items()]),
        "coalesce/node_type": "Fact" if join else "Source",
    }
    deps: set[str] = set()
    if lineage:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(
            deps_by_column={c: [dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(k), column_name=n)
                                for k, n in srcs] for c, srcs in lineage.items()}
        )  # fmt: skip
        metadata["coalesce/join"] = join
        deps = {k for srcs in lineage.values() for k, _ in srcs} | set(reads)
    return dg.AssetSpec(key, kinds={"coalesce"}, deps=sorted(deps), metadata=metadata)


def diagnose_total_fall(
    conn: Any, graph: LineageGraph, total: RecordedTotal, day: date, gap: float
) -> Diagnosis | None:
    """``total`` fell by ``gap`` on ``day``, its load complete and fresh: the joins and filters on its path
    measured as the diagnosis measures them (``value_loss.diagnose_fall``), each table ``"DB"."LOCATION"."NAME"``."""
    ctx = DiagnosisContext(graph, MetricsFile.model_validate({"totals": [total.model_dump()]}),
                           lambda loc, name: f'"DB"."{loc}"."{name}"', HistorySession(conn, OpsSchema("DB")),
                           conn.cursor())  # fmt: skip
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", title="fell", business_date=day,
                        severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name=f"total_{total.name}", asset_key=total.asset, business_date=day, summary="fell",
                      cause_scope="job")  # fmt: skip
    return diagnose_fall(incident, finding, total, ctx, gap, {"total": total.name})
