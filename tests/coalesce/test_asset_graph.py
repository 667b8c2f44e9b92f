"""The asset graph of the distributor world: Coalesce nodes and the context systems, one connected graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import networkx as nx
import pytest

from dw_dagster.coalesce.loader import load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceStateError, refresh_state_file
from dw_dagster.coalesce.translator import DagsterCoalesceTranslator
from dw_dagster.config import DwConfigError
from dw_dagster.definitions import build_definitions
from dw_dagster.settings import Settings
from dw_local.world import LocalWorld

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("graph") / "local", services=("snowflake", "coalesce")) as lw:
        env = lw.env()
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        refresh_state_file(Settings.from_env())
        yield lw
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def specs(world) -> dict[str, dg.AssetSpec]:
    defs = build_definitions(Settings.from_env())
    # dw-dagster's own assets (incidents) stand apart from the pipeline's graph.
    return {s.key.to_user_string(): s for s in defs.assets if s.group_name != "dw_operations"}


def _graph(specs: dict[str, dg.AssetSpec]) -> nx.DiGraph:
    g = nx.DiGraph()
    for key, spec in specs.items():
        g.add_node(key)
        for dep in spec.deps:
            g.add_edge(dep.asset_key.to_user_string(), key)
    return g


def test_one_connected_graph_from_the_erp_table_to_the_liveboard(specs):
    g = _graph(specs)
    assert set(g.nodes) == set(specs), "every dependency names a defined asset"
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

    from dw_dagster.coalesce.state import parse_state, read_state_text

    settings = Settings.from_env()
    data = parse_state(settings.coalesce_state_file, read_state_text(settings.coalesce_state_file), settings)
    specs = {s.key.to_user_string(): s for s in load_coalesce_asset_specs(data, Prefixed())}
    fct = specs["prod/inventory/fct_inventory_position"]
    assert {d.asset_key.to_user_string() for d in fct.deps} >= {
        "prod/stage/stg_onhand",
        "prod/inventory/dim_warehouse",
    }
    lineage = fct.metadata["dagster/column_lineage"].deps_by_column["ONHAND_QTY"]
    assert lineage[0].asset_key.to_user_string() == "prod/stage/stg_onhand"


def test_loading_never_calls_the_coalesce_api(world):
    world.stop()  # every server down: loading reads the state file only
    try:
        defs = build_definitions(Settings.from_env())
        assert any(s.key.to_user_string() == "inventory/fct_inventory_position" for s in defs.assets)
    finally:
        world.start()


def test_dagster_definitions_validate_passes(world):
    env = {**os.environ, **world.env()}
    out = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-m", "dw_dagster.definitions"],
        env=env, capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful" in out.stdout + out.stderr


def test_missing_state_file_says_what_to_run(tmp_path):
    settings = Settings.from_env({**os.environ, "DW_STATE_DIR": str(tmp_path)})
    with pytest.raises(CoalesceStateError) as e:
        build_definitions(settings)
    assert str(tmp_path / "coalesce_workspace.json") in str(e.value)
    assert "dw-dagster coalesce refresh" in str(e.value)


def test_broken_state_file_names_the_field(tmp_path, world):
    settings = Settings.from_env()
    data = json.loads(settings.coalesce_state_file.read_text())
    data["environments"][0]["nodes"][3]["metadata"]["columns"][0]["dataType"] = ["not", "a", "type"]
    del data["environments"][0]["nodes"][4]["name"]
    broken = tmp_path / "coalesce_workspace.json"
    broken.write_text(json.dumps(data))
    with pytest.raises(CoalesceStateError) as e:
        build_definitions(Settings.from_env({**os.environ, "DW_STATE_DIR": str(tmp_path)}))
    msg = str(e.value)
    assert "environments.0.nodes.3.metadata.columns.0.dataType" in msg
    assert "environments.0.nodes.4.name" in msg
    assert str(broken) in msg


def test_state_from_another_coalesce_is_refused(world):
    settings = Settings.from_env({**os.environ, "COALESCE_BASE_URL": "https://app.eu.coalescesoftware.io"})
    with pytest.raises(CoalesceStateError, match="base_url"):
        build_definitions(settings)


def test_stale_state_loads_with_a_warning(world, caplog):
    settings = Settings.from_env({**os.environ, "DW_STATE_MAX_AGE_HOURS": "0"})
    build_definitions(settings)
    assert "dw-dagster coalesce refresh" in caplog.text and "hours old" in caplog.text


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda c: c["systems"][0].update(owners=["nobody"]), "unknown team 'nobody'"),
        (lambda c: c["systems"][5].update(feeds=["raw_ebs/no_such_table"]), "raw_ebs/no_such_table"),
        (lambda c: c["teams"]["buyers"].update(slack_channel="buyers"), "teams.buyers.slack_channel"),
        (lambda c: c["systems"][1].update(colour="red"), "systems.1.colour"),
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
def test_broken_context_file_names_the_field(tmp_path, world, edit, expected):
    import yaml

    ctx = yaml.safe_load(Path(os.environ["DW_CONTEXT_FILE"]).read_text())
    edit(ctx)
    path = tmp_path / "context.yaml"
    path.write_text(yaml.safe_dump(ctx))
    with pytest.raises(DwConfigError) as e:
        build_definitions(Settings.from_env({**os.environ, "DW_CONTEXT_FILE": str(path)}))
    assert str(path) in str(e.value) and expected in str(e.value)
