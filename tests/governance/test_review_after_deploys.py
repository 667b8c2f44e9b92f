"""The review lists the environment's nodes only when something was deployed since it last listed them,
against the Coalesce simulator over its socket (every request the client sends recorded): the first review
lists them; a run after no deploy asks for the newest deploy run only; after an engineer's deploy the next
review lists them again and sees the new column; a record of the columns without the deploy it saw (written
by an earlier version) is listed again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import dagster as dg
import httpx
import pytest

from dw_dagster.app.governance_review import review_run
from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.governance.columns import last_seen, record_seen, seen_deployed
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource
from dw_local.coalesce_sim.project_specs import node_id
from dw_local.world import LOCAL_COALESCE_TOKEN, LocalWorld, sim_control

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "sim_project.yaml"
ORDERS = node_id("RAW", "ORDERS")


class Recording(httpx.HTTPTransport):
    """The network, with the path of every request kept."""

    def __init__(self):
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[LocalWorld]:
    with LocalWorld(tmp_path_factory.mktemp("gov") / "w", project_file=PROJECT, services=("coalesce",)) as lw:
        yield lw


def review(world: LocalWorld, instance: dg.DagsterInstance) -> list[str]:
    """One review after a finished run; the paths it requested."""
    transport = Recording()
    client = CoalesceClient(base_url=world.coalesce_url, api_token=LOCAL_COALESCE_TOKEN, transport=transport)
    # No finding is recorded here (no sensitive column, nothing sampled): the warehouse is never opened.
    store = IncidentStore(
        WarehouseResource(account="unused", user="unused", password="unused", database="UNUSED"),
        OpsSchema("UNUSED"),
    )
    repo = dg.Definitions().get_repository_def()
    with client, dg.build_sensor_context(instance=instance, repository_def=repo) as context:
        outcomes = review_run(
            context, client, store, environment_id="2", touched=[], business_date=date(2026, 3, 10),
            coalesce_run_id="1", context_file=None,
        )  # fmt: skip
    assert outcomes == []
    return transport.paths


NODES = "/api/v1/environments/2/nodes"


def test_the_nodes_are_listed_again_only_after_a_deploy(world):
    with dg.instance_for_test() as instance:
        first = review(world, instance)
        assert first.count(NODES) == 1 and "/api/v1/runs" in first
        assert "REGION_CODE" not in last_seen(instance, "2")[ORDERS]
        assert seen_deployed(instance, "2") == "none"  # the fixture project was never deployed

        assert review(world, instance) == ["/api/v1/runs"]  # nothing deployed since

        sim, path = world.coalesce_client(), f"workspace/nodes/{ORDERS}?environmentID=2"
        detail = sim_control(sim, "GET", path)
        detail["metadata"]["columns"].append(
            {"name": "REGION_CODE", "dataType": "VARCHAR(8)", "transform": ""}
        )
        sim_control(sim, "PUT", path, detail)
        deploy = sim_control(sim, "POST", "deploy", {"environmentID": "2"})["runCounter"]
        sim.close()

        assert review(world, instance).count(NODES) == 1
        assert "REGION_CODE" in last_seen(instance, "2")[ORDERS]
        assert seen_deployed(instance, "2") == str(deploy)
        assert review(world, instance) == ["/api/v1/runs"]


def test_a_record_without_the_deploy_it_saw_is_listed_again(world):
    with dg.instance_for_test() as instance:
        review(world, instance)
        record_seen(instance, "2", last_seen(instance, "2"))  # as an earlier version recorded it
        assert seen_deployed(instance, "2") is None
        assert review(world, instance).count(NODES) == 1
        assert review(world, instance) == ["/api/v1/runs"]
