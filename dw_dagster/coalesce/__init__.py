"""Coalesce: the API client, its models, and the workspace resource."""

from dw_dagster.coalesce.client import CoalesceClient as CoalesceClient
from dw_dagster.coalesce.models import (
    CoalesceAPIError as CoalesceAPIError,
    CoalesceConnectionError as CoalesceConnectionError,
    CoalesceError as CoalesceError,
    CoalesceResponseError as CoalesceResponseError,
    CoalesceRunStatus as CoalesceRunStatus,
    CoalesceRunTimeoutError as CoalesceRunTimeoutError,
    CoalesceUserCredentials as CoalesceUserCredentials,
    CoalesceWorkspaceData as CoalesceWorkspaceData,
)
from dw_dagster.coalesce.resources import (
    CoalesceCredentials as CoalesceCredentials,
    CoalesceWorkspace as CoalesceWorkspace,
)
