"""The nightly checks as Dagster asset checks: one subsettable step, ``nightly_checks``, over the metrics file's
checks (``checks/nightly.py`` evaluates them), the job that runs them, and the assets with their freshness
policies."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import dagster as dg

from dw_dagster.app.reporting import checks_reporter
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.nightly import NIGHTLY_CHECKS, NightlyChecks
from dw_dagster.checks.recorded_totals import TableResolver
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.resources import WarehouseResource

CHECKS_JOB = "quality_checks"


def build_checks_job() -> dg.UnresolvedAssetJobDefinition:
    """The job of every check, whose runs each check a subset: what a Coalesce run built (the run sensor's
    requests) or what someone asked for. A named job rather than the implicit asset job: the UI shows a
    check-only selection as a Python repr and a run of it with no target, and this job by its name."""
    return dg.define_asset_job(
        CHECKS_JOB,
        selection=dg.AssetSelection.all_asset_checks(),
        description="The checks on the pipeline's assets; each run checks those one Coalesce run built "
        "(requested by coalesce_run_sensor) or those someone asked for.",
    )


def build_nightly_checks(
    nightly: NightlyChecks, executable: Collection[dg.AssetKey] = frozenset()
) -> list[dg.AssetChecksDefinition]:
    """``executable``: the assets a Dagster run can materialize (see :func:`_checks_op`)."""
    if not nightly.check_specs:
        return []

    @_checks_op(nightly.check_specs, executable)
    def nightly_checks(context, snowflake: WarehouseResource):
        store = IncidentStore(snowflake, nightly.ops, run_id=context.run.run_id)
        results, errors = nightly.evaluate(context, snowflake, checks_reporter(context, store))
        yield from results
        if errors:
            # Results not yielded are marked as failed executions: errored, never passed.
            raise dg.Failure(
                "checks could not be evaluated: " + "; ".join(errors),
                metadata={"errors": dg.MetadataValue.json(errors)},
            )

    return [nightly_checks]


def _checks_op(check_specs: Sequence[dg.AssetCheckSpec], executable: Collection[dg.AssetKey]):
    """What ``@dg.multi_asset_check(specs=check_specs, can_subset=True)`` builds, with an input only on the
    checked assets a Dagster run can materialize, so that a run materializing them checks them after.

    The decorator gives the op an input per checked asset, and Dagster's job build scans every check key of
    the op for each input (``build_node_deps``): quadratic, 1.3 s for 2,000 checks, paid by the code server
    at each checks run's job subset and execution plan (benchmarks/HISTORY.md, "2026-12-04 (tick)"). The
    Coalesce assets are external: an input on one orders nothing. The checks' lineage is their specs'."""
    deps = {k for s in check_specs for k in (s.asset_key, *(d.asset_key for d in s.additional_deps))}
    inputs = {k.to_python_identifier(): k for k in sorted(k for k in deps if k in executable)}

    def build(fn) -> dg.AssetChecksDefinition:
        op = dg.op(
            name=NIGHTLY_CHECKS,
            description="The metrics file's checks: one read of their history, one measurement, one write",
            ins={name: dg.In(dg.Nothing) for name in inputs},
            out={s.get_python_identifier(): dg.Out(None, is_required=False) for s in check_specs},
        )(fn)
        return dg.AssetChecksDefinition.create(
            keys_by_input_name=inputs,
            node_def=op,
            check_specs_by_output_name={s.get_python_identifier(): s for s in check_specs},
            can_subset=True,
        )

    return build


def cause_scopes(specs: Sequence[dg.AssetSpec]) -> dict[str, str]:
    """By default a night's findings share a cause when one Coalesce job built their assets."""
    out = {}
    for spec in specs:
        jobs = spec.metadata.get("coalesce/jobs")
        names = [j["name"] for j in jobs.data] if jobs is not None else []  # type: ignore[union-attr]
        if names:
            out[spec.key.to_user_string()] = f"job:{names[0]}"
    return out


def build_check_definitions(
    metrics: MetricsFile,
    specs: Sequence[dg.AssetSpec],
    resolve_table: TableResolver,
    database: str,
    executable: Collection[dg.AssetKey] = frozenset(),
) -> dg.Definitions:
    """The assets, and every configured check on them (one step). ``specs``: the assets as the operations
    layer made them (``OperationsComponent.pipeline_specs``: freshness policies set, which the checks do not
    set again). ``executable``: the assets a Dagster run can materialize, which the checks then run after."""
    nightly = NightlyChecks(metrics, specs, resolve_table, cause_scopes(specs), database)
    checks = build_nightly_checks(nightly, executable)
    return dg.Definitions(assets=list(specs), asset_checks=checks)
