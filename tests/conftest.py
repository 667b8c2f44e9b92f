"""Shared fixtures: the local world's real servers on free loopback ports, and its seeded template."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from world_cache import WORLD_CACHE

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")
# Every local Snowflake the suite starts reads and keeps its statements' rewrites in the shared cache
# (dw_local/snowflake_statements.py, ``RewriteStore``): each is a new process that would redo them all.
os.environ.setdefault("DW_LOCAL_SNOWFLAKE_CACHE", str(WORLD_CACHE.resolve() / "snowflake"))


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session):
    """The controller builds the world templates (outside any test's timeout) while xdist's own
    sessionstart, inside this wrapper, starts the workers: they import and collect the suite during the
    builds (about 10 s of CPU each, which waited for the builds' end before), and get their first test once
    every template is built."""
    config = session.config
    from world_templates import build_all, builds_first

    if hasattr(config, "workerinput"):
        return (yield)
    _compile_the_project()
    if not builds_first(config):
        return (yield)

    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def echo(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line, flush=True)

    # A build is all CPU: more at a time than there are cores only slows the longest, which ends alone.
    workers = min(int(getattr(config.option, "numprocesses", None) or 1), len(os.sched_getaffinity(0)))
    failed: list[RuntimeError] = []

    def build() -> None:
        try:
            build_all(WORLD_CACHE.resolve(), workers, echo)
        except RuntimeError as e:
            failed.append(e)

    builds = threading.Thread(target=build, name="world-templates")
    builds.start()
    try:
        started = yield  # xdist starts the workers here
    finally:
        builds.join()
    if failed:
        pytest.exit(str(failed[0]), returncode=pytest.ExitCode.INTERNAL_ERROR)
    from dw_local.seeding import shaping_files

    session.stash[_SHAPED] = shaping_files()
    return started


_SHAPED = pytest.StashKey[dict]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The suite fails if what shapes the templates changed while it ran: every test after the change seeded
    its templates again (about 180 s of the suite's wall time the one time it happened, unnoticed)."""
    built = session.stash.get(_SHAPED, None)
    if built is None:
        return
    from dw_local.seeding import shaping_files

    now = shaping_files()
    changed = sorted(name for name in built.keys() | now.keys() if built.get(name) != now.get(name))
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"the files that shape the world templates changed during the suite: {', '.join(changed)}"
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _compile_the_project() -> None:
    """Writes the project's bytecode once, before any process starts: where PYTHONDONTWRITEBYTECODE is set
    (as on CI's machines) nothing writes it, and each of the suite's processes (template builds, servers,
    commands, code servers, run workers) compiled the project's modules again, about 0.4 s of CPU each."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("dw_dagster", "local/dw_local"):
        compileall.compile_dir(root / package, quiet=1, workers=0)


# The longest files, longest first, as measured on 2 cores (benchmarks/HISTORY.md, "The whole suite"). A file
# missing here only loses its place in the queue. The three workers start on the first three: the two
# longest that mostly wait on processes they started (the production night, README's walkthrough: their wall
# time two to three times their CPU) are not among them together, or a core idled while both waited.
LONGEST = [
    "production/test_production_night.py", "scenarios/test_suite_ecommerce_faults.py",
    "scenarios/test_suite_distributor.py", "local_world/test_readme_walkthrough.py",
    "local_world/test_world_faults.py", "local_world/test_coalesce_restart.py",
    "checks/test_baselines_local_world.py", "trust/test_bypasses_local_world.py",
    "remediation/test_demo_replay.py", "remediation/test_source_plans_local_world.py",
    "production/test_sensor_crash_points.py", "scenarios/test_suite_ecommerce_benign.py",
    "production/test_runless_store.py", "notifications/test_outbox_delivery.py",
    "local_world/test_world_commands.py", "remediation/test_reject_local_world.py",
    "incidents/test_diagnosis_lookups.py", "incidents/test_lifecycle_local_world.py",
    "scenarios/test_scenario_cli.py", "production/test_crash_receipt_local_world.py",
    "remediation/test_gate_local_world.py", "coalesce/test_run_sensor.py",
]  # fmt: skip


def _place(item: pytest.Item) -> tuple[int, int]:
    path = item.path.relative_to(Path(__file__).parent).as_posix()
    if path in LONGEST:
        return 0, LONGEST.index(path)
    return (1 if item.get_closest_marker("world") else 2), 0


def pytest_configure(config: pytest.Config) -> None:
    # The instances tests make on sqlite commit as the local world's do, without waiting for the disk.
    from dw_local.instance_storage import without_fsync

    without_fsync()
    # xdist's loadfile would hand out the files with the most tests first (its "loadscope reorder"), which
    # started the long scenario files, with few tests each, last: one of them ran alone at the end.
    config.option.loadscopereorder = False
    # A suite a shell started in the background ignores SIGINT, and Dagster maps SIGTERM onto SIGINT's
    # handler when it runs a job: every code server, daemon and server a test then started ignored SIGTERM,
    # waited out each stop's grace and outlived the suite.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Collection order is the order in which loadfile hands out the files as workers free up: the long
    # files start first and the many short ones fill the end.
    items.sort(key=_place)


@pytest.fixture(scope="session", autouse=True)
def _fakesnow_rewrites_each_text_once():
    """fakesnow's in-process cursors (the tests' own connections, ``fakesnow.patch()``) rewrite each text once,
    as the local Snowflake does for its clients (``snowflake_statements.install``): a history write's MERGE,
    run once for each night of a test's history, was parsed and rewritten every time (half of such a file's
    time)."""
    from dw_local import snowflake_statements

    snowflake_statements.install(in_process=True)


@pytest.fixture(scope="session", autouse=True)
def _fakesnow_stages_in_the_tests_temp(tmp_path_factory: pytest.TempPathFactory):
    """The stages of fakesnow's in-process connections go with the tests' temporary files, not in the folder
    fakesnow's import made and never removes (dw_local/snowflake_stages.py)."""
    from dw_local.snowflake_stages import keep_stages_in

    keep_stages_in(tmp_path_factory.getbasetemp() / "fakesnow-stages")


