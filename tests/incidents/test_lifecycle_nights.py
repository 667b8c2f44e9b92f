"""When an incident is over, read from Dagster's own storage: real asset check executions in checks runs
tagged with the night they judged (a Dagster instance of this test's), incidents in the local Snowflake.
And the lifecycle job marking a stale incident, as the incident sensor launches it.

No ``from __future__ import annotations``: Dagster reads the check's config annotation at definition."""

from datetime import UTC, date, datetime

import dagster as dg
import pytest
from ops_warehouse import ops_schema, warehouse
from test_incident_store import finding

from dw_dagster import tags
from dw_dagster.app.lifecycle import build_lifecycle_job
from dw_dagster.incidents.nights import later_nights, lifecycle_due
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.records.incidents import Finding, Incident
from dw_dagster.records.policy import IncidentPolicy

__all__ = ["warehouse"]

KEY = dg.AssetKey(["inv", "fct"])
CHECK = dg.AssetCheckKey(KEY, "volume")


class Verdict(dg.Config):
    outcome: str = "passed"


@dg.asset_check(asset=KEY, name="volume")
def volume(config: Verdict) -> dg.AssetCheckResult:
    if config.outcome == "errored":
        raise RuntimeError("the table could not be counted")
    severity = dg.AssetCheckSeverity.WARN if config.outcome == "warn" else dg.AssetCheckSeverity.ERROR
    return dg.AssetCheckResult(passed=config.outcome == "passed", severity=severity)


CHECKS_JOB = (
    dg.Definitions(assets=[dg.AssetSpec(KEY)], asset_checks=[volume])
    .resolve_implicit_global_asset_job_def()
    .get_subset(asset_selection=set(), asset_check_selection={CHECK})
)


@pytest.fixture
def night(warehouse, request):
    """(store, instance, judge): ``judge(day, outcome)`` runs the check for a night as the run sensor's
    checks run does (tagged with the business date and the job)."""
    _, wh = warehouse
    store = IncidentStore(wh, ops_schema(wh, f"OPS_N_{request.node.name[-16:].upper()}"))
    with dg.DagsterInstance.ephemeral() as instance:
        step = CHECKS_JOB.graph.nodes[0].name

        def judge(day: date, outcome: str) -> None:
            CHECKS_JOB.execute_in_process(
                instance=instance, raise_on_error=False,
                tags={tags.BUSINESS_DATE: day.isoformat(), tags.COALESCE_JOB: "inventory_nightly"},
                run_config={"ops": {step: {"config": {"outcome": outcome}}}},
            )  # fmt: skip

        yield store, instance, judge


def _open(store: IncidentStore, day: date = date(2025, 6, 16)):
    f = finding("volume", "inv/fct", day=day)
    return store.record_finding(f).incident, [f]


def test_the_next_clean_night_resolves_and_a_failing_or_unjudged_one_does_not(night):
    store, instance, judge = night
    incident, findings = _open(store)
    judge(date(2025, 6, 16), "failed")  # the incident's own night
    assert lifecycle_due(instance, store, incident, findings, IncidentPolicy()) is None
    judge(date(2025, 6, 17), "errored")  # could not run: not over
    assert lifecycle_due(instance, store, incident, findings, IncidentPolicy()) is None
    judge(date(2025, 6, 18), "warn")  # no longer failing at ERROR
    due = lifecycle_due(instance, store, incident, findings, IncidentPolicy())
    assert (due.action, due.night) == ("resolve", date(2025, 6, 18))
    assert "every check of the incident passed again (2025-06-18): volume@inv/fct" == due.reason
    # Two clean nights asked for: the errored night in between does not count.
    assert (
        lifecycle_due(instance, store, incident, findings, IncidentPolicy(resolve_after_clean_nights=2))
        is None
    )
    judge(date(2025, 6, 19), "passed")
    two = lifecycle_due(instance, store, incident, findings, IncidentPolicy(resolve_after_clean_nights=2))
    assert (two.action, two.night) == ("resolve", date(2025, 6, 19))


def test_a_finding_recorded_that_night_on_another_incident_means_it_is_not_over(night):
    store, instance, judge = night
    incident, findings = _open(store)
    judge(date(2025, 6, 17), "passed")
    # The same check failed that night in a later run, recorded on tonight's own incident.
    store.record_finding(finding("volume", "inv/fct", day=date(2025, 6, 17)))
    assert lifecycle_due(instance, store, incident, findings, IncidentPolicy()) is None


