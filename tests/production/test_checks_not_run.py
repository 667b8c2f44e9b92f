"""A night whose checks could not run is a finding for the job's owners: the run-status sensors read Dagster's
storage (the failed run, whether Dagster will retry it), and the report run records the finding in the local
Snowflake's ops schema."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run
from dagster._core.storage.tags import MAX_RETRIES_TAG, PARENT_RUN_ID_TAG, RETRY_NUMBER_TAG, ROOT_RUN_ID_TAG
from ops_warehouse import ops_schema, warehouse  # noqa: F401 - the fixture

from dw_dagster import tags
from dw_dagster.app.checks_not_run import build_checks_not_run_definitions
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.incidents.checks_not_run import CHECKS_NOT_RUN, FAILED_RUN, OUTCOME, REPORT_JOB
from dw_dagster.incidents.store import IncidentStore

METRICS = MetricsFile.model_validate({})
TABLES = {"nightly": ["sales/fct_a", "sales/fct_b"]}
NIGHT = {tags.COALESCE_RUN_ID: "77", tags.COALESCE_JOB: "nightly", tags.BUSINESS_DATE: "2026-11-27"}


@dg.op
def evaluate_checks() -> None:
    raise ConnectionError("Snowflake at 127.0.0.1 did not answer within SNOWFLAKE_LOGIN_TIMEOUT=10 s")


@dg.job(executor_def=dg.in_process_executor)
def checks_run():
    evaluate_checks()


@pytest.fixture
def instance():
    with dg.instance_for_test(overrides={"run_retries": {"enabled": True}}) as instance:
        yield instance


@pytest.fixture(scope="module")
def defs(warehouse):  # noqa: F811
    _, wh = warehouse
    built = build_checks_not_run_definitions(METRICS, TABLES, ops_schema(wh, "DW_OPS_NOT_RUN"))
    return dg.Definitions.merge(built, dg.Definitions(resources={"snowflake": wh})), wh


def _failed_checks_run(instance, attempts: int) -> tuple[dg.DagsterRun, dg.DagsterEvent]:
    """A checks run and its retries, each failing, chained as Dagster's run retries chain them (one run
    group: each retry's parent is the attempt before, its root the first)."""
    root = parent = None
    for n in range(attempts):
        run_tags = {**NIGHT, MAX_RETRIES_TAG: "3"}
        if n:
            run_tags |= {RETRY_NUMBER_TAG: str(n), ROOT_RUN_ID_TAG: root, PARENT_RUN_ID_TAG: parent}
        run = instance.create_run_for_job(checks_run, tags=run_tags, root_run_id=root, parent_run_id=parent)
        execute_run(InMemoryJob(checks_run), run, instance)
        root, parent = root or run.run_id, run.run_id
    run = instance.get_run_by_id(parent)
    assert run.status is dg.DagsterRunStatus.FAILURE
    failure = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records[0]
    return run, failure.event_log_entry.dagster_event


def _tick(defs, name: str, instance, run, event) -> list[dg.RunRequest]:
    sensor = defs.resolve_sensor_def(name)
    context = dg.build_run_status_sensor_context(
        sensor_name=name, dagster_event=event, dagster_instance=instance, dagster_run=run
    )
    result = sensor(context.for_run_failure() if name == "checks_run_failed" else context)
    return [result] if isinstance(result, dg.RunRequest) else list(result or [])


def test_a_checks_run_dagster_will_retry_is_not_reported(instance, defs):
    d, _ = defs
    run, event = _failed_checks_run(instance, attempts=2)
    assert _tick(d, "checks_run_failed", instance, run, event) == []


def test_the_last_failed_retry_is_a_finding_for_the_owners(instance, defs):
    d, wh = defs
    run, event = _failed_checks_run(instance, attempts=4)
    [request] = _tick(d, "checks_run_failed", instance, run, event)
    assert request.run_key == f"{CHECKS_NOT_RUN}:{run.run_id}"
    assert request.tags[FAILED_RUN] == run.run_id
    result = d.resolve_job_def(REPORT_JOB).execute_in_process(instance=instance, tags=request.tags)
    assert result.success
    store = IncidentStore(wh, ops_schema(wh, "DW_OPS_NOT_RUN"))
    [incident] = [i for i in store.list(status="open") if i.detail.get("cause_scope") == "job:nightly"]
    [finding] = store.events(incident.incident_id, kind="finding")
    assert finding.detail["check_name"] == CHECKS_NOT_RUN
    assert finding.detail["asset_key"] == "coalesce_job/nightly"
    assert finding.detail["business_date"] == "2026-11-27"
    summary = finding.detail["summary"]
    assert f"checks run {run.run_id} failed after 3 retries" in summary
    assert "SNOWFLAKE_LOGIN_TIMEOUT=10" in summary and "Nothing of that night was judged" in summary
    assert finding.detail["evidence"]["tables"] == TABLES["nightly"]
    # The report run is keyed by the failed run: a re-tick or a restart records nothing twice.
    again = d.resolve_job_def(REPORT_JOB).execute_in_process(instance=instance, tags=request.tags)
    assert again.success and len(store.events(incident.incident_id, kind="finding")) == 1


def test_a_canceled_checks_run_is_reported(instance, defs):
    d, _ = defs
    run = instance.create_run_for_job(checks_run, tags=NIGHT)
    instance.report_run_canceled(run)
    run = instance.get_run_by_id(run.run_id)
    event = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_CANCELED).records[0]
    [request] = _tick(d, "checks_run_canceled", instance, run, event.event_log_entry.dagster_event)
    assert request.tags[OUTCOME] == "canceled"


def test_runs_that_are_not_checks_runs_are_left_alone(instance, defs):
    d, _ = defs
    result = checks_run.execute_in_process(
        instance=instance, tags={**NIGHT, tags.INCIDENT_ID: "INC-1"}, raise_on_error=False
    )
    run = instance.get_run_by_id(result.run_id)
    event = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records[0]
    assert _tick(d, "checks_run_failed", instance, run, event.event_log_entry.dagster_event) == []
