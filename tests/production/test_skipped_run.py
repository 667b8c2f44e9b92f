"""A skipped night is judged from Dagster's storage against the job's own schedule: the freshness states the
freshness daemon stored, and the nights the run sensor reported (its checks runs' tags)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg
import pytest
from dagster._core.definitions.freshness import FreshnessState, FreshnessStateChange
from dagster._core.test_utils import create_run_for_test
from ops_warehouse import ops_schema, warehouse  # noqa: F401 - the fixture

from dw_dagster import tags
from dw_dagster.app.checks import CHECKS_JOB
from dw_dagster.app.skipped_run import (
    SKIPPED_JOB,
    SKIPPED_NIGHT,
    SKIPPED_RUN_JOB,
    build_skipped_run_job,
    skipped_run_requests,
)
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.incidents.skipped_run import SKIPPED_RUN_CHECK, job_tables, skipped_runs
from dw_dagster.incidents.store import IncidentStore

METRICS = MetricsFile.model_validate(
    {
        "business_day": {"timezone": "Europe/London", "cutoff_hour": 6},
        "calendar": {"dates": [{"date": "2026-12-24", "name": "Office closed"}]},
        "freshness": {
            "schedules": {
                "nightly": {"cron": "0 4 * * *", "timezone": "Europe/London", "grace_minutes": 60},
                "weekdays": {"cron": "0 4 * * 1-5", "timezone": "Europe/London", "grace_minutes": 60},
            }
        },
    }
)
TABLES = {"nightly": ["sales/fct_a", "sales/fct_b"], "weekdays": ["finance/fct_c"]}


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _fail(instance: dg.DagsterInstance, asset: str, at: datetime) -> None:
    # What Dagster's freshness daemon stores when a policy's deadline passes without a build.
    instance._report_runless_asset_event(  # noqa: SLF001
        asset_event=FreshnessStateChange(
            key=dg.AssetKey(asset.split("/")),
            new_state=FreshnessState.FAIL,
            previous_state=FreshnessState.PASS,
            state_change_timestamp=at.timestamp(),
        )
    )


def _reported(instance: dg.DagsterInstance, job: str, night: str, coalesce_run: str) -> None:
    # The checks run the Coalesce run sensor requests for each Coalesce run it reports.
    create_run_for_test(
        instance,
        job_name=CHECKS_JOB,
        tags={tags.COALESCE_JOB: job, tags.BUSINESS_DATE: night, tags.COALESCE_RUN_ID: coalesce_run},
    )


def test_a_scheduled_night_without_a_run_is_a_skip_naming_the_job_and_since_when(instance):
    _reported(instance, "nightly", "2026-11-26", "41")  # Fri 04:00 London counts for Thursday
    for asset in TABLES["nightly"]:
        _fail(instance, asset, datetime(2026, 11, 28, 5, 0, 30, tzinfo=UTC))
    [skipped] = skipped_runs(instance, METRICS, TABLES)
    assert skipped.job == "nightly"
    assert skipped.scheduled_at.isoformat() == "2026-11-28T04:00:00+00:00"
    assert skipped.business_date == date(2026, 11, 27)
    assert (skipped.last_night, skipped.last_coalesce_run_id) == (date(2026, 11, 26), "41")
    assert skipped.failing == ("sales/fct_a", "sales/fct_b")
    finding = skipped.finding("sales/fct_a", datetime(2026, 11, 27, 4, 20, tzinfo=UTC))
    assert (finding.check_name, finding.cause_scope, finding.severity) == (
        SKIPPED_RUN_CHECK,
        "job:nightly",
        "ERROR",
    )
    assert "Coalesce job nightly did not run: scheduled Sat 2026-11-28 04:00" in finding.summary
    assert "last run was Coalesce run 41 for 2026-11-26" in finding.summary
    assert "not built since 2026-11-27 04:20 UTC" in finding.summary
    assert finding.evidence["hours_since_build"] == 24.7

    with dg.build_sensor_context(instance=instance) as context:
        [request] = list(skipped_run_requests(context, METRICS, TABLES))
    assert request.job_name == SKIPPED_RUN_JOB
    assert request.run_key == "skipped:nightly:2026-11-28T04:00:00+00:00"
    assert request.tags == {SKIPPED_JOB: "nightly", SKIPPED_NIGHT: "2026-11-27"}


def test_a_run_reported_for_the_night_is_no_skip(instance):
    _reported(instance, "nightly", "2026-11-27", "42")
    _fail(instance, "sales/fct_a", datetime(2026, 11, 28, 5, 0, 30, tzinfo=UTC))
    assert skipped_runs(instance, METRICS, TABLES) == []


def test_a_day_the_schedule_does_not_run_is_no_skip(instance):
    # A weekday job whose tables a window policy failed on Sunday: its last start (Friday) was reported.
    _reported(instance, "weekdays", "2026-11-26", "43")
    _fail(instance, "finance/fct_c", datetime(2026, 11, 29, 5, 0, 30, tzinfo=UTC))
    assert skipped_runs(instance, METRICS, TABLES) == []
    # The Monday start that did not come is one.
    _fail(instance, "finance/fct_c", datetime(2026, 11, 30, 5, 1, tzinfo=UTC))
    [skipped] = skipped_runs(instance, METRICS, TABLES)
    assert (skipped.job, skipped.business_date) == ("weekdays", date(2026, 11, 29))


def test_a_skip_on_a_holiday_of_the_calendar_is_a_warn(instance):
    _reported(instance, "nightly", "2026-12-23", "44")
    _fail(instance, "sales/fct_a", datetime(2026, 12, 25, 5, 0, 30, tzinfo=UTC))
    [skipped] = skipped_runs(instance, METRICS, TABLES)
    assert skipped.holiday == "Office closed"
    finding = skipped.finding("sales/fct_a", None)
    assert finding.severity == "WARN" and "2026-12-24 is Office closed" in finding.summary
    with dg.build_sensor_context(instance=instance) as context:
        [request] = list(skipped_run_requests(context, METRICS, TABLES))
    assert request.tags[SKIPPED_NIGHT] == "2026-12-24"


def test_the_scheduled_jobs_tables_are_watched():
    specs = [
        dg.AssetSpec("a", metadata={"coalesce/jobs": dg.MetadataValue.json([{"name": "nightly"}])}),
        dg.AssetSpec("b", metadata={"coalesce/jobs": dg.MetadataValue.json([{"name": "adhoc"}])}),
        dg.AssetSpec("c"),
    ]
    assert job_tables(specs, METRICS.freshness.schedules) == {"nightly": ["a"]}
    assert job_tables(specs) == {"nightly": ["a"], "adhoc": ["b"]}


def test_the_report_run_records_one_incident_for_the_job_in_the_warehouse(instance, warehouse):  # noqa: F811
    _, wh = warehouse
    ops = ops_schema(wh, "DW_OPS_SKIPPED")
    job = build_skipped_run_job(METRICS, TABLES, ops)
    _reported(instance, "nightly", "2026-11-26", "41")
    for asset in TABLES["nightly"]:
        _fail(instance, asset, datetime(2026, 11, 28, 5, 0, 30, tzinfo=UTC))
    with dg.build_sensor_context(instance=instance) as context:
        [request] = list(skipped_run_requests(context, METRICS, TABLES))
    for _ in range(2):  # a second run of the same request (a retry) records nothing twice
        assert job.execute_in_process(
            instance=instance, tags=request.tags, resources={"snowflake": wh}
        ).success
    store = IncidentStore(wh, ops)
    [incident] = store.list(status="open")
    findings = store.events(incident.incident_id, kind="finding")
    assert sorted(f.detail["asset_key"] for f in findings) == TABLES["nightly"]
    assert {f.detail["check_name"] for f in findings} == {SKIPPED_RUN_CHECK}
    assert incident.business_date == date(2026, 11, 27)
    assert incident.detail["cause_scope"] == "job:nightly"
    # The report run itself is no reported night: the skip still stands after it.
    assert [s.job for s in skipped_runs(instance, METRICS, TABLES)] == ["nightly"]


def test_a_run_reported_before_the_report_runs_records_nothing(instance, warehouse):  # noqa: F811
    _, wh = warehouse
    ops = ops_schema(wh, "DW_OPS_SKIPPED_LATE")
    _reported(instance, "nightly", "2026-11-26", "41")
    _fail(instance, "sales/fct_a", datetime(2026, 11, 28, 5, 0, 30, tzinfo=UTC))
    with dg.build_sensor_context(instance=instance) as context:
        [request] = list(skipped_run_requests(context, METRICS, TABLES))
    _reported(instance, "nightly", "2026-11-27", "42")  # the late run arrives
    job = build_skipped_run_job(METRICS, TABLES, ops)
    assert job.execute_in_process(instance=instance, tags=request.tags, resources={"snowflake": wh}).success
    assert IncidentStore(wh, ops).list() == []