def test_an_incident_whose_checks_keep_failing_without_a_finding_goes_stale_and_says_so(night, warehouse):
    store, instance, judge = night
    incident, findings = _open(store)
    for day in (17, 18, 19):
        judge(date(2025, 6, day), "errored")
    due = lifecycle_due(instance, store, incident, findings, IncidentPolicy())
    assert (due.action, due.night) == ("stale", date(2025, 6, 19))
    assert "no new finding for 3 reported nights" in due.reason and "volume@inv/fct: errored" in due.reason
    job = build_lifecycle_job(store.ops, IncidentPolicy(), None)
    result = job.execute_in_process(
        instance=instance,
        tags={tags.INCIDENT_ID: incident.incident_id, tags.LIFECYCLE_ACTION: "stale"},
        resources={"snowflake": store.warehouse, "slack": SlackNotifier(token="xoxb-unused")},
    )
    assert result.success
    assert store.get(incident.incident_id).stale_since == "2025-06-19"
    (shown,) = result.asset_materializations_for_node("apply_lifecycle")
    assert shown.metadata["status"].value == "open, stale since 2025-06-19"
    # Marked once: nothing is due any more but resolving.
    assert lifecycle_due(instance, store, store.get(incident.incident_id), findings, IncidentPolicy()) is None
    again = job.execute_in_process(
        instance=instance, tags={tags.INCIDENT_ID: incident.incident_id, tags.LIFECYCLE_ACTION: "stale"},
        resources={"snowflake": store.warehouse, "slack": SlackNotifier(token="xoxb-unused")},
    )  # fmt: skip
    assert again.success and len(store.events(incident.incident_id, kind="stale")) == 1


def test_the_lifecycle_job_refuses_runs_without_its_tags(night):
    store, instance, _ = night
    job = build_lifecycle_job(store.ops, IncidentPolicy(), None)
    result = job.execute_in_process(
        instance=instance, tags={tags.LIFECYCLE_ACTION: "explode"}, raise_on_error=False,
        resources={"snowflake": store.warehouse, "slack": SlackNotifier(token="xoxb-unused")},
    )  # fmt: skip
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "run tags dw/incident_id and dw/lifecycle (resolve or stale): expected both" in str(
        failure.event_specific_data.error
    )


def test_a_cost_jump_is_over_only_on_a_night_the_cost_job_judged_without_a_jump():
    """The walkthrough resolved its cost incident of 2025-06-15 because the node was built again on the
    16th, a night the cost job had not judged yet: a build is no cost judgement."""
    from dagster._core.test_utils import create_run_for_test

    from dw_dagster.cost.night import COST_KEY

    cost = Finding(check_name="cost_jump", asset_key="stage/stg_demand", business_date=date(2025, 6, 15),
                   summary="STG_DEMAND cost 4.32 credits", severity="WARN", cause_scope="cost:stage/stg_demand")  # fmt: skip
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=cost.business_date,
                        title=cost.summary, severity="WARN", opened_at=now, updated_at=now)  # fmt: skip

    def cost_night(night: str, credits: float, jumped: list[str]) -> None:
        """The nightly cost job's materialization of dw/cost for one night (``cost_metadata``)."""
        md = {"night": night, "credits: node stage/stg_demand": credits, "cost_jumps": len(jumped)}
        if jumped:
            md["cost_jump_series"] = ", ".join(jumped)
        instance.report_runless_asset_event(dg.AssetMaterialization(COST_KEY, metadata=md))

    with dg.DagsterInstance.ephemeral() as instance:
        # Built again on the 16th: the run sensor's materialization and the checks run of that Coalesce run.
        node = dg.AssetKey(["stage", "stg_demand"])
        instance.report_runless_asset_event(dg.AssetMaterialization(node, metadata={"coalesce/run_id": "62"}))
        create_run_for_test(instance, job_name="__ASSET_JOB",
                            tags={tags.COALESCE_RUN_ID: "62", tags.BUSINESS_DATE: "2025-06-16"})  # fmt: skip
        assert later_nights(instance, incident, [cost]) == []
        cost_night("2025-06-16", 4.4, ["cost:stage/stg_demand_28d", "cost:stage/stg_demand"])
        cost_night("2025-06-17", 2.2, ["cost:stage/stg_demand_28d"])
        cost_night("2025-06-18", 2.2, [])
        cost_night("2025-06-18", 2.2, ["cost:stage/stg_demand"])  # attributed again: the last one counts
        nights = {n.night: n.outcomes for n in later_nights(instance, incident, [cost])}
        assert nights == {
            date(2025, 6, 16): {"cost_jump@stage/stg_demand": "failed"},
            date(2025, 6, 17): {"cost_jump@stage/stg_demand": "passed"},
            date(2025, 6, 18): {"cost_jump@stage/stg_demand": "failed"},
        }
