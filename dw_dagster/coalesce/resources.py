"""The Coalesce workspace resource: the configured client, and a snapshot of the environments it loads."""

import logging
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from dagster import Config, ConfigurableResource, EnvVar, get_dagster_logger
from pydantic import Field

from dw_dagster.coalesce.client import CoalesceClient, CoalesceNodePaging
from dw_dagster.coalesce.dagster_internals import cached_method
from dw_dagster.coalesce.errors import CoalesceConfigError
from dw_dagster.coalesce.http_client import DEFAULT_REQUEST_BUDGET, MAX_RETRY_WAIT
from dw_dagster.coalesce.job_discovery import find_jobs
from dw_dagster.coalesce.models import COALESCE_DEFAULT_BASE_URL, CoalesceUserCredentials
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData


def _env_value(value: Any, field: str) -> Any:
    if not isinstance(value, EnvVar):
        return value
    resolved = value.get_value()
    if resolved is None:
        raise CoalesceConfigError(f"{value.env_var_name}: not set (the workspace's {field})")
    return resolved


class CoalesceCredentials(Config):
    """The Snowflake credentials one owner's Coalesce runs are started with.

    Reruns run under the permissions of the owner who approved them, so each owner has their own.
    Give the secrets as environment variables, e.g.
    ``snowflake_password=dg.EnvVar("COALESCE_SNOWFLAKE_PASSWORD_ANALYTICS")``.
    """

    snowflake_username: str = Field(description="The Snowflake user.")
    snowflake_auth_type: str = Field(
        default="Basic", description="How Coalesce signs in to Snowflake: Basic, KeyPair or OAuth."
    )
    snowflake_password: str | None = Field(
        default=None, repr=False, description="The Snowflake password (Basic)."
    )
    snowflake_key_pair_key: str | None = Field(
        default=None, repr=False, description="The PEM private key (KeyPair)."
    )
    snowflake_key_pair_pass: str | None = Field(
        default=None, repr=False, description="The private key's passphrase, if any (KeyPair)."
    )
    snowflake_warehouse: str | None = Field(default=None, description="The Snowflake warehouse.")
    snowflake_role: str | None = Field(default=None, description="The Snowflake role.")

    def to_user_credentials(self) -> CoalesceUserCredentials:
        return CoalesceUserCredentials(
            snowflake_username=self.snowflake_username,
            snowflake_password=self.snowflake_password,
            snowflake_key_pair_key=self.snowflake_key_pair_key,
            snowflake_key_pair_pass=self.snowflake_key_pair_pass,
            snowflake_warehouse=self.snowflake_warehouse,
            snowflake_role=self.snowflake_role,
            snowflake_auth_type=self.snowflake_auth_type,
        )


