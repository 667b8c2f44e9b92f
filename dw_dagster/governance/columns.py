"""The columns last seen on each Coalesce node, kept in the Dagster instance (its key-value store, where
sensors keep their cursors) so that a new column is new once: after a restart, on another daemon, and
whether the definitions were reloaded from a refreshed state or not.

The first review of an environment compares against the state the definitions were loaded with (the
column schema the asset specs carry), so a column added after the last state refresh is still new."""

from __future__ import annotations

import json
from collections.abc import Mapping

import dagster as dg

from dw_dagster.config import DwConfigError

KEY_PREFIX = "dw/governance/columns/"
DEPLOY_KEY_PREFIX = "dw/governance/deployed/"

ColumnsByNode = dict[str, list[str]]
"""node id -> column names"""


def _key(environment_id: str) -> str:
    return f"{KEY_PREFIX}{environment_id}"


def last_seen(instance: dg.DagsterInstance, environment_id: str) -> ColumnsByNode | None:
    """The columns recorded at the last review of the environment, None if it was never reviewed."""
    raw = instance.run_storage.get_cursor_values({_key(environment_id)}).get(_key(environment_id))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not all(
            isinstance(v, list) and all(isinstance(c, str) for c in v) for v in data.values()
        ):
            raise ValueError("expected {node id: [column names]}")
    except ValueError as e:
        raise DwConfigError(
            f"Dagster instance key {_key(environment_id)!r}: unreadable record of the columns last seen ({e})"
        ) from None
    return data


def record_seen(
    instance: dg.DagsterInstance,
    environment_id: str,
    columns: Mapping[str, list[str]],
    deployed: str | None = None,
) -> None:
    """``deployed``: what :func:`seen_deployed` returns until the next deploy of the environment (None: the
    nodes were listed during a deploy, so the next review lists them again)."""
    instance.run_storage.set_cursor_values(
        {
            _key(environment_id): json.dumps(dict(columns), sort_keys=True),
            f"{DEPLOY_KEY_PREFIX}{environment_id}": deployed or "",
        }
    )


def seen_deployed(instance: dg.DagsterInstance, environment_id: str) -> str | None:
    """The environment's last deploy as recorded with the columns last seen; None if there is none."""
    key = f"{DEPLOY_KEY_PREFIX}{environment_id}"
    return instance.run_storage.get_cursor_values({key}).get(key) or None


def loaded_columns(asset_specs_metadata: Mapping[dg.AssetKey, Mapping], environment_id: str) -> ColumnsByNode:
    """The columns of each node of the environment in the state the definitions were loaded with."""
    out: ColumnsByNode = {}
    for metadata in asset_specs_metadata.values():
        node_id = _raw(metadata.get("coalesce/node_id"))
        environment = _raw(metadata.get("coalesce/environment")) or {}
        if (
            not node_id
            or not isinstance(environment, Mapping)
            or str(environment.get("id")) != environment_id
        ):
            continue
        schema = _raw(metadata.get("dagster/column_schema"))
        out[str(node_id)] = [c.name for c in getattr(schema, "columns", ())]
    return out


def _raw(value):
    return getattr(value, "value", getattr(value, "schema", value))
