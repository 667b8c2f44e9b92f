"""Coalesce: the API client, its models, and the workspace resource."""

from dw_dagster.coalesce.client import CoalesceClient as CoalesceClient
from dw_dagster.coalesce.models import (
    CoalesceAPIError as CoalesceAPIError,
)
from dw_dagster.coalesce.models import (
    CoalesceConnectionError as CoalesceConnectionError,
)
from dw_dagster.coalesce.models import (
    CoalesceError as CoalesceError,
)
from dw_dagster.coalesce.models import (
    CoalesceResponseError as CoalesceResponseError,
)
from dw_dagster.coalesce.models import (
    CoalesceRunStatus as CoalesceRunStatus,
)
from dw_dagster.coalesce.models import (
    CoalesceRunTimeoutError as CoalesceRunTimeoutError,
)
from dw_dagster.coalesce.models import (
    CoalesceUserCredentials as CoalesceUserCredentials,
)
from dw_dagster.coalesce.models import (
    CoalesceWorkspaceData as CoalesceWorkspaceData,
)
from dw_dagster.coalesce.resources import (
    CoalesceCredentials as CoalesceCredentials,
)
from dw_dagster.coalesce.resources import (
    CoalesceWorkspace as CoalesceWorkspace,
)
