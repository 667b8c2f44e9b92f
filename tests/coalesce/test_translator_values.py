"""The translator makes each column, schema and column dependency once per load and shares it among the nodes
that hold the same one: every spec still carries exactly its own node's columns, constraints and lineage."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceNode

COLUMNS = [
    {"columnID": "a", "name": "ID", "dataType": "NUMBER(38,0)", "nullable": False},
    {"columnID": "b", "name": "AMOUNT", "dataType": "NUMBER(12,2)", "description": "in cents"},
]


def _node(i: int, columns: list[dict], parent: str | None = None) -> CoalesceNode:
    cols = [
        {
            **c,
            "columnID": f"{i}-{c['columnID']}",
            "sources": (
                [{"columnReferences": [{"nodeID": f"n{parent}", "columnID": f"{parent}-{c['columnID']}"}]}]
                if parent is not None
                else []
            ),
        }
        for c in columns
    ]
    deps = [{"locationName": "LOC", "nodeName": f"N{parent}"}] if parent is not None else []
    return CoalesceNode.model_validate(
        {
            "id": f"n{i}",
            "name": f"N{i}",
            "nodeType": "Stage",
            "locationName": "LOC",
            "metadata": {"columns": cols, "sourceMapping": [{"name": f"N{i}", "dependencies": deps}]},
        }
    )


def _schema(node: CoalesceNode) -> dg.TableSchema:
    """The node's schema made plainly, column by column."""
    columns = []
    for c in node.metadata.columns:
        tests = node.metadata.column_tests(c)
        columns.append(
            dg.TableColumn(
                name=c.name,
                type=c.data_type,
                description=c.description,
                constraints=dg.TableColumnConstraints(
                    nullable=c.nullable and "notNull" not in tests,
                    unique=c.unique_key or c.primary_key or "unique" in tests,
                ),
            )
        )
    return dg.TableSchema(columns=columns)


def test_shared_values_keep_each_node_s_own_columns_and_lineage():
    same = _node(1, COLUMNS), _node(2, COLUMNS)
    # The same names, each differing in one thing the schema holds: type, description, a column test.
    other_type = _node(3, [COLUMNS[0], {**COLUMNS[1], "dataType": "FLOAT"}])
    other_description = _node(4, [COLUMNS[0], {**COLUMNS[1], "description": "in dollars"}])
    tested = _node(5, [COLUMNS[0], {**COLUMNS[1], "appliedColumnTests": {"notNull": True, "unique": True}}])
    children = _node(6, COLUMNS, parent="1"), _node(7, COLUMNS, parent="1"), _node(8, COLUMNS, parent="3")
    nodes = [*same, other_type, other_description, tested, *children]
    env = CoalesceEnvironment(id="2", name="PROD")
    data = CoalesceWorkspaceData(
        base_url="https://app.coalescesoftware.io",
        fetched_at=datetime.now(UTC),
        environments=[CoalesceEnvironmentData(environment=env, nodes=nodes, jobs=[])],
    )
    specs = {s.key.path[-1]: s for s in load_coalesce_asset_specs(data)}
    for node in nodes:
        assert specs[node.name.lower()].metadata["dagster/column_schema"] == _schema(node), node.name
    schemas = {n: specs[n].metadata["dagster/column_schema"] for n in specs}
    assert schemas["n1"] is schemas["n2"]  # the same columns: one schema
    assert len({id(schemas[n]) for n in ("n1", "n3", "n4", "n5")}) == 4
    assert schemas["n5"].columns[1].constraints == dg.TableColumnConstraints(nullable=False, unique=True)
    lineage = {n: specs[n].metadata["dagster/column_lineage"].deps_by_column for n in ("n6", "n7", "n8")}
    assert lineage["n6"] == {
        "ID": [dg.TableColumnDep(asset_key=dg.AssetKey(["loc", "n1"]), column_name="ID")],
        "AMOUNT": [dg.TableColumnDep(asset_key=dg.AssetKey(["loc", "n1"]), column_name="AMOUNT")],
    }
    assert lineage["n6"]["ID"][0] is lineage["n7"]["ID"][0]  # one dependency on n1's ID for both children
    assert lineage["n8"]["AMOUNT"] == [
        dg.TableColumnDep(asset_key=dg.AssetKey(["loc", "n3"]), column_name="AMOUNT")
    ]
