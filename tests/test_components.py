"""The code location as components, through Dagster's own ``dg`` CLI (dagster-dg-cli): ``dg check defs``
passes on a bare environment and over the local world, ``dg utils refresh-defs-state`` keeps the Coalesce
state where loading reads it, and a bad attribute is reported naming the file and the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dw_local.world import LocalWorld

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def dg(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {
        "PATH": f"{VENV_BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "VIRTUAL_ENV": str(VENV_BIN.parent),
        "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true",
    }
    return subprocess.run(
        [str(VENV_BIN / "dg"), *args], cwd=cwd, env={**base, **(env or {})},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_dg_check_defs_passes_with_nothing_configured(tmp_path: Path) -> None:
    out = dg("check", "defs", env={"DAGSTER_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All component YAML validated successfully" in out.stdout + out.stderr
    assert "All definitions loaded successfully" in out.stdout + out.stderr
    # Nothing fetched yet: the Coalesce component says how to fetch, and loads nothing.
    assert "dw-dagster coalesce refresh" in out.stdout + out.stderr


@pytest.mark.world
def test_dg_refreshes_the_state_and_loads_the_code_location(tmp_path: Path) -> None:
    with LocalWorld(tmp_path / "local", services=("snowflake", "coalesce")) as lw:
        env = {**lw.env(), "DAGSTER_HOME": str(tmp_path / "home")}
        (tmp_path / "home").mkdir()
        refreshed = dg("utils", "refresh-defs-state", env=env)
        assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
        lw.stop()  # loading reads the state dg kept in the instance, not the API
        checked = dg("check", "defs", env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        listed = dg("list", "defs", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        defs = json.loads(listed.stdout)
        assets = {a["asset_key"] for a in defs["assets"]}
        assert {"inventory/fct_inventory_position", "oracle_ebs/mtl_onhand_quantities_detail"} <= assets
        assert {"coalesce_run_sensor", "incident_sensor"} <= {s["name"] for s in defs["sensors"]}


def _sandbox(root: Path, defs_yaml: str) -> Path:
    """A project of its own declaring a component of ours, as a user's project would."""
    (root / "sandbox" / "defs" / "coalesce").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "sandbox"\nversion = "0"\n\n[tool.dg]\ndirectory_type = "project"\n\n'
        '[tool.dg.project]\nroot_module = "sandbox"\n'
    )
    (root / "sandbox" / "__init__.py").write_text("")
    (root / "sandbox" / "defs" / "__init__.py").write_text("")
    (root / "sandbox" / "definitions.py").write_text(
        "from pathlib import Path\n\nimport dagster as dg\n\n\n@dg.definitions\ndef defs():\n"
        "    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)\n"
    )
    path = root / "sandbox" / "defs" / "coalesce" / "defs.yaml"
    path.write_text(defs_yaml)
    return path


def test_a_bad_attribute_is_reported_naming_the_file_and_the_field(tmp_path: Path) -> None:
    path = _sandbox(
        tmp_path,
        "type: dw_dagster.coalesce.CoalesceComponent\n"
        "attributes:\n"
        "  workspace:\n"
        '    environment_ids: ["2"]\n'
        '    api_token_env_var: "not a variable name"\n',
    )
    out = dg("check", "defs", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "DAGSTER_HOME": str(tmp_path)})
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "api_token_env_var" in text and f"{path}:3" in text


def test_the_state_management_type_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from dw_dagster.coalesce import CoalesceComponent

    declared = (
        'workspace: {environment_ids: "2"}\n'
        "defs_state:\n"
        "  management_type: \"{{ env('STATE_KIND', 'VERSIONED_STATE_STORAGE') }}\"\n"
        "  refresh_if_dev: false\n"
    )
    monkeypatch.delenv("STATE_KIND", raising=False)
    state = CoalesceComponent.resolve_from_yaml(declared).defs_state_config
    assert (state.management_type.value, state.refresh_if_dev) == ("VERSIONED_STATE_STORAGE", False)
    monkeypatch.setenv("STATE_KIND", "LOCAL_FILESYSTEM")
    assert (
        CoalesceComponent.resolve_from_yaml(declared).defs_state_config.management_type.value
        == "LOCAL_FILESYSTEM"
    )
    monkeypatch.setenv("STATE_KIND", "SOMEWHERE")
    with pytest.raises(Exception) as raised:
        CoalesceComponent.resolve_from_yaml(declared)
    text = f"{raised.value} {raised.value.__cause__}"
    assert "defs_state.management_type: expected one of" in text and "LOCAL_FILESYSTEM" in text
    assert "got 'SOMEWHERE'" in text


def test_the_operations_layer_is_set_on_the_coalesce_specs_before_they_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owners, feeding systems and freshness policies go on the Coalesce specs as the Coalesce component
    makes them: the code location sets the layer before the tree builds (test_load_snapshot.py holds what
    the assets then carry). A tree built without it is refused, rather than serving the Coalesce assets
    without them."""
    from dw_dagster.app.project import component_tree

    for k in list(os.environ):
        if k.startswith(("DW_", "COALESCE_", "SNOWFLAKE_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("DW_COALESCE_STATE", "LOCAL_FILESYSTEM")  # no instance's storage needed
    with pytest.raises(Exception) as raised:
        component_tree().build_defs()
    text = f"{raised.value} {raised.value.__cause__}"
    assert "built without the operations layer" in text and "dw_dagster.definitions" in text
