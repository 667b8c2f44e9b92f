"""``OperationsComponent``: dw-dagster's own layer over the Coalesce component, declared in ``defs.yaml``.

.. code-block:: yaml

    # dw_dagster/app/defs/operations/defs.yaml
    type: dw_dagster.app.components.OperationsComponent
    attributes:
      coalesce: coalesce                         # the CoalesceComponent's folder under dw_dagster/app/defs
      context_file: "{{ env.DW_CONTEXT_FILE }}"  # teams, the systems around the pipeline, autonomy
      metrics_file: "{{ env.DW_METRICS_FILE }}"  # recorded totals, volume and freshness

It reads the Coalesce component's assets and layers on them: the systems around the pipeline (from the
context file), the checks from the metrics file, incidents and their diagnosis, remediation, and the run
sensor, built with the integration's polling sensor builder and the product's hook
(:mod:`dw_dagster.app.coalesce_runs`). What it says about the Coalesce assets themselves (owners, the systems
that feed them, freshness policies) is set on their specs as the Coalesce component makes them
(:meth:`OperationsComponent.layer_over`, which the code location, :mod:`dw_dagster.app.definitions`, calls
before building the component tree). Secrets stay in
environment variables, read through ``dg.EnvVar`` by the resources.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path

import dagster as dg
import pydantic

from dw_dagster.app.checks import build_check_definitions, build_checks_job
from dw_dagster.app.coalesce_runs import build_run_hook
from dw_dagster.app.cost import build_cost_definitions
from dw_dagster.app.incidents import build_incident_definitions
from dw_dagster.app.references import check_references
from dw_dagster.checks import load_metrics_file
from dw_dagster.checks.freshness import freshness_policies
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.component import CoalesceComponent
from dw_dagster.coalesce.metadata import CoalesceMetadataSet, is_coalesce_spec
from dw_dagster.coalesce.sensor_builder import build_coalesce_polling_sensor
from dw_dagster.coalesce.state import REFRESH_HINT
from dw_dagster.config import DwConfigError, load_yaml_documents
from dw_dagster.context.models import ContextFile, load_context_file
from dw_dagster.context.specs import attach_context, build_context_asset_specs
from dw_dagster.notifications.incident_asset import INCIDENTS_KEY
from dw_dagster.notifications.resources import slack_from_env
from dw_dagster.sql import table_parts, table_reference
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import warehouse_from_env

RUN_SENSOR_NAME = "coalesce_run_sensor"

incidents_spec = dg.AssetSpec(
    key=INCIDENTS_KEY,
    description="Open and resolved incidents, one per cause. Each materialization is one incident's latest state.",
    group_name="dw_operations",
    kinds={"snowflake"},
)


def check_defs_files(folder: Path) -> None:
    """What Dagster's loader lets through in the ``defs.yaml`` files under ``folder``, refused naming the
    file: a key given twice in a mapping (Dagster keeps the last one, so a second ``base_url`` would quietly
    replace the first) and a ``type`` that names no component (Dagster's error names neither the file nor the
    field). The attributes themselves are checked by each component's model as Dagster loads it."""
    for path in sorted(folder.rglob("defs.yaml")):
        for i, document in enumerate(load_yaml_documents(path.read_text(), path)):
            where = f"{path}: document {i + 1}: " if i else f"{path}: "
            if not isinstance(document, dict) or "type" not in document:
                continue  # Dagster says what a component declaration needs
            if problem := _component_type_problem(str(document["type"])):
                raise DwConfigError(f"{where}type: {problem}")


def _component_type_problem(name: str) -> str | None:
    """Why ``name`` (``package.module.Class``) is not a component class, or None."""
    import importlib

    module_name, _, attribute = name.rpartition(".")
    if not module_name:
        return f"expected a component class as package.module.Class, got {name!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        return f"no component {name!r}: module {module_name!r} cannot be imported ({e})"
    found = getattr(module, attribute, None)
    if found is None:
        known = [n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, dg.Component)]
        near = difflib.get_close_matches(attribute, known, n=1)
        hint = f"; did you mean {module_name}.{near[0]}?" if near else f"; its components: {sorted(known)}"
        return f"no component {name!r}: module {module_name!r} has no {attribute!r}{hint}"
    if not (isinstance(found, type) and issubclass(found, dg.Component)):
        return f"{name!r} is not a component class (a dg.Component subclass)"
    return None


