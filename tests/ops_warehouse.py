"""The local Snowflake server alone, for the incident store's tests (no world, no Coalesce); a module, not a
conftest, so that ``from conftest import ...`` keeps meaning the suite's."""

from __future__ import annotations

import pytest

from dw_dagster.warehouse.migrations import migrate
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource
from dw_local.world import LocalWorld


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("sf"), services=("snowflake",)) as lw:
        sf = lw.snowflake
        yield lw, WarehouseResource(
            account=sf.account, user=sf.user, **sf.sign_in(), database="DW_OPS_TEST", network_timeout=20,
            additional_snowflake_connection_args={"host": sf.host, "port": sf.port, "protocol": sf.protocol},
        )  # fmt: skip


def ops_schema(wh: WarehouseResource, schema: str) -> OpsSchema:
    """A migrated ops schema of its own for a test (the store expects the deployment's migrations run)."""
    ops = OpsSchema(wh.database, schema)
    migrate(wh, ops)
    return ops
