"""A local Snowflake for the warehouse tests, and a record of every statement the connector sends."""

from __future__ import annotations

import json
import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from snowflake.connector.connection import SnowflakeConnection

from dw_dagster.warehouse.resources import WarehouseResource, warehouse_from_env
from dw_local.world import LocalWorld


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    # By password, a sign-in a deployment may still choose: these tests keep its secret out of tags, output
    # and the UI (the key pair's own are tests/local_world/test_local_snowflake_auth.py).
    root = tmp_path_factory.mktemp("wh") / "local"
    with LocalWorld(root, services=("snowflake",), snowflake_sign_in="password") as lw:
        with lw.snowflake.connect(database="DW_WH_TEST"):
            pass
        yield lw


@pytest.fixture
def env(world, monkeypatch) -> dict[str, str]:
    """The world's environment in this process, as a deployment sets it, on the test's own database."""
    values = {**world.env(), "SNOWFLAKE_DATABASE": "DW_WH_TEST", "DW_METRICS_FILE": ""}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


@pytest.fixture
def warehouse(env) -> WarehouseResource:
    return warehouse_from_env(env)


@dataclass
class Sent:
    connection: SnowflakeConnection
    sql: str
    tag: dict

    @property
    def session(self) -> int:
        # The local server sends no session id; the record holds the connection, so its id is unique.
        return id(self.connection)


@pytest.fixture
def sent(monkeypatch) -> list[Sent]:
    """Every statement sent to Snowflake from this process: its session and the query tag it carried
    (the statement's own ``QUERY_TAG`` parameter, else the session's), as the request body has them."""
    log: list[Sent] = []
    original = SnowflakeConnection.cmd_query

    def recording(self, sql, *args, **kwargs):
        raw = (kwargs.get("statement_params") or {}).get("QUERY_TAG") or self._session_parameters.get(
            "QUERY_TAG"
        )
        log.append(Sent(self, sql, json.loads(raw) if raw else {}))
        return original(self, sql, *args, **kwargs)

    monkeypatch.setattr(SnowflakeConnection, "cmd_query", recording)
    return log


@pytest.fixture
def hung(world: LocalWorld):
    """``with hung():`` the local Snowflake stops answering (SIGSTOP): connections are accepted and nothing
    comes back, as from a hung warehouse or the proxy in front of it."""
    pid = LocalWorld.read_state(world.root)["pids"]["snowflake"]

    @contextmanager
    def stopped():
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    return stopped


@pytest.fixture
def closed(monkeypatch) -> list[SnowflakeConnection]:
    """Every connection this process closes (the local server ignores the logout, so ``is_closed()`` is
    no witness)."""
    log: list[SnowflakeConnection] = []
    original = SnowflakeConnection.close

    def recording(self, *args, **kwargs):
        log.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SnowflakeConnection, "close", recording)
    return log
