"""``CoalesceComponent``: a Coalesce workspace as Dagster assets, declared in ``defs.yaml``.

.. code-block:: yaml

    # defs.yaml
    type: dw_dagster.coalesce.CoalesceComponent
    attributes:
      workspace:
        base_url: https://app.eu.coalescesoftware.io
        environment_ids: ["2"]
        api_token_env_var: COALESCE_API_TOKEN
      create_sensor: true
      materialize_jobs:
        - job: nightly_build
          run_as: {snowflake_username: TRANSFORM, snowflake_password_env_var: COALESCE_SNOWFLAKE_PASSWORD}

Loading reads the state kept by ``dg utils refresh-defs-state`` (the node graph, never the API). Every node
becomes an external asset; the nodes of a job named in ``materialize_jobs`` become one multi-asset that runs
that job when materialized.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import dagster as dg
import pydantic
from dagster.components.component.state_backed_component import StateBackedComponent
from dagster.components.utils.defs_state import DefsStateConfig, DefsStateConfigArgs
from dagster.components.utils.translation import (
    ComponentTranslator,
    TranslationFn,
    TranslationFnResolver,
    create_component_translator_cls,
)

from dw_dagster.coalesce.client import CoalesceNodePaging
from dw_dagster.coalesce.collector import collector_paused
from dw_dagster.coalesce.dagster_internals import DefsStateManagementType
from dw_dagster.coalesce.errors import CoalesceAttributeError, CoalesceConfigError, describe_validation_errors
from dw_dagster.coalesce.http_client import DEFAULT_REQUEST_BUDGET, MAX_RETRY_WAIT
from dw_dagster.coalesce.job_assets import CoalesceJobAssets, CoalesceRunAs, build_job_assets
from dw_dagster.coalesce.models import COALESCE_DEFAULT_BASE_URL
from dw_dagster.coalesce.previous_state import read_previous_state
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.coalesce.sensor_builder import build_coalesce_polling_sensor
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.state import REFRESH_HINT, CoalesceWorkspaceData
from dw_dagster.coalesce.translator import CoalesceNodeProps, DagsterCoalesceTranslator

logger = logging.getLogger(__name__)

CodeReference = dg.LocalFileCodeReference | dg.UrlCodeReference

# The code references of each component class's defs.yaml position this process loaded (a handful).
# (Dagster's ``SourcePosition`` is not public: the position is only passed through and hashed, so ``Any``.)
_YAML_CODE_REFERENCES: dict[tuple[type, Path, Any], tuple[CodeReference, ...]] = {}


class CoalesceWorkspaceArgs(dg.Model, dg.Resolvable):
    """How to reach the Coalesce workspace. The token is read from an environment variable at run time;
    its value never appears in the component, the UI or the logs."""

    # A template such as "{{ env.COALESCE_ENVIRONMENT_IDS }}" renders "2" as the number 2.
    model_config = pydantic.ConfigDict(coerce_numbers_to_str=True)

    # Bounds are checked by validators, after templates are rendered: Dagster's YAML model lets each field
    # also be a template string, and a ``gt`` constraint on that union fails on any string with a TypeError
    # that names no attribute.
    base_url: str = pydantic.Field(
        default=COALESCE_DEFAULT_BASE_URL,
        description="The Coalesce host, e.g. https://app.eu.coalescesoftware.io for the EU region.",
    )
    environment_ids: list[str] | str = pydantic.Field(
        default=[],
        description="The environments to load, as a list or comma-separated ('2' or '2,5').",
    )
    api_token_env_var: str = pydantic.Field(
        default="COALESCE_API_TOKEN",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The environment variable holding the access token (Coalesce's Deploy tab).",
    )
    org_id: str | None = pydantic.Field(
        default=None, description="The organization id (orgID), which cancelling a run needs."
    )
    request_timeout: float = pydantic.Field(default=30.0, description="Seconds, above 0.")
    request_max_retries: int = pydantic.Field(default=3, description="At least 0.")
    request_retry_delay: float = pydantic.Field(default=0.25, description="Seconds, at least 0.")
    request_budget: float = pydantic.Field(
        default=DEFAULT_REQUEST_BUDGET,
        description="Seconds one call may take, retries and waits included (above 0).",
    )
    max_retry_wait: float = pydantic.Field(
        default=MAX_RETRY_WAIT,
        description="The longest single wait before a retry, whatever Retry-After asks (seconds, above 0).",
    )
    job_ids: list[str] | str = pydantic.Field(
        default=[],
        description="Where Coalesce has no jobs listing (404): the ids of the jobs to read, as a list or "
        "comma-separated. Empty: the jobs the last refresh found, else probed by id.",
    )
    # No bounds here: a template ("{{ env(...) }}") is checked against them before it renders.
    # CoalesceNodePaging refuses values out of range, naming the attribute.
    node_page_size: int = pydantic.Field(
        default=CoalesceNodePaging.page_size, description="Detailed nodes a page (1-500)."
    )
    node_page_timeout: float = pydantic.Field(
        default=CoalesceNodePaging.timeout,
        description="Seconds one page of detailed nodes may take; a page that takes longer is asked again "
        "a tenth the size.",
    )
    node_page_retry_wait: float = pydantic.Field(
        default=CoalesceNodePaging.retry_wait,
        description="Seconds to wait after a page of detailed nodes timed out.",
    )

    @pydantic.field_validator("base_url")
    @classmethod
    def _coalesce_host(cls, value: str) -> str:
        return check_base_url(value)

    @pydantic.field_validator("environment_ids")
    @classmethod
    def _numeric_ids(cls, value: list[str] | str) -> list[str] | str:
        ids = value.split(",") if isinstance(value, str) else value
        wrong = [i.strip() for i in ids if i.strip() and not re.fullmatch(r"[0-9]+", i.strip())]
        if wrong:
            raise ValueError(
                f"expected Coalesce environment ids, the numbers in an environment's URL (e.g. '2' or '2,5'); "
                f"not ids: {wrong}"
            )
        return value

    @pydantic.field_validator("request_timeout", "request_budget", "max_retry_wait")
    @classmethod
    def _above_zero(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("expected a number of seconds above 0")
        return value

    @pydantic.field_validator("request_max_retries", "request_retry_delay")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"expected a number at least 0, got {value!r}")
        return value

    def ids(self) -> list[str]:
        return _id_list(self.environment_ids)

    def to_workspace(self) -> CoalesceWorkspace:
        # Refused at load, naming the attribute, rather than at the first refresh.
        CoalesceNodePaging(self.node_page_size, self.node_page_timeout, self.node_page_retry_wait)
        return CoalesceWorkspace(
            base_url=self.base_url.rstrip("/"),
            api_token=dg.EnvVar(self.api_token_env_var),
            environment_ids=self.ids(),
            org_id=self.org_id or None,
            request_timeout=self.request_timeout,
            request_max_retries=self.request_max_retries,
            request_retry_delay=self.request_retry_delay,
            request_budget=self.request_budget,
            max_retry_wait=self.max_retry_wait,
            job_ids=_id_list(self.job_ids),
            node_page_size=self.node_page_size,
            node_page_timeout=self.node_page_timeout,
            node_page_retry_wait=self.node_page_retry_wait,
        )


_LOOPBACK_NAMES = {"localhost"}


def check_base_url(value: str) -> str:
    """The Coalesce host as an https URL (http only for this machine: the token goes with every call)."""
    url = urlsplit(value.strip())
    host = url.hostname or ""
    if url.scheme not in ("https", "http") or not host:
        raise ValueError(f"expected the Coalesce host as an https URL, such as {COALESCE_DEFAULT_BASE_URL}")
    if url.scheme == "http" and not _is_loopback(host):
        raise ValueError(
            "expected https: the access token goes with every call (http is accepted for this machine only)"
        )
    if url.username or url.password or url.query or url.fragment:
        raise ValueError(
            "expected the scheme and host (and port) only, without credentials, query or fragment"
        )
    return value.strip()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host in _LOOPBACK_NAMES


def attribute_error(context: dg.ResolutionContext, problems: Sequence[str]) -> CoalesceAttributeError:
    """The error for ``problems`` (each ``<path under the context's attribute>: <what was wrong>``), naming
    the ``defs.yaml`` file and the line of each, with the first shown in its file."""
    tree = context.source_position_tree
    lines, snippet = [], ""
    for problem in problems:
        field, _, what = problem.partition(": ")
        path: list[str | int] = [*context.path, *(p for p in field.split(".") if p)]
        if tree is None:  # attributes given in Python rather than read from a file
            lines.append(f"{'.'.join(map(str, path))}: {what}")
            continue
        source = tree.source_error(yaml_path=path, inline_error_message=what, value_error=True)
        lines.append(f"{source.file_name}:{source.start_line_no}: {source.location}: {what}")
        snippet = snippet or source.snippet
    return CoalesceAttributeError("\n".join(lines) + (f"\n{snippet}" if snippet else ""))


def _id_list(ids: list[str] | str) -> list[str]:
    raw = ids.split(",") if isinstance(ids, str) else ids
    return [i.strip() for i in raw if i.strip()]


def _resolve_workspace(context: dg.ResolutionContext, model: Any) -> CoalesceWorkspace:
    resolved = context.resolve_value(model)
    if isinstance(resolved, CoalesceWorkspace):
        return resolved
    try:
        args: CoalesceWorkspaceArgs = CoalesceWorkspaceArgs.resolve_from_model(context, model)
    except pydantic.ValidationError as e:
        problems = [p.replace(": Value error, ", ": ", 1) for p in describe_validation_errors(e)]
        raise attribute_error(context, problems) from None
    return args.to_workspace()


class CoalesceDefsStateArgs(dg.Model, dg.Resolvable):
    """Where the Coalesce state is kept. Unlike Dagster's own ``defs_state``, ``management_type`` may be a
    template, so that one ``defs.yaml`` serves a deployment that refreshes at build and one that does not."""

    key: str | None = pydantic.Field(default=None, description="The state's key, unique per deployment.")
    management_type: str = pydantic.Field(
        default=DefsStateManagementType.VERSIONED_STATE_STORAGE.value,
        description="VERSIONED_STATE_STORAGE (in the instance, refreshed at any time), LOCAL_FILESYSTEM "
        "(beside the code, refreshed when the image is built) or LEGACY_CODE_SERVER_SNAPSHOTS.",
    )
    refresh_if_dev: bool = pydantic.Field(
        default=True, description="Refresh the state when `dagster dev` or `dg` loads the code location."
    )


def _resolve_defs_state(context: dg.ResolutionContext, model: Any) -> DefsStateConfigArgs:
    args = CoalesceDefsStateArgs.resolve_from_model(context, model)
    try:
        management_type = DefsStateManagementType(str(args.management_type).strip())
    except ValueError:
        expected = ", ".join(t.value for t in DefsStateManagementType)
        raise attribute_error(
            context, [f"management_type: expected one of {expected}, got {args.management_type!r}"]
        ) from None
    return DefsStateConfigArgs(
        key=args.key, management_type=management_type, refresh_if_dev=args.refresh_if_dev
    )


class CoalesceRunAsArgs(dg.Model, dg.Resolvable):
    """The Snowflake identity the runs Dagster starts use: a password (or programmatic access token)
    variable, or a private key variable and, for an encrypted key, its passphrase's; read when a run starts."""

    snowflake_username: str
    snowflake_password_env_var: str | None = pydantic.Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    snowflake_private_key_env_var: str | None = pydantic.Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"
    )
    snowflake_private_key_passphrase_env_var: str | None = pydantic.Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"
    )
    snowflake_warehouse: str | None = None
    snowflake_role: str | None = None


