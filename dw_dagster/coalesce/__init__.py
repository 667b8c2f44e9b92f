"""The Coalesce integration: client, workspace resource, state, translator, polling sensor and component.

It imports nothing from the rest of dw-dagster; the product's checks, incidents and remediation are layers
above it (``tests/coalesce/test_standalone.py`` holds it to that).
"""

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
from dw_dagster.coalesce.models import CoalesceRunStatus as CoalesceRunStatus
from dw_dagster.coalesce.models import CoalesceUserCredentials as CoalesceUserCredentials
from dw_dagster.coalesce.resources import CoalesceCredentials as CoalesceCredentials
from dw_dagster.coalesce.resources import CoalesceWorkspace as CoalesceWorkspace
from dw_dagster.coalesce.run_report import CoalesceRunReport as CoalesceRunReport
from dw_dagster.coalesce.sensor_builder import CoalesceRunHook as CoalesceRunHook
from dw_dagster.coalesce.sensor_builder import build_coalesce_polling_sensor as build_coalesce_polling_sensor
from dw_dagster.coalesce.specs import load_coalesce_asset_specs as load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceWorkspaceData as CoalesceWorkspaceData
from dw_dagster.coalesce.translator import DagsterCoalesceTranslator as DagsterCoalesceTranslator