def ref_resolver(specs: Sequence[dg.AssetSpec]) -> Callable[[str, str], str]:
    """Resolves ``{{ ref('LOCATION', 'NAME') }}`` to the node's fully quoted table, as Coalesce does, from
    the specs' ``coalesce/location``, ``coalesce/node_name`` and ``dagster/table_name``. The tables are
    indexed at the first ``ref()`` resolved: a code location whose SQL names none never reads the specs."""

    @functools.cache
    def tables() -> dict[tuple[str, str], str]:
        found = {}
        for spec in specs:
            if not is_coalesce_spec(spec):
                continue
            # Two fields of the set read, not the whole set built: one spec per node of the workspace.
            location = CoalesceMetadataSet.read(spec.metadata, "location")
            name = CoalesceMetadataSet.read(spec.metadata, "node_name")
            parts = table_parts(spec.metadata.get("dagster/table_name"))
            if parts is not None and location is not None and name is not None:
                found[(location, name)] = table_reference(*parts)
        return found

    def resolve(location: str, name: str) -> str:
        table = tables().get((location, name))
        if table is None:
            raise ValueError(f"ref('{location}', '{name}'): no such Coalesce node in the workspace")
        return table

    return resolve


def asset_specs_of(defs: dg.Definitions) -> list[dg.AssetSpec]:
    """Every asset spec of ``defs``: the external ones and those of its multi-assets."""
    out: list[dg.AssetSpec] = []
    for asset in defs.assets or []:
        if isinstance(asset, dg.AssetSpec):
            out.append(asset)
        elif isinstance(asset, dg.AssetsDefinition):
            out.extend(asset.specs)
    return out


def executable_keys(defs: dg.Definitions) -> set[dg.AssetKey]:
    """The assets of ``defs`` that a Dagster run can materialize (the mirrored Coalesce jobs' nodes)."""
    return {
        key
        for asset in defs.assets or []
        if isinstance(asset, dg.AssetsDefinition) and asset.is_executable
        for key in asset.keys
    }