class CoalesceJobAssetsArgs(dg.Model, dg.Resolvable):
    """A Coalesce job whose nodes are materialized from Dagster by running the job."""

    job: str = pydantic.Field(description="The job's name in Coalesce.")
    run_as: CoalesceRunAsArgs


class CoalesceComponent(StateBackedComponent, dg.Model, dg.Resolvable):
    """A Coalesce workspace's environments as Dagster assets, one per node, in one lineage graph.

    Subclass it and override :meth:`get_asset_spec` to change keys, groups or metadata, or give a
    ``translation`` in YAML.
    """

    model_config = {"arbitrary_types_allowed": True}

    workspace: Annotated[
        CoalesceWorkspace,
        dg.Resolver(
            _resolve_workspace,
            model_field_type=CoalesceWorkspaceArgs.model(),
            description="The Coalesce host and environments.",
            examples=[{"base_url": COALESCE_DEFAULT_BASE_URL, "environment_ids": ["2"]}],
        ),
    ]
    translation: (
        Annotated[
            TranslationFn[CoalesceNodeProps],
            TranslationFnResolver(template_vars_for_translation_fn=lambda props: {"node": props.node}),
        ]
        | None
    ) = pydantic.Field(default=None, description="Attributes to set on the asset spec of each node.")
    create_sensor: bool = pydantic.Field(
        default=True,
        description="Add a polling sensor that reports each finished Coalesce run as materializations and "
        "observations.",
    )
    batch_run_events: bool = pydantic.Field(
        default=False,
        description="The run sensor stores each tick's materializations itself, in a few transactions, "
        "instead of returning them for the daemon to store one at a time (2,000 events: about 1 s instead of "
        "20-50 s). It writes Dagster's storage rows through Dagster's internals: only on Dagster's sqlite "
        "and dagster-postgres storages and the dagster release it was verified on; elsewhere a warning "
        "says it is off and the daemon stores them.",
    )
    materialize_jobs: list[CoalesceJobAssetsArgs] = pydantic.Field(
        default=[],
        description="Coalesce jobs whose nodes become materializable: materializing them runs the job.",
    )
    state_max_age_hours: float = pydantic.Field(
        default=24, gt=0, description="Older state loads with a warning saying how to refresh it."
    )
    defs_state: Annotated[
        DefsStateConfigArgs,
        dg.Resolver(
            _resolve_defs_state,
            model_field_type=CoalesceDefsStateArgs.model(),
            description="How the Coalesce state is stored and refreshed.",
        ),
    ] = DefsStateConfigArgs.versioned_state_storage()

    # What a layer built over the integration says about the nodes, set by :meth:`layer_specs`.
    _spec_layer: Callable[[list[dg.AssetSpec]], list[dg.AssetSpec]] | None = pydantic.PrivateAttr(
        default=None
    )

    def layer_specs(self, layer: Callable[[list[dg.AssetSpec]], list[dg.AssetSpec]]) -> None:
        """Passes the node specs through ``layer`` before they become assets, at each build from the state:
        for a layer over the integration that sets attributes on the nodes' specs (owners, freshness
        policies), set once on each spec as it is made. Set on the built assets instead, each change copies
        the assets definition of every node, 10,000 specs checked again."""
        self._spec_layer = layer

    @property
    def defs_state_config(self) -> DefsStateConfig:
        return DefsStateConfig.from_args(
            self.defs_state, default_key=f"CoalesceComponent[{self.workspace.unique_id}]"
        )

    @cached_property
    def translator(self) -> DagsterCoalesceTranslator:
        return CoalesceComponentTranslator(self)

    @classmethod
    def get_code_references_for_yaml(
        cls, yaml_path: Path, source_position: Any, context: dg.ComponentLoadContext
    ) -> Sequence[CodeReference]:
        """Dagster's own (the ``defs.yaml`` file and line), made once per file and line: Dagster's components
        ask for them once per asset spec, 10,000 times a load of 10,000 nodes, and each made anew is a beta
        record that warns. The references are immutable; Dagster copies them into each spec's own list."""
        key = (cls, yaml_path, source_position)
        found = _YAML_CODE_REFERENCES.get(key)
        if found is None:
            found = tuple(super().get_code_references_for_yaml(yaml_path, source_position, context))
            _YAML_CODE_REFERENCES[key] = found
        return found

    def get_asset_spec(self, props: CoalesceNodeProps) -> dg.AssetSpec:
        """The asset spec of one node; override to change it (the YAML ``translation`` applies after).
        Made with the component's translator, so each parent's key is the one its finished spec has."""
        return DagsterCoalesceTranslator.get_asset_spec(self.translator, props)

    async def write_state_to_path(self, state_path: Path) -> None:
        # Async, so that Dagster runs it on its event loop's thread rather than a worker thread: the
        # fetch is a few sequential calls, and resources initialized off-thread leave sqlite handles behind.
        if not self.workspace.environment_ids:
            raise CoalesceConfigError(
                "workspace.environment_ids: empty; name the Coalesce environments to load (for example "
                "COALESCE_ENVIRONMENT_IDS=2)"
            )
        previous = read_previous_state(self.defs_state_config.key, state_path)
        state_path.write_text(self.workspace.fetch_workspace_data(previous).serialize())

    def load_state(self, state_path: Path) -> CoalesceWorkspaceData:
        source = f"Coalesce state {self.defs_state_config.key}"
        data = CoalesceWorkspaceData.parse(state_path.read_bytes(), source)
        data.check_matches(source, self.workspace.base_url, self.workspace.environment_ids)
        if data.age_hours > self.state_max_age_hours:
            logger.warning("%s is %.0f hours old; %s", source, data.age_hours, REFRESH_HINT)
        return data

    def build_defs_from_state(
        self, context: dg.ComponentLoadContext, state_path: Path | None
    ) -> dg.Definitions:
        if state_path is None:
            logger.warning(
                "No Coalesce state for %s yet: no Coalesce assets loaded; %s",
                self.defs_state_config.key,
                REFRESH_HINT,
            )
            return dg.Definitions()
        with collector_paused():
            specs = load_coalesce_asset_specs(self.load_state(state_path), self.translator)
            if self._spec_layer is not None:
                specs = self._spec_layer(specs)
        jobs = self.job_assets(specs)
        sensors = []
        if self.create_sensor:
            sensors.append(
                build_coalesce_polling_sensor(
                    workspace=self.workspace, asset_specs=specs, batch_run_events=self.batch_run_events
                )
            )
        # The nodes no job materializes as one assets definition of external assets, which is what the
        # repository makes of loose specs anyway: Dagster's components then add the defs.yaml code references
        # to each spec with a plain copy, where a loose spec is rebuilt and checked again (a third of what
        # loading 10,000 nodes costs beyond bare Dagster's specs).
        external = [dg.AssetsDefinition(specs=jobs.external_specs)] if jobs.external_specs else []
        return dg.Definitions(assets=[*external, *jobs.assets_defs], sensors=sensors)

    def job_assets(self, specs: Sequence[dg.AssetSpec]) -> CoalesceJobAssets:
        return build_job_assets(
            self.workspace,
            specs,
            {j.job: CoalesceRunAs(**j.run_as.model_dump()) for j in self.materialize_jobs},
        )


# Dagster's way to let a component subclass's get_asset_spec reach the translator (as dagster-dbt's
# component does): a class made at run time, which mypy cannot take as a base.
class CoalesceComponentTranslator(
    create_component_translator_cls(CoalesceComponent, DagsterCoalesceTranslator),  # type: ignore[misc]
    ComponentTranslator[CoalesceComponent],
):
    """Applies a subclass's ``get_asset_spec``, then the YAML ``translation``."""

    def __init__(self, component: CoalesceComponent):
        self._component = component

    def get_asset_spec(self, props: CoalesceNodeProps) -> dg.AssetSpec:
        spec = super().get_asset_spec(props)
        translation = self._component.translation
        return spec if translation is None else translation(spec, props)