@pytest.fixture(scope="session")
def seeded_template() -> Path:
    from dw_local.seeding import seeded_template

    return seeded_template(WORLD_CACHE)


@pytest.fixture(scope="module")
def seeded_world(seeded_template: Path, tmp_path_factory: pytest.TempPathFactory):
    """A private running copy of the distributor world with 60 nights of history."""
    from dw_local.seeding import clone_world
    from dw_local.world import LocalWorld

    root = clone_world(seeded_template, tmp_path_factory.mktemp("world") / "local")
    with LocalWorld(root) as lw:
        yield lw


@pytest.fixture(scope="module")
def ordinary_world(tmp_path_factory: pytest.TempPathFactory):
    """A private running copy of the distributor world with night 60 played and watched by a tick of the
    local daemon (dw_local/reference_night.py: played once for every file that starts there)."""
    from dw_local.reference_night import clone_ordinary_night
    from dw_local.world import LocalWorld

    root, _ = clone_ordinary_night(WORLD_CACHE, tmp_path_factory.mktemp("world") / "local")
    with LocalWorld(root) as lw:
        yield lw


@pytest.fixture(scope="module")
def reference_world(tmp_path_factory: pytest.TempPathFactory):
    """A private running copy of the distributor world with night 60 played and watched by a tick of the
    local daemon, and the reference night played, not yet watched (dw_local/reference_night.py: played once
    for every file that starts there); and the diagnosis runs night 60's tick launched, by success."""
    from dw_local.reference_night import clone_reference_night
    from dw_local.world import LocalWorld

    root, diagnosed = clone_reference_night(WORLD_CACHE, tmp_path_factory.mktemp("world") / "local")
    with LocalWorld(root) as lw:
        yield lw, diagnosed


@pytest.fixture(scope="module", autouse=True)
def _the_environment_each_file_started_with():
    """Each test file leaves the process's environment as it found it. A local daemon points the process at
    its world, as a deployment's environment would; a file that let that stand handed its world's sign-in
    (SNOWFLAKE_PRIVATE_KEY_PATH, since the local world signs in by key pair) to the next file of the worker,
    whose own password sign-in was then refused as two sign-ins at once."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _no_leftover_defs_state_storage():
    """An instance a test entered and disposed can stay Dagster's "current" defs-state storage; loading
    definitions would then read a dead instance. Each test starts without one, as a fresh process does."""
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(None):
        yield


@pytest.fixture
def sqlite_opened() -> Iterator[list[str]]:
    """The names of the sqlite files every new DBAPI connection SQLAlchemy makes in this process opens, in
    order, while the test runs (the pooling of the local instance's storages)."""
    import sqlite3

    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

    files: list[str] = []

    def count(dbapi_connection, _record) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            files.append(Path(dbapi_connection.execute("PRAGMA database_list").fetchone()[2]).name)

    sa.event.listen(Engine, "connect", count)
    yield files
    sa.event.remove(Engine, "connect", count)
