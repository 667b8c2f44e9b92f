"""The translator records, per column, what the diagnosis needs of its transform (``coalesce/column_transforms``):
the aggregate it applies at its top level when that is not a sum, and the right-side columns it reads only
through a default; the lineage graph reads it back. Two pipelines: a clinic's visits counted by distinct
patient with a LEFT join to a fee schedule read through IFNULL, and a subscription mart with a MAX, a row
count and a plan discount read through NVL. A node whose transforms say nothing carries no entry."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dw_dagster.coalesce.metadata import CoalesceMetadataSet
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceNode
from dw_dagster.context.lineage import LineageGraph


def _node(name: str, location: str, columns: dict[str, str], parent: str | None = None,
          reads: dict[str, str] | None = None) -> CoalesceNode:  # fmt: skip
    """A node whose columns (name -> transform) read the same-named column of ``parent`` (or as ``reads``)."""
    cols = [
        {
            "columnID": f"{name}.{c}",
            "name": c,
            "dataType": "NUMBER(38,0)",
            "transform": transform,
            "sources": [{"columnReferences": [{"nodeID": parent, "columnID": f"{parent}.{(reads or {}).get(c, c)}"}]}]
            if parent else [],
        }
        for c, transform in columns.items()
    ]  # fmt: skip
    deps = [{"locationName": "RAW", "nodeName": parent}] if parent else []
    return CoalesceNode.model_validate(
        {
            "id": name,
            "name": name,
            "nodeType": "Fact" if parent else "Source",
            "locationName": location,
            "metadata": {"columns": cols, "sourceMapping": [{"name": name, "dependencies": deps}]},
        }
    )


SHAPES = {
    "clinic visits": (
        _node("VISITS", "RAW", {"PATIENT_ID": "", "CLINIC_ID": "", "FEE": "", "SEEN_AT": ""}),
        _node("CLINIC_DAY", "MART", {
            "CLINIC_ID": "",
            "PATIENTS": 'COUNT(DISTINCT "V"."PATIENT_ID")',
            "VISITS": "count(*)",
            "FEE": 'SUM("V"."FEE" * IFNULL("SCHEDULE"."MULTIPLIER", 1))',
            "SEEN_AT": 'MAX("V"."SEEN_AT")',
        }, "VISITS", {"PATIENTS": "PATIENT_ID", "VISITS": "PATIENT_ID"}),
        {"PATIENTS": {"aggregate": "COUNT(DISTINCT)"}, "VISITS": {"aggregate": "COUNT(*)"},
         "FEE": {"defaulted": [["SCHEDULE", "MULTIPLIER"]]}, "SEEN_AT": {"aggregate": "MAX"}},
    ),
    "subscriptions": (
        _node("SUBS", "RAW", {"ACCOUNT": "", "PLAN": "", "MRR": "", "SEATS": ""}),
        _node("ACCOUNT_MRR", "MART", {
            "ACCOUNT": "",
            "PLAN": "COALESCE(\"P\".\"PLAN\", 'NONE')",
            "MRR": '"S"."MRR" * (1 - NVL("P"."DISCOUNT", 0))',
            "SEATS": 'ROUND(AVG("S"."SEATS"), 1)',
            # A default read beside the same column outside it, a window and a template: nothing recorded.
            "RANK_MRR": 'COALESCE("P"."DISCOUNT", 0) + "P"."DISCOUNT" + MAX("S"."MRR") OVER (PARTITION BY "S"."PLAN")',
            "BROKEN": "COUNT({{ var('x') }}",
        }, "SUBS"),
        {"PLAN": {"defaulted": [["P", "PLAN"]]}, "MRR": {"defaulted": [["P", "DISCOUNT"]]},
         "SEATS": {"aggregate": "AVG"}},
    ),
}  # fmt: skip


def _specs(*nodes: CoalesceNode):
    env = CoalesceEnvironment(id="5", name="PROD")
    data = CoalesceWorkspaceData(
        base_url="https://app.coalescesoftware.io",
        fetched_at=datetime.now(UTC),
        environments=[CoalesceEnvironmentData(environment=env, nodes=list(nodes), jobs=[])],
    )
    return {s.key.to_user_string(): s for s in load_coalesce_asset_specs(data)}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_translator_records_non_additive_aggregates_and_defaulted_columns(shape):
    source, mart, expected = SHAPES[shape]
    specs = _specs(source, mart)
    on_mart = CoalesceMetadataSet.extract(specs[f"mart/{mart.name.lower()}"].metadata).column_transforms
    assert on_mart is not None and on_mart.data == expected
    # A node whose transforms hold none of them carries no entry at all.
    assert "coalesce/column_transforms" not in specs[f"raw/{source.name.lower()}"].metadata


@pytest.mark.parametrize("shape", SHAPES)
def test_the_lineage_reads_each_column_s_aggregate_and_defaults(shape):
    source, mart, expected = SHAPES[shape]
    graph = LineageGraph(_specs(source, mart).values())
    info = graph.info(f"mart/{mart.name.lower()}")
    for column, read in expected.items():
        found = info.transform_of(column)
        assert found is not None
        assert found.aggregate == read.get("aggregate")
        assert [list(c) for c in found.defaulted] == read.get("defaulted", [])
    assert info.transform_of("ACCOUNT") is None and info.transform_of("CLINIC_ID") is None
    assert graph.info(f"raw/{source.name.lower()}").transforms == ()
    # The aggregates applied to a source column's values on its way to a mart column.
    for column, read in expected.items():
        on_mart = (f"mart/{mart.name.lower()}", column)
        read_from = graph.column_sources(on_mart)[0]
        applied = graph.aggregates_between(read_from, on_mart)
        assert applied == ([(on_mart, read["aggregate"])] if "aggregate" in read else [])
