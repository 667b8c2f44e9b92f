"""Every connection dw-dagster opens carries a Snowflake query tag naming it, the check or job, the asset
and the Dagster run id; and nothing secret is in it."""

from __future__ import annotations

import json

import pytest

from dw_dagster.warehouse.resources import WarehouseResource, warehouse_from_env
from dw_local.world import LocalWorld


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("tags") / "local", services=("snowflake",)) as lw:
        yield lw


def test_tagged_connection_sets_the_query_tag(world):
    wh = warehouse_from_env(world.env())
    with pytest.MonkeyPatch.context() as mp:
        for k, v in world.env().items():
            mp.setenv(k, v)
        with wh.tagged_connection(
            "check.volume", check="volume", asset="inventory/fct", dagster_run_id="r-1"
        ) as conn:
            tag = json.loads(conn._session_parameters["QUERY_TAG"])
            cur = conn.cursor()
            cur.execute("SELECT 1")
            assert cur.fetchone()[0] == 1
    assert tag == {
        "app": "dw-dagster",
        "purpose": "check.volume",
        "check": "volume",
        "asset": "inventory/fct",
        "dagster_run_id": "r-1",
    }
    assert world.env()["SNOWFLAKE_PASSWORD"] not in json.dumps(tag)


def test_secrets_stay_environment_variables_until_a_connection_is_made(world):
    wh = warehouse_from_env(world.env())
    # The resource holds the variables' names, not their values: nothing secret to show in the UI or logs.
    assert isinstance(wh.password, str) and wh.password == "SNOWFLAKE_PASSWORD"
    assert isinstance(wh, WarehouseResource)
