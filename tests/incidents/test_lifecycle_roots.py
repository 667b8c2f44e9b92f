"""An incident's dedup key is rooted where its diagnosis placed the cause, never at the head of a path that only
lists what is upstream of a table: two keyless volume losses on unrelated tables that share an upstream table
(a calendar, a region lookup) are two causes, while the same table's loss on the next night continues its
incident. Two shapes, diagnosed by the real diagnosis and settled on the real store over the local Snowflake
server."""

from __future__ import annotations

from datetime import date

import dagster as dg
import pytest
from ops_warehouse import ops_schema, warehouse
from test_incident_store import finding
from test_lifecycle_settle import POLICY

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.lifecycle import dedup_of, settle
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import CauseClass, Diagnosis, KeyGap

__all__ = ["warehouse"]

D16, D17, D18 = date(2025, 6, 16), date(2025, 6, 17), date(2025, 6, 18)

# Each shape: two tables built from sources of their own, both joined to a table whose key sorts first.
SHAPES = {
    "sales": {
        "calendar/dim_date": [],
        "raw/orders": [],
        "raw/returns": [],
        "sales/fct_orders": ["raw/orders", "calendar/dim_date"],
        "sales/fct_returns": ["raw/returns", "calendar/dim_date"],
    },
    "grid": {
        "a_ref/regions": [],
        "head_end/readings": [],
        "billing_raw/invoices": [],
        "grid/fct_readings": ["head_end/readings", "a_ref/regions"],
        "billing/fct_invoices": ["billing_raw/invoices", "a_ref/regions"],
    },
}


def _graph(shape: dict[str, list[str]]) -> LineageGraph:
    return LineageGraph(
        [
            dg.AssetSpec(key, deps=deps, kinds={"coalesce"},
                         metadata={"coalesce/node_type": "Fact" if deps else "Source"})
            for key, deps in shape.items()
        ]
    )  # fmt: skip


@pytest.fixture
def store(warehouse, request):
    _, wh = warehouse
    return IncidentStore(wh, ops_schema(wh, f"OPS_{request.node.name[-20:].upper()}"))


def _fell(store: IncidentStore, graph: LineageGraph, day: date, table: str):
    """A night whose volume check on ``table`` fell, diagnosed and settled as the diagnosis job does."""
    f = finding("volume", table, day=day, row_count=5_000, baseline={"expected": 9_000})
    incident = store.record_finding(f).incident
    with store.ops.connect(store.warehouse, "test") as conn:
        ctx = DiagnosisContext(graph, MetricsFile.model_validate({}), lambda loc, name: f"{loc}.{name}",
                               HistorySession(conn, store.ops), conn.cursor())  # fmt: skip
        d = diagnose(incident, [f], ctx)
    assert d.classification is CauseClass.VOLUME_LOSS and not d.keys, d
    return settle(store, incident, d, [f], POLICY)


@pytest.mark.parametrize("shape", SHAPES)
def test_keyless_volume_losses_on_unrelated_tables_are_two_causes(store, shape):
    graph = _graph(SHAPES[shape])
    first, second = sorted(k for k, deps in SHAPES[shape].items() if deps)
    old = _fell(store, graph, D16, first)
    other = _fell(store, graph, D17, second)
    assert other.kind == "stands", f"{second}'s loss was taken for {first}'s ({other.dedup.describe()})"
    assert other.incident.incident_id != old.incident.incident_id
    assert (old.dedup.root, other.dedup.root) == (first, second)
    assert other.related == [], "their paths only share an upstream table: not related"
    # The first table's loss again the next night is the same cause, continued.
    again = _fell(store, graph, D18, first)
    assert again.kind == "continues" and again.incident.incident_id == old.incident.incident_id


@pytest.mark.parametrize("shape", SHAPES)
def test_the_root_is_where_the_cause_sits_else_the_leading_findings_table(shape):
    fact = sorted(k for k, deps in SHAPES[shape].items() if deps)[0]
    upstream = sorted(SHAPES[shape][fact])
    f = finding("total_x", fact)
    placed = Diagnosis(incident_id="-", classification=CauseClass.DUPLICATION, cause="c",
                       path=[*upstream, fact], cause_asset=upstream[-1],
                       keys=[KeyGap(column="K", value="1", units=1.0, rows=1)])  # fmt: skip
    assert dedup_of(placed, [f]).root == upstream[-1]
    unplaced = placed.model_copy(update={"cause_asset": None, "classification": CauseClass.UNKNOWN})
    assert dedup_of(unplaced, [finding("volume", upstream[0]), f]).root == fact, "the total leads"
