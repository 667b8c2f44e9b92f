"""What the metrics and context files say about the asset graph is checked against the Coalesce specs, and a
``ref()`` in their SQL resolves to the node's table; the specs are read only when something asks (a code
location whose files name nothing pays nothing at each load: 10,000 specs indexed for nothing)."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest
from coalesce_state import bench_load_definitions

from dw_dagster.app.components import ref_resolver
from dw_dagster.app.references import check_references
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceJob, CoalesceNode
from dw_dagster.config import DwConfigError


def _orders_workspace() -> CoalesceWorkspaceData:
    """Another shape: two locations, a source and a stage reading it, one job by name."""

    def node(i: str, name: str, location: str, node_type: str, parents: list[tuple[str, str]]):
        return CoalesceNode.model_validate(
            {
                "id": i,
                "name": name,
                "nodeType": node_type,
                "database": "ANALYTICS",
                "schema": location,
                "locationName": location,
                "metadata": {
                    "columns": [{"columnID": f"{i}-c", "name": "ORDER_ID", "dataType": "NUMBER"}],
                    "sourceMapping": [
                        {
                            "name": name,
                            "dependencies": [{"locationName": loc, "nodeName": n} for loc, n in parents],
                        }
                    ],
                },
            }
        )

    nodes = [
        node("a", "RAW_ORDERS", "SRC", "Source", []),
        node("b", "STG_ORDERS", "STAGING", "Stage", [("SRC", "RAW_ORDERS")]),
    ]
    jobs = [CoalesceJob(id="9", name="hourly_orders", include_selector="{location: STAGING}")]
    return CoalesceWorkspaceData(
        base_url="https://app.coalescesoftware.io",
        fetched_at="2026-12-01T00:00:00Z",
        environments=[
            CoalesceEnvironmentData(
                environment=CoalesceEnvironment(id="5", name="QA"), nodes=nodes, jobs=jobs
            )
        ],
    )


class _Specs(list):
    """The specs, counting how often they are walked."""

    walks = 0

    def __iter__(self) -> Iterator[dg.AssetSpec]:
        self.walks += 1
        return super().__iter__()


WORKSPACES = {
    "synthetic": (
        lambda: bench_load_definitions().synthetic_workspace(30),
        ("LOC_03", "NODE_00003"),
        '"DW"."LOC_03"."NODE_00003"',
        "job_4",
    ),
    "orders": (
        _orders_workspace,
        ("STAGING", "STG_ORDERS"),
        '"ANALYTICS"."STAGING"."STG_ORDERS"',
        "hourly_orders",
    ),
}


@pytest.mark.parametrize("shape", sorted(WORKSPACES))
def test_a_ref_resolves_to_its_nodes_table_and_the_specs_are_read_only_then(shape: str) -> None:
    workspace, (location, name), table, _ = WORKSPACES[shape]
    specs = _Specs(load_coalesce_asset_specs(workspace()))
    resolve = ref_resolver(specs)
    assert specs.walks == 0  # nothing asked yet
    assert resolve(location, name) == table
    with pytest.raises(ValueError, match=rf"ref\('{location}', 'NO_SUCH_NODE'\): no such Coalesce node"):
        resolve(location, "NO_SUCH_NODE")
    assert specs.walks == 1  # indexed once, at the first ref()


@pytest.mark.parametrize("shape", sorted(WORKSPACES))
def test_files_that_name_nothing_read_no_spec_and_a_misnamed_job_or_asset_is_still_refused(
    shape: str,
) -> None:
    workspace, _, _, job = WORKSPACES[shape]
    specs = _Specs(load_coalesce_asset_specs(workspace()))
    check_references(
        specs, context=None, context_path=None, metrics=MetricsFile(), metrics_path="metrics.yaml"
    )
    assert specs.walks == 0

    key = specs[-1].key.to_user_string()
    misplaced = f"nowhere/{key.rsplit('/', 1)[-1]}"
    named = MetricsFile.model_validate(
        {
            "volume": {"bounds": {key: {"min": 1}, misplaced: {"min": 1}}},
            "freshness": {
                "schedules": {
                    job: {"cron": "0 6 * * *", "timezone": "UTC", "grace_minutes": 60},
                    f"{job}_typo": {"cron": "0 6 * * *", "timezone": "UTC", "grace_minutes": 60},
                }
            },
        }
    )
    with pytest.raises(DwConfigError) as raised:
        check_references(specs, context=None, context_path=None, metrics=named, metrics_path="metrics.yaml")
    problems = str(raised.value).splitlines()
    assert problems == [
        f"metrics.yaml: volume.bounds.{misplaced}: no asset '{misplaced}' in the asset graph (did you mean '{key}'?)",
        f"metrics.yaml: freshness.schedules.{job}_typo: no Coalesce job '{job}_typo'; jobs: "
        + ", ".join(
            sorted({j["name"] for s in specs for j in (s.metadata.get("coalesce/jobs").value or [])})
        ),
    ]