# ConfigurableResource is generic in the value a resource yields, which for this one is itself; subscripting
# it at run time would make pydantic build a parametrized subclass, so it stays bare, as Dagster's own are.
class CoalesceWorkspace(ConfigurableResource):  # type: ignore[type-arg]
    """A Coalesce host, the token to reach it, and the environments to load from it.

    Examples:
        .. code-block:: python

            import dagster as dg
            from dw_dagster.coalesce import CoalesceCredentials, CoalesceWorkspace

            coalesce = CoalesceWorkspace(
                base_url="https://app.eu.coalescesoftware.io",
                api_token=dg.EnvVar("COALESCE_API_TOKEN"),
                environment_ids=["2"],
                owner_credentials={
                    "analytics-eng": CoalesceCredentials(
                        snowflake_username="ANALYTICS_ENG",
                        snowflake_password=dg.EnvVar("COALESCE_SNOWFLAKE_PASSWORD_ANALYTICS"),
                        snowflake_warehouse="TRANSFORM_WH",
                        snowflake_role="ANALYTICS_ENG",
                    )
                },
            )
            client = coalesce.get_client()
            run_id = client.start_run(
                "2",
                include_selector="{FCT_DAILY_TOTALS}+",
                user_credentials=coalesce.user_credentials_for("analytics-eng"),
            )
    """

    base_url: str = Field(
        default=COALESCE_DEFAULT_BASE_URL,
        description=("The Coalesce host, e.g. https://app.eu.coalescesoftware.io for the EU region."),
    )
    api_token: str = Field(
        repr=False,
        description="The Coalesce access token, from the Deploy tab (use an environment variable).",
    )
    environment_ids: list[str] = Field(
        description="The ids of the Coalesce environments to load (e.g. PROD's)."
    )
    request_timeout: float = Field(
        default=30.0,
        description="Time (in seconds) after which a request to Coalesce is declared timed out.",
    )
    request_max_retries: int = Field(
        default=3,
        description=(
            "The maximum number of times a request to Coalesce is retried (connection failures, "
            "timeouts, 429, 500, 502, 503, 504) before failing."
        ),
    )
    request_retry_delay: float = Field(
        default=0.25,
        description="Time (in seconds) to wait before the first retry; a 429's Retry-After wins.",
    )
    request_backoff_factor: float = Field(
        default=2.0,
        description="Multiplier applied to the delay at each further retry.",
    )
    request_budget: float = Field(
        default=DEFAULT_REQUEST_BUDGET,
        description=(
            "Seconds one call to Coalesce may take, its retries and their waits included; the default keeps "
            "a sensor tick well inside the daemon's 60 s."
        ),
    )
    max_retry_wait: float = Field(
        default=MAX_RETRY_WAIT,
        description="The longest single wait before a retry, whatever a 429's Retry-After asks.",
    )
    owner_credentials: dict[str, CoalesceCredentials] = Field(
        default={},
        description="The Snowflake credentials to start runs with, by owner.",
    )
    org_id: str | None = Field(
        default=None,
        description=(
            "The Coalesce organization id (orgID), which cancelling a run needs: without it a Dagster run "
            "that is stopped while it waits on a Coalesce run leaves that run going."
        ),
    )
    job_ids: list[str] = Field(
        default=[],
        description=(
            "The ids of the jobs to read, by id, where Coalesce has no jobs listing (404). Empty: the jobs "
            "the last refresh found, else probed by id as Coalesce's Transform MCP server does."
        ),
    )
    node_page_size: int = Field(
        default=CoalesceNodePaging.page_size,
        description="Detailed nodes a page (1-500); 200 as Coalesce's own Catalog extractor.",
    )
    node_page_timeout: float = Field(
        default=CoalesceNodePaging.timeout,
        description=(
            "Seconds one page of detailed nodes may take (the extractor's 4 minutes); on a timeout the page "
            "is asked again a tenth the size."
        ),
    )
    node_page_retry_wait: float = Field(
        default=CoalesceNodePaging.retry_wait,
        description="Seconds to wait after a page of detailed nodes timed out (the extractor's 5 minutes).",
    )

    @property
    def unique_id(self) -> str:
        """The host and environments: what the workspace's cached state is keyed by."""
        return f"{self.base_url.rstrip('/')}|{','.join(self.environment_ids)}"

    @cached_property
    def _log(self) -> logging.Logger:
        return get_dagster_logger()

    @cached_method
    def get_client(self) -> CoalesceClient:
        """The workspace's client, made once; see :meth:`new_client` for one to close after use."""
        return self.new_client()

    def new_client(self, in_sensor_tick: bool = False) -> CoalesceClient:
        """A new client (a context manager) for this host and token. A workspace handed to a sensor builder
        is not resolved by Dagster: its EnvVars are read here, so the token is the variable's value and
        never its name. ``in_sensor_tick``: a page of detailed nodes gets the ordinary ``request_budget``,
        not the minutes a refresh allows, and a slow one is asked again smaller at once."""
        resolved = self._resolved()
        return CoalesceClient(
            api_token=resolved.api_token,
            base_url=resolved.base_url,
            request_timeout=resolved.request_timeout,
            request_max_retries=resolved.request_max_retries,
            request_retry_delay=resolved.request_retry_delay,
            request_backoff_factor=resolved.request_backoff_factor,
            request_budget=resolved.request_budget,
            max_retry_wait=resolved.max_retry_wait,
            node_paging=CoalesceNodePaging(
                page_size=resolved.node_page_size,
                timeout=(
                    min(resolved.node_page_timeout, resolved.request_budget)
                    if in_sensor_tick
                    else resolved.node_page_timeout
                ),
                retry_wait=0 if in_sensor_tick else resolved.node_page_retry_wait,
            ),
            org_id=resolved.org_id,
        )

    @cached_method
    def _resolved(self) -> "CoalesceWorkspace":
        """A copy with each ``EnvVar`` replaced by the variable's value, read now. Dagster does this for a
        resource it initializes for a run; a sensor or a command uses the workspace directly, and Dagster's
        own way (``process_config_and_initialize``) opens an ephemeral instance, a second or more per tick."""
        # Each value has its field's type: a field's value, or the variable's for an EnvVar.
        credentials = {
            owner: type(c)(
                **{
                    name: _env_value(getattr(c, name), f"owner_credentials.{owner}.{name}")
                    for name in type(c).model_fields
                }
            )
            for owner, c in self.owner_credentials.items()
        }
        fields: dict[str, Any] = {
            name: _env_value(getattr(self, name), name) for name in type(self).model_fields
        }
        return type(self)(**{**fields, "owner_credentials": credentials})

    def user_credentials_for(self, owner: str) -> CoalesceUserCredentials:
        """The credentials to start a run with on behalf of ``owner``."""
        credentials = self._resolved().owner_credentials
        if owner not in credentials:
            raise KeyError(
                f"No Coalesce run credentials for owner {owner!r}; configured owners: {sorted(credentials)}"
            )
        return credentials[owner].to_user_credentials()

    def fetch_workspace_data(self, previous: CoalesceWorkspaceData | None = None) -> CoalesceWorkspaceData:
        """Reads each configured environment with its nodes (full detail) and its jobs. Each call asks
        Coalesce afresh.

        Args:
            previous (Optional[CoalesceWorkspaceData]): The last state read from this host: where Coalesce
                has no jobs listing, the jobs it found are read again by id instead of probing from id 1
                (:mod:`~dw_dagster.coalesce.job_discovery`).
        """
        client = self.get_client()
        resolved = self._resolved()
        fetched_at = datetime.now(UTC)
        known: dict[str, list[str]] = {}
        if previous is not None and previous.base_url.rstrip("/") == resolved.base_url.rstrip("/"):
            known = {e.environment.id: [j.id for j in e.jobs] for e in previous.environments}
        environments = []
        for environment_id in resolved.environment_ids:
            environment = client.get_environment(environment_id)
            nodes = client.list_nodes(environment_id, detail=True)
            jobs, found_by = find_jobs(
                client, environment_id, resolved.job_ids, known.get(environment_id, []), self._log
            )
            self._log.info(
                f"Read Coalesce environment {environment.name} ({environment_id}): "
                f"{len(nodes)} nodes, {len(jobs)} jobs (found by {found_by.replace('_', ' ')})."
            )
            environments.append(
                CoalesceEnvironmentData(
                    environment=environment, nodes=nodes, jobs=jobs, jobs_found_by=found_by
                )
            )
        return CoalesceWorkspaceData(
            base_url=resolved.base_url, fetched_at=fetched_at, environments=environments
        )
