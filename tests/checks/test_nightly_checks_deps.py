"""The night's checks step depends on the checked assets a Dagster run can materialize, and only on those: a
run materializing a mirrored Coalesce job's node checks it after the build, and the external Coalesce
assets give the step no input, so building a checks run's job does not scan the op's check keys once per
checked asset (benchmarks/HISTORY.md, "2026-12-04 (tick)"). No world: the plans are built, not run."""

from __future__ import annotations

import dagster as dg
from dagster._core.execution.api import create_execution_plan

from dw_dagster.app.checks import build_check_definitions
from dw_dagster.checks.metrics import FreshnessMonitoring, InputFreshness, MetricsFile, VolumeMonitoring
from dw_dagster.checks.nightly import NIGHTLY_CHECKS
from dw_dagster.checks.volume import VOLUME_CHECK

BUILT = dg.AssetKey(["mart", "built"])  # a mirrored job's node
EXTERNAL = [dg.AssetKey(["mart", f"external_{i}"]) for i in range(3)]
SOURCE = dg.AssetKey(["raw", "orders"])  # the input of a freshness rule, external


def table(key: dg.AssetKey) -> dict:
    return {"dagster/table_name": f"DB.{key.path[0].upper()}.{key.path[-1].upper()}"}


@dg.multi_asset(specs=[dg.AssetSpec(BUILT, metadata=table(BUILT))], name="coalesce_job_nightly")
def mirrored_job():
    yield dg.MaterializeResult(asset_key=BUILT)


def definitions() -> tuple[dg.Definitions, dg.AssetsDefinition]:
    specs = [*mirrored_job.specs, *(dg.AssetSpec(k, metadata=table(k)) for k in [*EXTERNAL, SOURCE])]
    metrics = MetricsFile(
        volume=VolumeMonitoring(assets=["mart/*"]),
        freshness=FreshnessMonitoring(
            inputs=[
                InputFreshness(asset="mart/built", column="LOADED", input="raw/orders", input_column="AT"),
                InputFreshness(
                    asset="mart/external_0", column="LOADED", input="mart/built", input_column="AT"
                ),
            ]
        ),
    )
    checks = build_check_definitions(metrics, specs, lambda *_: None, "DB", {BUILT})
    (op,) = checks.asset_checks
    defs = dg.Definitions(
        assets=[mirrored_job, *(dg.AssetSpec(k) for k in [*EXTERNAL, SOURCE])],
        asset_checks=[op],
        resources={"snowflake": dg.ResourceDefinition.none_resource()},
    )
    return defs, op


def test_the_step_has_an_input_only_on_what_a_run_can_materialize():
    _, op = definitions()
    assert set(op.node_keys_by_input_name.values()) == {BUILT}
    assert len(op.check_keys) == 6  # a volume check on each mart asset, two freshness checks
    # The lineage is still every check's asset and the freshness rules' inputs.
    assert {s.asset_key for s in op.check_specs} == {BUILT, *EXTERNAL}
    assert {d.asset_key for s in op.check_specs for d in s.additional_deps} == {SOURCE, BUILT}


def test_a_run_building_a_mirrored_node_checks_it_after_the_build():
    defs, _ = definitions()
    job = defs.resolve_implicit_global_asset_job_def()
    check = dg.AssetCheckKey(BUILT, VOLUME_CHECK)
    plan = create_execution_plan(job.get_subset(asset_selection={BUILT}, asset_check_selection={check}))
    step = plan.get_step_by_key(NIGHTLY_CHECKS)
    assert step.get_execution_dependency_keys() == {"coalesce_job_nightly"}


def test_a_checks_only_run_of_external_assets_is_the_step_alone():
    defs, op = definitions()
    job = defs.resolve_implicit_global_asset_job_def()
    external = {k for k in op.check_keys if k.asset_key in EXTERNAL}
    plan = create_execution_plan(job.get_subset(asset_selection=set(), asset_check_selection=external))
    assert [s.key for s in plan.get_all_steps_in_topo_order()] == [NIGHTLY_CHECKS]
    assert plan.get_step_by_key(NIGHTLY_CHECKS).get_execution_dependency_keys() == set()
