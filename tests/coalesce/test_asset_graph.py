"""The code location's asset graph, loaded from its components (dw_dagster/app/defs) over the local world:
Coalesce nodes and the systems around them, one connected graph, on two worlds; and refreshed, loaded and
watched through a strict Coalesce."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import networkx as nx
import pytest
from coalesce_state import environ, state_key, write_state
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType
from dagster._core.definitions.repository_definition import RepositoryLoadData
from strict_proxy import JOBS_COLLECTION, StrictProxy

from dw_dagster.app.components import asset_specs_of
from dw_dagster.app.definitions import load_definitions
from dw_dagster.app.project import refresh_coalesce_state
from dw_dagster.coalesce import CoalesceUserCredentials, CoalesceWorkspace, build_coalesce_polling_sensor
from dw_dagster.coalesce.component import CoalesceComponent
from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.translator import DagsterCoalesceTranslator
from dw_dagster.config import DwConfigError
from dw_local.world import LOCAL_COALESCE_TOKEN, LocalWorld, sim_control

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
ECOMMERCE = REPO / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce"


class Project:
    """The code location against one running world, with its own Dagster instance (where the Coalesce
    state lives, as `dw-dagster coalesce refresh` keeps it)."""

    def __init__(self, lw: LocalWorld, home: Path, env: dict[str, str] | None = None):
        self.lw = lw
        self.env = {**lw.env(), **(env or {})}
        self.instance = dg.DagsterInstance.from_config(str(home))
        with environ(self.env):
            refresh_coalesce_state(self.instance)

    def load(self, **env: str) -> dg.Definitions:
        with environ({**self.env, **env}):
            return load_definitions(self.instance)

    def specs(self, **env: str) -> dict[str, dg.AssetSpec]:
        return {s.key.to_user_string(): s for s in asset_specs_of(self.load(**env))}

    def state_key(self) -> str:
        with environ(self.env):
            return state_key()

    def write_state(self, edit) -> None:
        """Replaces the stored Coalesce state with ``edit(state as JSON)``, as a new version."""
        write_state(self.instance, self.state_key(), edit)


def causes(error: BaseException) -> str:
    """The message of an error and of every error it was raised from (Dagster names the component that
    failed; the cause names the file and the field)."""
    out = []
    while error is not None:
        out.append(str(error))
        error = error.__cause__
    return "\n".join(out)


def _world(tmp_path_factory, name: str, **kwargs) -> Iterator[LocalWorld]:
    with LocalWorld(
        tmp_path_factory.mktemp(name) / "local", services=("snowflake", "coalesce"), **kwargs
    ) as lw:
        yield lw


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[LocalWorld]:
    yield from _world(tmp_path_factory, "graph")


@pytest.fixture(scope="module")
def project(world, tmp_path_factory) -> Project:
    return Project(world, tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def specs(project) -> dict[str, dg.AssetSpec]:
    return project.specs()


def _graph(specs: dict[str, dg.AssetSpec]) -> nx.DiGraph:
    g = nx.DiGraph()
    for key, spec in specs.items():
        if spec.group_name == "dw_operations":
            continue  # dw-dagster's own assets stand apart from the pipeline's graph
        g.add_node(key)
        for dep in spec.deps:
            g.add_edge(dep.asset_key.to_user_string(), key)
    return g


def test_one_connected_graph_from_the_erp_table_to_the_liveboard(specs):
    g = _graph(specs)
    assert set(g.nodes) <= set(specs), "every dependency names a defined asset"
    assert nx.is_weakly_connected(g)
    chain = [
        "oracle_ebs/mtl_onhand_quantities_detail",
        "qlik_replicate/ebs_inventory_cdc",
        "raw_ebs/mtl_onhand_quantities_detail",
        "stage/stg_onhand",
        "inventory/fct_inventory_position",
        "mart/mart_days_of_supply",
        "thoughtspot/network_days_of_supply",
    ]
    assert all(g.has_edge(a, b) for a, b in zip(chain, chain[1:], strict=False)), chain
    assert nx.has_path(g, "planning_ops/region_map_editor", "inventory/fct_inventory_position")
    assert nx.has_path(g, "inventory/dim_warehouse", "buyers/reorder_candidates_list")


def test_the_systems_around_the_pipeline_sit_in_groups_of_their_own(specs):
    groups = {key: spec.group_name for key, spec in specs.items()}
    # The ERP, the replication, the BI and the people's lists: each its own group, none called "context".
    assert groups["oracle_ebs/mtl_onhand_quantities_detail"] == "oracle_ebs"
    assert groups["qlik_replicate/ebs_inventory_cdc"] == "qlik_replicate"
    assert groups["thoughtspot/network_days_of_supply"] == "thoughtspot"
    assert groups["planning_ops/region_map_editor"] == "planning_ops"
    assert "context" not in set(groups.values())


def test_fact_node_spec(specs):
    fct = specs["inventory/fct_inventory_position"]
    assert fct.kinds == {"coalesce", "snowflake"}
    assert fct.group_name == "inventory"
    assert fct.owners == ["team:inventory-analytics"]
    md = fct.metadata
    assert md["dagster/table_name"] == "DW_PROD.INVENTORY.FCT_INVENTORY_POSITION"
    assert md["coalesce/node_type"] == "Fact"
    assert md["coalesce/selector"] == "{location: INVENTORY name: FCT_INVENTORY_POSITION}"
    assert [j["name"] for j in md["coalesce/jobs"].data] == ["inventory_nightly"]
    assert "INNER JOIN" in md["coalesce/join"].value.upper()
    columns = {c.name: c for c in md["dagster/column_schema"].columns}
    assert columns["INVENTORY_POSITION_KEY"].constraints.unique
    assert not columns["INVENTORY_POSITION_KEY"].constraints.nullable
    lineage = md["dagster/column_lineage"].deps_by_column
    assert {(d.asset_key.to_user_string(), d.column_name) for d in lineage["ONHAND_QTY"]} == {
        ("stage/stg_onhand", "ONHAND_QTY")
    }
    assert {d.asset_key.to_user_string() for d in lineage["REGION"]} == {"inventory/dim_warehouse"}
    # What the open-source UI shows of the same lineage: one list item a column (it wraps; a table's last
    # column was cut off at the panel's edge), the transform whole.
    items = md["coalesce/column_sources"].value.splitlines()
    assert "- **`ONHAND_QTY`** from `stage/stg_onhand`.`ONHAND_QTY`" in items
    assert len(items) == len(columns) and all(i.startswith("- **`") for i in items)
    transforms = [i for i in items if "; transform `" in i]
    assert transforms and all(i.endswith("`") and "…" not in i for i in transforms)
    assert fct.freshness_policy is not None  # from the metrics file: the job's schedule


def test_sources_are_not_built_by_jobs_and_owners_follow_the_context_file(specs):
    raw = specs["raw_ebs/mtl_onhand_quantities_detail"]
    assert raw.metadata["coalesce/jobs"].data == []
    assert raw.owners == ["team:data-platform"]
    assert specs["ref_planning/region_map"].owners == ["team:planning-ops"]
    liveboard = specs["thoughtspot/network_days_of_supply"]
    assert liveboard.kinds == {"thoughtspot"} and liveboard.owners == ["team:supply-chain-planning"]
    assert liveboard.metadata["dw/reads"].data[0]["cron"] == "0 9 * * 1-5"


def test_a_subclassed_translator_keeps_the_graph_connected(world):
    class Prefixed(DagsterCoalesceTranslator):
        def get_asset_key(self, node, environment):
            return super().get_asset_key(node, environment).with_prefix(environment.name.lower())

    workspace = CoalesceWorkspace(
        base_url=world.coalesce_url, api_token=LOCAL_COALESCE_TOKEN, environment_ids=["2"]
    )
    specs = {
        s.key.to_user_string(): s
        for s in load_coalesce_asset_specs(workspace.fetch_workspace_data(), Prefixed())
    }
    fct = specs["prod/inventory/fct_inventory_position"]
    assert {d.asset_key.to_user_string() for d in fct.deps} >= {
        "prod/stage/stg_onhand",
        "prod/inventory/dim_warehouse",
    }
    lineage = fct.metadata["dagster/column_lineage"].deps_by_column["ONHAND_QTY"]
    assert lineage[0].asset_key.to_user_string() == "prod/stage/stg_onhand"


def _connected(specs: list[dg.AssetSpec]) -> dict[str, dg.AssetSpec]:
    """The specs by key, after checking that every dependency and column-lineage edge names one of them."""
    by_key = {s.key.to_user_string(): s for s in specs}
    for spec in specs:
        named = {d.asset_key.to_user_string() for d in spec.deps}
        lineage = spec.metadata.get("dagster/column_lineage")
        if lineage is not None:
            named |= {d.asset_key.to_user_string() for deps in lineage.deps_by_column.values() for d in deps}
        assert named <= set(by_key), (
            f"{spec.key.to_user_string()} names keys no spec has: {named - set(by_key)}"
        )
    return by_key


def test_a_key_changed_in_a_subclassed_get_asset_spec_is_the_key_its_children_depend_on(world):
    class Moved(DagsterCoalesceTranslator):
        def get_asset_spec(self, props):
            spec = super().get_asset_spec(props)
            return (
                spec.replace_attributes(key=spec.key.with_prefix("warehouse"))
                if props.node.location_name == "STAGE"
                else spec
            )

    workspace = CoalesceWorkspace(
        base_url=world.coalesce_url, api_token=LOCAL_COALESCE_TOKEN, environment_ids=["2"]
    )
    specs = _connected(load_coalesce_asset_specs(workspace.fetch_workspace_data(), Moved()))
    fct = specs["inventory/fct_inventory_position"]
    assert "warehouse/stage/stg_onhand" in {d.asset_key.to_user_string() for d in fct.deps}
    lineage = fct.metadata["dagster/column_lineage"].deps_by_column["ONHAND_QTY"]
    assert lineage[0].asset_key.to_user_string() == "warehouse/stage/stg_onhand"


def test_a_key_changed_by_the_components_translation_is_the_key_its_children_depend_on(world):
    component = CoalesceComponent.resolve_from_dict(
        {
            "workspace": {"base_url": world.coalesce_url, "environment_ids": "2"},
            "translation": {"key": "prod/{{ node.name | lower }}"},
        }
    )
    workspace = CoalesceWorkspace(
        base_url=world.coalesce_url, api_token=LOCAL_COALESCE_TOKEN, environment_ids=["2"]
    )
    specs = _connected(load_coalesce_asset_specs(workspace.fetch_workspace_data(), component.translator))
    fct = specs["prod/fct_inventory_position"]
    assert {d.asset_key.to_user_string() for d in fct.deps} >= {"prod/stg_onhand", "prod/dim_warehouse"}


def test_loading_never_calls_the_coalesce_api(project, world):
    world.stop()  # every server down: loading reads the stored state only
    try:
        assert "inventory/fct_inventory_position" in project.specs()
    finally:
        world.start()


def test_dagster_definitions_validate_passes(project, world):
    env = {**os.environ, **project.env, "DAGSTER_HOME": project.instance.root_directory}
    out = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", str(REPO / "workspace.yaml")],
        env=env, capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful" in out.stdout + out.stderr


def test_a_load_context_an_earlier_run_left_in_the_process_pins_nothing(world, project, tmp_path_factory):
    # Executing a run in process (as the local daemon does) reconstructs the code location and leaves
    # Dagster's load context set, pinned to that instance's state versions: a second instance's load must
    # read its own latest state, not look up the first one's version in the second one's storage.
    pinned = project.instance.defs_state_storage.get_latest_defs_state_info()
    left = DefinitionsLoadContext(
        load_type=DefinitionsLoadType.RECONSTRUCTION,
        repository_load_data=RepositoryLoadData(defs_state_info=pinned),
    )
    with DefinitionsLoadContext.scoped(left):
        other = Project(world, tmp_path_factory.mktemp("other_home"))
        assert "inventory/fct_inventory_position" in other.specs()
    assert DefinitionsLoadContext.get() is not left


def test_no_state_yet_says_what_to_run(project):
    # Another host is another state key: nothing was fetched from it yet.
    with pytest.raises(Exception) as e:
        project.load(COALESCE_BASE_URL="https://app.eu.coalescesoftware.io")
    msg = causes(e.value)
    assert "no Coalesce assets loaded" in msg and "dw-dagster coalesce refresh" in msg
    assert "CoalesceComponent[https://app.eu.coalescesoftware.io|2]" in msg
    assert str(REPO / "dw_dagster" / "app" / "defs" / "coalesce" / "defs.yaml") in msg


def test_broken_state_names_the_field(project):
    def corrupt(data):
        data["environments"][0]["nodes"][3]["metadata"]["columns"][0]["dataType"] = ["not", "a", "type"]
        del data["environments"][0]["nodes"][4]["name"]
        return data

    good = project.instance.defs_state_storage.get_latest_version(project.state_key())
    project.write_state(corrupt)
    try:
        with pytest.raises(Exception) as e:
            project.load()
        msg = causes(e.value)
        assert "environments[0].nodes[3].metadata.columns[0].dataType" in msg
        assert "environments[0].nodes[4].name: field required" in msg
        assert f"Coalesce state {project.state_key()}" in msg and "dw-dagster coalesce refresh" in msg
    finally:
        project.instance.defs_state_storage.set_latest_version(project.state_key(), good)


def test_stale_state_loads_with_a_warning(project, caplog):
    good = project.instance.defs_state_storage.get_latest_version(project.state_key())
    old = (datetime.now(UTC) - timedelta(hours=30)).isoformat()
    project.write_state(lambda data: {**data, "fetchedAt": old})
    try:
        with caplog.at_level(logging.WARNING):
            assert "inventory/fct_inventory_position" in project.specs()
        assert "30 hours old" in caplog.text and "dw-dagster coalesce refresh" in caplog.text
    finally:
        project.instance.defs_state_storage.set_latest_version(project.state_key(), good)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda c: c["systems"][0].update(owners=["nobody"]), "unknown team 'nobody'"),
        (lambda c: c["systems"][5].update(feeds=["raw_ebs/no_such_table"]), "raw_ebs/no_such_table"),
        (lambda c: c["teams"]["buyers"].update(slack_channel="buyers"), "teams.buyers.slack_channel"),
        (lambda c: c["systems"][1].update(colour="red"), "systems.1.colour"),
        (lambda c: c["systems"][1].update(group="ERP systems"), "systems.1.group"),
        (
            lambda c: c["systems"][7].update(upstream=["mart/mart_days_of_supplyy"]),
            "mart/mart_days_of_supplyy",
        ),
        # An approver is found by name or email: one name for two people would make approvals ambiguous.
        (
            lambda c: c["teams"]["buyers"]["members"][0].update(name="Dana Ortiz"),
            "'dana ortiz' names two different people",
        ),
        (
            lambda c: c["teams"]["planning-ops"]["members"][0]["run_as"].update(password_env="lower"),
            "password_env",
        ),
    ],
)
def test_broken_context_file_names_the_field(tmp_path, project, edit, expected):
    import yaml

    ctx = yaml.safe_load(Path(project.env["DW_CONTEXT_FILE"]).read_text())
    edit(ctx)
    path = tmp_path / "context.yaml"
    path.write_text(yaml.safe_dump(ctx))
    with pytest.raises(Exception) as e:
        project.load(DW_CONTEXT_FILE=str(path))
    # Dagster names the component that failed; the cause names the file and the field.
    cause = e.value
    while not isinstance(cause, DwConfigError) and cause.__cause__ is not None:
        cause = cause.__cause__
    assert isinstance(cause, DwConfigError), e.value
    assert str(path) in str(cause) and expected in str(cause)


@pytest.fixture(scope="module")
def ecommerce(tmp_path_factory) -> Iterator[Project]:
    for lw in _world(tmp_path_factory, "ecommerce", project_file=ECOMMERCE / "project.yaml"):
        env = {
            "DW_CONTEXT_FILE": str(ECOMMERCE / "context.yaml"),
            "DW_METRICS_FILE": str(ECOMMERCE / "metrics.yaml"),
        }
        yield Project(lw, tmp_path_factory.mktemp("ecommerce_home"), env)


def test_a_second_world_gets_its_own_graph_and_groups(ecommerce):
    specs = ecommerce.specs()
    g = _graph(specs)
    assert nx.is_weakly_connected(g)
    groups = {spec.group_name for key, spec in specs.items() if "coalesce/node_id" not in spec.metadata}
    assert {"shopify", "fivetran", "looker", "marketing_ops"} <= groups and "context" not in groups
    facts = [s for s in specs.values() if s.metadata.get("coalesce/node_type") == "Fact"]
    assert facts and all(f.metadata["coalesce/column_sources"].value.startswith("- **`") for f in facts)


@pytest.mark.parametrize("which", ["distributor", "ecommerce"])
def test_loading_the_code_location_warns_nothing_of_dagster(which, request):
    # A sensor's job left for Definitions to bind its resources was copied with the sensor, and Dagster's
    # copy of a sensor warned that its (empty) owners were beta, in every process that loaded the location.
    project = request.getfixturevalue("project" if which == "distributor" else "ecommerce")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        repository = project.load().get_repository_def()
        jobs = {job.name: sorted(job.resource_defs) for job in repository.get_all_jobs()}
    assert [
        f"{w.category.__name__}: {w.message}" for w in caught if w.category.__module__.startswith("dagster")
    ] == []
    assert jobs["diagnose_incident"] == ["coalesce", "io_manager", "slack", "snowflake"]
    assert all(job.executor_def.name == "in_process" for job in repository.get_all_jobs())


# ------------------
# Judged by a strict Coalesce (docs/coalesce-contract.md): no jobs collection, no startingFrom without orderBy
# ------------------


@pytest.fixture
def proxy(world) -> Iterator[StrictProxy]:
    proxy = StrictProxy(world.coalesce_url)
    # The simulator would answer the collection: only the proxy's strictness is in play.
    sim_control(world.coalesce_client(), "POST", "api", {"jobsCollection": True})
    try:
        yield proxy
    finally:
        sim_control(world.coalesce_client(), "POST", "api", {"jobsCollection": False})
        proxy.close()


def refresh(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_BIN / "dw-dagster"), "coalesce", "refresh"], env={**os.environ, **env},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_refresh_the_load_and_the_sensor_pass_a_strict_coalesce(
    world, proxy: StrictProxy, tmp_path: Path
) -> None:
    env = {**world.env(), "COALESCE_BASE_URL": proxy.url, "DAGSTER_HOME": str(tmp_path)}
    out = refresh(env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"refreshed CoalesceComponent[{proxy.url}|2]" in out.stdout
    # The collection was asked once and refused; the jobs were then read by id, from 1.
    assert proxy.refused == ["/api/v1/environments/2/jobs"]
    assert proxy.job_ids_read() == list(range(1, 51))

    instance = dg.DagsterInstance.from_config(str(tmp_path))
    with environ(env):
        specs = [s for s in asset_specs_of(load_definitions(instance)) if "coalesce/node_id" in s.metadata]
    fct = next(s for s in specs if s.key.to_user_string() == "inventory/fct_inventory_position")
    assert [j["name"] for j in fct.metadata["coalesce/jobs"].data] == ["inventory_nightly"]

    # The next refresh (in process, as `dg utils refresh-defs-state` would) reads the job it found and the ten
    # ids past it, not 50 from 1.
    proxy.clear()
    with environ(env):
        refresh_coalesce_state(instance)
    assert proxy.refused == ["/api/v1/environments/2/jobs"]
    assert proxy.job_ids_read() == list(range(1, 12))

    # The run sensor, through the proxy, reports a run under its job's name without listing jobs.
    proxy.clear()
    workspace = CoalesceWorkspace(base_url=proxy.url, api_token=LOCAL_COALESCE_TOKEN, environment_ids=["2"])
    sensor = build_coalesce_polling_sensor(workspace=workspace, asset_specs=specs)
    first = sensor(dg.build_sensor_context(instance=instance))
    client = workspace.get_client()
    credentials = CoalesceUserCredentials(snowflake_username="TRANSFORM", snowflake_password="local")
    run_id = client.start_run("2", job_id=1, user_credentials=credentials)
    client.wait_for_run(run_id, 0.05, 120)
    second = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert json.loads(second.cursor)["environments"]["2"]["high_water"] == run_id
    # The tick's own store is off unless configured (batch_run_events): it returns the events, which the
    # daemon stores one at a time, as here.
    assert second.asset_events
    for event in second.asset_events:
        instance.report_runless_asset_event(event)
    reported = set()
    for spec in specs:
        records = [*instance.fetch_observations(spec.key, limit=5).records,
                   *instance.fetch_materializations(spec.key, limit=5).records]  # fmt: skip
        for record in records:
            if record.asset_event is not None:
                ours = CoalesceRunMetadataSet.extract(record.asset_event.metadata)
                reported.add((ours.run_id, ours.job_name))
    assert reported == {(run_id, "inventory_nightly")}
    assert proxy.refused == [] and not any(JOBS_COLLECTION.match(path) for _, path, _ in proxy.requests)
