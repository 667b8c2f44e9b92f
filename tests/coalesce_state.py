"""The Coalesce state as tests reach it: in the Dagster instance's defs-state storage, under the key of the
code location's Coalesce component, as `dw-dagster coalesce refresh` keeps it. A module of its own, not
conftest (see world_cache.py)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from dw_dagster.app.project import coalesce_components


@functools.cache
def bench_load_definitions():
    """``benchmarks/bench_load_definitions.py`` as a module: its synthetic workspace (``synthetic_workspace``) and
    its production shape's context file (``CONTEXT``) are what the load's tests load."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_load_definitions.py"
    spec = importlib.util.spec_from_file_location("bench_load_definitions", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in the process's environment meanwhile (the components' templates read it)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def state_key() -> str:
    """The key the code location's Coalesce component keeps its state under, in this environment."""
    (component,) = coalesce_components()
    return component.defs_state_config.key


def write_state_text(instance: dg.DagsterInstance, key: str, edit: Callable[[str], str]) -> str:
    """Stores ``edit(the latest state's text)`` as a new latest version of ``key``; returns the version
    that was latest before, to restore with ``set_latest_version``."""
    storage = instance.defs_state_storage
    good = storage.get_latest_version(key)
    path = Path(instance.root_directory) / "edited_state"
    storage.download_state_to_path(key, good, path)
    path.write_text(edit(path.read_text()))
    storage.upload_state_from_path(key, f"edited-{datetime.now(UTC).timestamp()}", path)
    return good


def write_state(instance: dg.DagsterInstance, key: str, edit: Callable[[Any], Any]) -> str:
    """As :func:`write_state_text`, with ``edit`` given the state as JSON."""
    return write_state_text(instance, key, lambda text: json.dumps(edit(json.loads(text))))
