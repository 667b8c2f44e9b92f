"""Coalesce jobs materializable from Dagster (the component's ``materialize_jobs``), against the simulator and
the local Snowflake over sockets: materializing a job's nodes runs that job in Coalesce and reports what it
built, once; a node of the job that the run did not build is not reported built; a failed run fails the
step naming its node; the polling sensor does not report the same Coalesce run a second time; and the run
signs in to Snowflake with the identity it runs as, a key pair included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from dw_dagster.coalesce import CoalesceWorkspace
from dw_dagster.coalesce.job_assets import CoalesceRunAs, build_job_assets
from dw_dagster.coalesce.metadata import CoalesceRunMetadataSet
from dw_dagster.coalesce.sensor_builder import build_coalesce_polling_sensor
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_local import snowflake_auth
from dw_local.world import LOCAL_COALESCE_TOKEN, LOCAL_SNOWFLAKE_PASSWORD, LocalWorld

FIXTURE_PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "sim_project.yaml"
# customers_nightly (job 1) builds these three; sales_nightly (job 2) fails: RAW.ORDERS is never loaded here.
CUSTOMERS = {"stage/stg_calendar", "stage/stg_customers", "mart/dim_customer"}
RUN_CONFIG = {"config": {"poll_seconds": 0.2, "timeout_seconds": 120}}
PASSWORD_VAR = "DW_TEST_COALESCE_RUN_PASSWORD"
KEY_VAR = "DW_TEST_COALESCE_RUN_KEY"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorld]:
    root = tmp_path_factory.mktemp("job_assets") / "local"
    with LocalWorld(root, project_file=FIXTURE_PROJECT, services=("snowflake", "coalesce")) as lw:
        yield lw


@pytest.fixture(scope="module")
def workspace(world: LocalWorld) -> CoalesceWorkspace:
    return CoalesceWorkspace(
        base_url=world.coalesce_url, api_token=LOCAL_COALESCE_TOKEN, environment_ids=["2"]
    )


@pytest.fixture(scope="module")
def specs(workspace: CoalesceWorkspace) -> list[dg.AssetSpec]:
    return load_coalesce_asset_specs(workspace.fetch_workspace_data())


@pytest.fixture
def run_as(monkeypatch: pytest.MonkeyPatch) -> CoalesceRunAs:
    monkeypatch.setenv(PASSWORD_VAR, LOCAL_SNOWFLAKE_PASSWORD)
    return CoalesceRunAs(snowflake_username="TRANSFORM", snowflake_password_env_var=PASSWORD_VAR)


def _materialized(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetMaterialization]:
    events = [e.step_materialization_data.materialization for e in result.get_asset_materialization_events()]
    return {m.asset_key.to_user_string(): m for m in events}


def test_only_the_named_jobs_nodes_become_materializable(workspace, specs, run_as):
    jobs = build_job_assets(workspace, specs, {"customers_nightly": run_as})
    (assets_def,) = jobs.assets_defs
    assert {k.to_user_string() for k in assets_def.keys} == CUSTOMERS
    assert {s.key.to_user_string() for s in jobs.external_specs} == {
        s.key.to_user_string() for s in specs
    } - CUSTOMERS


def _tick(sensor: dg.SensorDefinition, defs: dg.Definitions, instance, cursor: str | None) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, repository_def=defs.get_repository_def()
    ) as ctx:
        result = sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    for event in result.asset_events:  # returned: the tick's own store is off unless configured
        instance.report_runless_asset_event(event)
    return result


def test_materializing_runs_the_job_and_the_sensor_does_not_report_its_run_again(workspace, specs, run_as):
    jobs = build_job_assets(workspace, specs, {"customers_nightly": run_as})
    (assets_def,) = jobs.assets_defs
    sensor = build_coalesce_polling_sensor(workspace=workspace, asset_specs=specs)
    defs = dg.Definitions(assets=[*jobs.external_specs, assets_def], sensors=[sensor])
    with dg.instance_for_test() as instance:
        cursor = _tick(sensor, defs, instance, None).cursor  # the first tick starts at the present
        result = dg.materialize(
            [assets_def], instance=instance, run_config={"ops": {assets_def.op.name: RUN_CONFIG}}
        )
        assert result.success
        built = _materialized(result)
        assert set(built) == CUSTOMERS
        runs = {CoalesceRunMetadataSet.extract(m.metadata).run_id for m in built.values()}
        assert len(runs) == 1 and None not in runs
        # The polling sensor sees that same Coalesce run finish: it was reported by the step already.
        _tick(sensor, defs, instance, cursor)
        for key in CUSTOMERS:
            records = instance.fetch_materializations(dg.AssetKey.from_user_string(key), limit=10).records
            assert len(records) == 1, f"{key} reported {len(records)} times"


def test_a_node_the_run_did_not_build_is_not_reported_built(workspace, specs, run_as):
    # The state says the job also builds STG_ORDERS (a refresh older than the job's last edit): its run
    # does not build it, and the step says so instead of failing on an output it never had.
    stale = [
        s.replace_attributes(
            metadata={
                **s.metadata,
                "coalesce/jobs": dg.MetadataValue.json([{"id": "1", "name": "customers_nightly"}]),
            }
        )
        if s.key.to_user_string() == "stage/stg_orders"
        else s
        for s in specs
    ]
    (assets_def,) = build_job_assets(workspace, stale, {"customers_nightly": run_as}).assets_defs
    assert "stage/stg_orders" in {k.to_user_string() for k in assets_def.keys}
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [assets_def], instance=instance, run_config={"ops": {assets_def.op.name: RUN_CONFIG}}
        )
        assert result.success
        assert set(_materialized(result)) == CUSTOMERS
        assert instance.get_latest_materialization_event(dg.AssetKey(["stage", "stg_orders"])) is None


def test_a_failed_run_fails_the_step_naming_its_node(workspace, specs, run_as):
    (assets_def,) = build_job_assets(workspace, specs, {"sales_nightly": run_as}).assets_defs
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [assets_def],
            instance=instance,
            run_config={"ops": {assets_def.op.name: RUN_CONFIG}},
            raise_on_error=False,
        )
        assert not result.success
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        message = (
            failure.step_failure_data.error.cause.message
            if failure.step_failure_data.error.cause
            else failure.step_failure_data.error.message
        )
        assert "STG_ORDERS" in message and "failed" in message


def test_a_password_variable_that_is_not_set_fails_before_any_run_starts(workspace, specs, monkeypatch):
    monkeypatch.delenv(PASSWORD_VAR, raising=False)
    run_as = CoalesceRunAs(snowflake_username="TRANSFORM", snowflake_password_env_var=PASSWORD_VAR)
    (assets_def,) = build_job_assets(workspace, specs, {"customers_nightly": run_as}).assets_defs
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [assets_def],
            instance=instance,
            run_config={"ops": {assets_def.op.name: RUN_CONFIG}},
            raise_on_error=False,
        )
        assert not result.success
        assert PASSWORD_VAR in str(
            [e.step_failure_data.error for e in result.all_events if e.is_step_failure]
        )


def test_a_run_as_by_key_pair_signs_the_coalesce_run_in_with_that_key(
    workspace, specs, world, tmp_path, monkeypatch
):
    """The run's credentials reach Snowflake: a user who may sign in by key pair only builds the job with
    its key, and the run of one whose key Snowflake does not hold fails the step with Snowflake's refusal."""
    key = tmp_path / "job.p8"
    snowflake_auth.register_user(
        world.root / "snowflake", "JOB_RUNNER", ["KEYPAIR"], public_key_pem=snowflake_auth.new_key_pair(key)
    )
    monkeypatch.setenv(KEY_VAR, key.read_text())
    run_as = CoalesceRunAs(snowflake_username="JOB_RUNNER", snowflake_private_key_env_var=KEY_VAR)
    (assets_def,) = build_job_assets(workspace, specs, {"customers_nightly": run_as}).assets_defs
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [assets_def], instance=instance, run_config={"ops": {assets_def.op.name: RUN_CONFIG}}
        )
        assert result.success and set(_materialized(result)) == CUSTOMERS
        snowflake_auth.new_key_pair(other := tmp_path / "other.p8")
        monkeypatch.setenv(KEY_VAR, other.read_text())
        refused = dg.materialize(
            [assets_def],
            instance=instance,
            run_config={"ops": {assets_def.op.name: RUN_CONFIG}},
            raise_on_error=False,
        )
        assert not refused.success
        failure = str([e.step_failure_data.error for e in refused.all_events if e.is_step_failure])
        assert "Cannot connect to Snowflake" in failure and "JWT token is invalid" in failure


def test_a_run_as_needs_exactly_one_credential():
    with pytest.raises(
        ValueError, match="set one of snowflake_password_env_var .* and snowflake_private_key_env_var"
    ):
        CoalesceRunAs(snowflake_username="U")
    with pytest.raises(ValueError, match="set one of"):
        CoalesceRunAs(
            snowflake_username="U", snowflake_password_env_var="P", snowflake_private_key_env_var="K"
        )
    with pytest.raises(ValueError, match="snowflake_private_key_passphrase_env_var goes with"):
        CoalesceRunAs(snowflake_username="U", snowflake_password_env_var="P",
                      snowflake_private_key_passphrase_env_var="S")  # fmt: skip
