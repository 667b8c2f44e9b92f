"""The Coalesce integration: client, workspace resource, state, translator, polling sensor and component.

It imports nothing from the rest of dw-dagster; the product's checks, incidents and remediation are layers
above it (``tests/coalesce/test_standalone.py`` holds it to that).

The names below load on first use (PEP 562), so that importing one dependency-free module of the package
(``selectors``, ``sql``, ``run_models``: the local Coalesce simulator does, at every start) does not import
Dagster with the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dw_dagster.coalesce.client import CoalesceClient as CoalesceClient
    from dw_dagster.coalesce.component import CoalesceComponent as CoalesceComponent
    from dw_dagster.coalesce.cursor import CoalesceRunSensorCursor as CoalesceRunSensorCursor
    from dw_dagster.coalesce.cursor import CoalesceRunSensorError as CoalesceRunSensorError
    from dw_dagster.coalesce.errors import CoalesceAPIError as CoalesceAPIError
    from dw_dagster.coalesce.errors import CoalesceConfigError as CoalesceConfigError
    from dw_dagster.coalesce.errors import CoalesceConnectionError as CoalesceConnectionError
    from dw_dagster.coalesce.errors import CoalesceError as CoalesceError
    from dw_dagster.coalesce.errors import CoalesceResponseError as CoalesceResponseError
    from dw_dagster.coalesce.errors import CoalesceRunTimeoutError as CoalesceRunTimeoutError
    from dw_dagster.coalesce.errors import CoalesceStateError as CoalesceStateError
    from dw_dagster.coalesce.metadata import CoalesceMetadataSet as CoalesceMetadataSet
    from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet as CoalesceRunMetadataSet
    from dw_dagster.coalesce.models import CoalesceUserCredentials as CoalesceUserCredentials
    from dw_dagster.coalesce.resources import CoalesceCredentials as CoalesceCredentials
    from dw_dagster.coalesce.resources import CoalesceWorkspace as CoalesceWorkspace
    from dw_dagster.coalesce.run_models import CoalesceRunStatus as CoalesceRunStatus
    from dw_dagster.coalesce.run_report import CoalesceRunReport as CoalesceRunReport
    from dw_dagster.coalesce.sensor_builder import CoalesceRunHook as CoalesceRunHook
    from dw_dagster.coalesce.sensor_builder import (
        build_coalesce_polling_sensor as build_coalesce_polling_sensor,
    )
    from dw_dagster.coalesce.specs import load_coalesce_asset_specs as load_coalesce_asset_specs
    from dw_dagster.coalesce.state import CoalesceWorkspaceData as CoalesceWorkspaceData
    from dw_dagster.coalesce.translator import DagsterCoalesceTranslator as DagsterCoalesceTranslator

_EXPORTS = {
    "CoalesceClient": "dw_dagster.coalesce.client",
    "CoalesceComponent": "dw_dagster.coalesce.component",
    "CoalesceRunSensorCursor": "dw_dagster.coalesce.cursor",
    "CoalesceRunSensorError": "dw_dagster.coalesce.cursor",
    "CoalesceAPIError": "dw_dagster.coalesce.errors",
    "CoalesceConfigError": "dw_dagster.coalesce.errors",
    "CoalesceConnectionError": "dw_dagster.coalesce.errors",
    "CoalesceError": "dw_dagster.coalesce.errors",
    "CoalesceResponseError": "dw_dagster.coalesce.errors",
    "CoalesceRunTimeoutError": "dw_dagster.coalesce.errors",
    "CoalesceStateError": "dw_dagster.coalesce.errors",
    "CoalesceMetadataSet": "dw_dagster.coalesce.metadata",
    "CoalesceRunMetadataSet": "dw_dagster.coalesce.metadata",
    "CoalesceUserCredentials": "dw_dagster.coalesce.models",
    "CoalesceCredentials": "dw_dagster.coalesce.resources",
    "CoalesceWorkspace": "dw_dagster.coalesce.resources",
    "CoalesceRunStatus": "dw_dagster.coalesce.run_models",
    "CoalesceRunReport": "dw_dagster.coalesce.run_report",
    "CoalesceRunHook": "dw_dagster.coalesce.sensor_builder",
    "build_coalesce_polling_sensor": "dw_dagster.coalesce.sensor_builder",
    "load_coalesce_asset_specs": "dw_dagster.coalesce.specs",
    "CoalesceWorkspaceData": "dw_dagster.coalesce.state",
    "DagsterCoalesceTranslator": "dw_dagster.coalesce.translator",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # `dg check defs` finds the component types of a module through its listing.
    return sorted({*globals(), *_EXPORTS})
