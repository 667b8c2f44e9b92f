"""Dagster's Helm chart values (deploy/values.yaml) declare the same instance rules as dagster.yaml: the chart
writes the deployment's instance from them, so a rule changed in one and not the other would run production
on other rules than every test. Capacity (how many runs at once) may differ and is named as such."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INSTANCE = yaml.safe_load((REPO / "dagster.yaml").read_text())
VALUES = yaml.safe_load((REPO / "deploy" / "values.yaml").read_text())
DAEMON = VALUES["dagsterDaemon"]
QUEUE = DAEMON["runCoordinator"]["config"]["queuedRunCoordinator"]

# (what, dagster.yaml's value, the chart value that writes the same setting)
SAME = [
    ("the approval gate", INSTANCE["concurrency"]["runs"]["tag_concurrency_limits"], QUEUE["tagConcurrencyLimits"]),
    ("the run queue's interval", INSTANCE["run_queue"]["dequeue_interval_seconds"], QUEUE["dequeueIntervalSeconds"]),
    ("run retries", INSTANCE["run_retries"]["enabled"], DAEMON["runRetries"]["enabled"]),
    ("retries by default", INSTANCE["run_retries"]["max_retries"], DAEMON["runRetries"]["maxRetries"]),
    ("retry on a step's failure", INSTANCE["run_retries"]["retry_on_asset_or_op_failure"],
     DAEMON["runRetries"]["retryOnAssetOrOpFailure"]),
    ("run monitoring", INSTANCE["run_monitoring"]["enabled"], DAEMON["runMonitoring"]["enabled"]),
    ("a run's start timeout", INSTANCE["run_monitoring"]["start_timeout_seconds"],
     DAEMON["runMonitoring"]["startTimeoutSeconds"]),
    ("a cancel's timeout", INSTANCE["run_monitoring"]["cancel_timeout_seconds"],
     DAEMON["runMonitoring"]["cancelTimeoutSeconds"]),
    ("run monitoring's interval", INSTANCE["run_monitoring"]["poll_interval_seconds"],
     DAEMON["runMonitoring"]["pollIntervalSeconds"]),
    ("sensors in threads", INSTANCE["sensors"]["use_threads"], DAEMON["sensors"]["useThreads"]),
    ("sensor workers", INSTANCE["sensors"]["num_workers"], DAEMON["sensors"]["numWorkers"]),
    ("telemetry", INSTANCE["telemetry"]["enabled"], VALUES["telemetry"]["enabled"]),
]  # fmt: skip
# Capacity, not a rule: the local world runs 4 at once, a cluster more.
CAPACITY = {
    "max_concurrent_runs": (
        INSTANCE["concurrency"]["runs"]["max_concurrent_runs"],
        QUEUE["maxConcurrentRuns"],
    )
}


@pytest.mark.parametrize("what, instance, chart", SAME, ids=[s[0] for s in SAME])
def test_the_chart_declares_the_instances_rule(what: str, instance, chart) -> None:
    assert instance == chart, f"{what}: dagster.yaml has {instance!r}, deploy/values.yaml {chart!r}"


def test_every_instance_section_is_compared_or_named_as_capacity() -> None:
    compared = {"concurrency", "run_queue", "run_retries", "run_monitoring", "sensors", "telemetry"}
    assert set(INSTANCE) == compared, (
        f"dagster.yaml sections the test does not compare: {set(INSTANCE) - compared}"
    )
    assert set(INSTANCE["concurrency"]["runs"]) == {"tag_concurrency_limits", *CAPACITY}


def test_the_chart_runs_the_code_location_the_image_serves() -> None:
    (deployment,) = VALUES["dagster-user-deployments"]["deployments"]
    cmd = (REPO / "Dockerfile").read_text().rsplit("CMD ", 1)[1]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "dw_dagster.definitions"]
    assert '"-m", "dw_dagster.definitions"' in cmd
    storage = VALUES["additionalInstanceConfig"]["event_log_storage"]
    assert (storage["module"], storage["class"]) == (
        "dw_dagster.event_log.postgres",
        "BatchedPostgresEventLogStorage",
    )
