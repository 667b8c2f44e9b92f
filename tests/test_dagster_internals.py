"""Dagster's private names are used only on the dagster release they were verified on: on another one both
internals modules (the integration's and the product's) fail at load naming their concern and both releases,
and each optional fast path is off unless configured, and says so where its storage was not verified.

The release is changed the only way that does not mock dw-dagster: Dagster's own ``__version__`` in a fresh
interpreter (for the load errors), or the version string handed to the check.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tomllib
from pathlib import Path

import dagster as dg
import pytest

from dw_dagster.coalesce.dagster_version import (
    VERIFIED_DAGSTER_VERSION,
    UnverifiedDagsterError,
    require_verified_dagster,
)
from dw_dagster.coalesce.runless_store import FEATURE as BATCHED_RUN_EVENTS
from dw_dagster.coalesce.runless_store import store_runless_asset_events

ROOT = Path(__file__).resolve().parents[1]
INTERNALS = {
    "dw_dagster.coalesce.dagster_internals": "Dagster's internals used by the Coalesce integration (dw_dagster.coalesce)",
    "dw_dagster.internals": "Dagster's internals used by the product (dw_dagster.internals)",
}  # fmt: skip
OTHER = "1.14.0"


def test_the_checked_release_is_the_installed_and_pinned_one() -> None:
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"dagster=={VERIFIED_DAGSTER_VERSION}" in pins
    assert dg.__version__ == VERIFIED_DAGSTER_VERSION


def test_on_another_release_the_internals_modules_fail_at_load_naming_both_releases() -> None:
    script = f"""
import importlib, json, dagster
dagster.__version__ = {OTHER!r}
out = {{}}
for name in {sorted(INTERNALS)!r}:
    try:
        importlib.import_module(name)
        out[name] = None
    except ImportError as e:
        out[name] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    errors = json.loads(ran.stdout.strip().splitlines()[-1])
    assert set(errors) == set(INTERNALS)
    for module, error in errors.items():
        assert error is not None, f"{module} loaded on dagster {OTHER}"
        kind, message = error
        assert kind == "UnverifiedDagsterError"
        assert message.startswith(f"{INTERNALS[module]}: "), message
        assert f"verified on dagster {VERIFIED_DAGSTER_VERSION} only, and this is dagster {OTHER}" in message


def test_the_check_passes_the_verified_release_and_names_what_fails_on_another() -> None:
    require_verified_dagster("run tags")
    with pytest.raises(
        UnverifiedDagsterError, match=r"^run tags: .* this is dagster 1\.14\.0\. Install dagster==1\.13\.27"
    ):
        require_verified_dagster("run tags", version=OTHER)


def test_the_run_sensors_batched_events_are_off_on_a_storage_they_were_not_verified_on(caplog) -> None:
    event = dg.AssetMaterialization(asset_key="node")
    with dg.DagsterInstance.ephemeral() as instance, caplog.at_level(logging.WARNING):
        assert not store_runless_asset_events(instance, [event])
        assert not store_runless_asset_events(instance, [event])  # said once per storage, not every tick
        assert not instance.get_asset_keys()
    (warning,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(BATCHED_RUN_EVENTS)]
    assert "InMemoryEventLogStorage is not one they were verified on" in warning


def test_the_fast_paths_are_off_by_default_and_the_code_location_configures_them() -> None:
    from dw_dagster.app.project import coalesce_components
    from dw_dagster.coalesce.component import CoalesceComponent
    from dw_dagster.event_log.planned_checks import CONFIG_SCHEMA

    assert CoalesceComponent.model_fields["batch_run_events"].default is False
    assert CONFIG_SCHEMA["batch_planned_check_events"].default_value is False
    (component,) = coalesce_components()
    assert component.batch_run_events is True  # dw_dagster/app/defs/coalesce/defs.yaml