class OperationsComponent(dg.Component, dg.Model, dg.Resolvable):
    """Checks, incidents, diagnosis and remediation over the assets of a Coalesce component."""

    coalesce: str = pydantic.Field(
        default="coalesce",
        description="The folder of the CoalesceComponent whose assets this component watches, relative to "
        "this component's folder.",
    )
    context_file: str | None = pydantic.Field(
        default=None,
        description="The context file: teams, the systems around the pipeline, autonomy, reference tables. "
        "Without it nobody is alerted and nothing is proposed.",
    )
    metrics_file: str | None = pydantic.Field(
        default=None,
        description="The metrics file: recorded totals, volume and freshness. Without it the run sensor "
        "still reports runs; only the checks are missing.",
    )

    # The Coalesce component this component's layer is set on (layer_over), before the tree builds it.
    _layered: CoalesceComponent | None = pydantic.PrivateAttr(default=None)

    def layer_over(self, coalesce: CoalesceComponent) -> None:
        """Has ``coalesce`` make its node specs as :meth:`pipeline_specs` says, before the component tree
        builds it: each spec is made once with its owners, feeding systems and freshness policy. The code
        location (:mod:`dw_dagster.app.definitions`) calls it before building the tree. Set on the built
        assets instead, it copied the assets definition of every node again (0.14 s of CPU at 10,000 nodes)."""
        coalesce.layer_specs(self.pipeline_specs)
        self._layered = coalesce

    def pipeline_specs(self, specs: Sequence[dg.AssetSpec]) -> list[dg.AssetSpec]:
        """The Coalesce assets' specs as dw-dagster shows them: with their owners and the systems feeding
        them (context file) and the freshness policy of the job that builds them (metrics file)."""
        pipeline = [s for s in specs if is_coalesce_spec(s)]
        policies = freshness_policies(self._metrics, pipeline)
        try:
            layered = {s.key: s for s in attach_context(pipeline, self._context, policies)}
        except DwConfigError as e:
            raise DwConfigError(f"{self.context_file}: {e}") from e
        return [layered.get(s.key, s) for s in specs]

    def files_read(self) -> list[Path]:
        """The context and metrics files this component reads, those it names."""
        return [Path(f) for f in (self.context_file, self.metrics_file) if f]

    @cached_property
    def _context(self) -> ContextFile | None:
        return load_context_file(Path(self.context_file)) if self.context_file else None

    @cached_property
    def _metrics(self) -> MetricsFile:
        metrics = load_metrics_file(Path(self.metrics_file)) if self.metrics_file else MetricsFile()
        # The business's country (the context file's) gives the calendar its holidays where it names none.
        return metrics.with_country(self._context.country) if self._context is not None else metrics

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        coalesce = context.load_component(self.coalesce, CoalesceComponent)
        if self._layered is not coalesce:
            raise dg.DagsterInvariantViolationError(
                f"{context.defs_module_path / self.coalesce / 'defs.yaml'}: the Coalesce component was built "
                "without the operations layer (owners, feeding systems, freshness policies); load the code "
                "location from dw_dagster.definitions, which sets it"
            )
        if coalesce.create_sensor:
            raise DwConfigError(
                f"{context.defs_module_path / self.coalesce / 'defs.yaml'}: attributes.create_sensor: expected "
                "false; the operations component builds the run sensor itself, with the hook that records "
                "failed runs and requests their checks"
            )
        coalesce_defs = context.build_defs(self.coalesce)
        specs = asset_specs_of(coalesce_defs)
        if not any(is_coalesce_spec(s) for s in specs) and (self.context_file or self.metrics_file):
            # The context and metrics files name Coalesce assets: say why there are none.
            raise DwConfigError(
                f"{context.defs_module_path / self.coalesce / 'defs.yaml'}: no Coalesce assets loaded: no state "
                f"yet for {coalesce.defs_state_config.key}; {REFRESH_HINT}"
            )
        # The Coalesce specs as the layer made them (layer_over).
        pipeline = [s for s in specs if is_coalesce_spec(s)]
        ctx, metrics = self._context, self._metrics
        systems = build_context_asset_specs(ctx) if ctx is not None else []
        resolve = ref_resolver(specs)
        # What the two files say about the graph must resolve: a misspelt asset is a check that never runs.
        check_references(
            [*pipeline, *systems],
            context=ctx,
            context_path=self.context_file,
            metrics=metrics,
            metrics_path=self.metrics_file,
            resolve_table=resolve,
        )
        warehouse = warehouse_from_env()
        resources = {"snowflake": warehouse, "slack": slack_from_env(), "coalesce": coalesce.workspace}
        defs = dg.Definitions(
            assets=[*systems, incidents_spec],
            resources=resources,
            # Checks and diagnosis push their work down to Snowflake: one process per run, not per step,
            # saves seconds of start-up on every night's checks run.
            executor=dg.in_process_executor,
        )
        # Checks and incidents live in the warehouse: without a database, the assets only.
        if not warehouse.database:
            return defs
        ops = OpsSchema(warehouse.database, metrics.ops_schema)
        checks = build_check_definitions(
            metrics, pipeline, resolve, ops.database, executable_keys(coalesce_defs)
        )
        checks_job = build_checks_job()
        sensor = build_coalesce_polling_sensor(
            workspace=coalesce.workspace,
            asset_specs=specs,
            on_run_finished=build_run_hook(metrics.business_day, warehouse, ops, coalesce.workspace, ctx),
            name=RUN_SENSOR_NAME,
            # The hook requests runs of the checks job, each for the checks of what one Coalesce run built.
            target=checks_job,
            batch_run_events=coalesce.batch_run_events,
        )
        # Diagnosis walks the whole graph: the Coalesce assets and the systems around them.
        incidents = build_incident_definitions([*pipeline, *systems], metrics, resolve, ops, ctx, resources)
        return dg.Definitions.merge(
            defs,
            dg.Definitions(asset_checks=checks.asset_checks, jobs=[checks_job], sensors=[sensor]),
            incidents,
            build_cost_definitions(pipeline, metrics, ops, resources),
        )
