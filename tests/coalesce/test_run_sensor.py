"""The Coalesce run sensor (the integration's polling sensor with the product's hook) against the real
simulator and the local Snowflake, over sockets.

Each test evaluates the sensor with ``dg.build_sensor_context`` on a real ``DagsterInstance``: on Dagster's
sqlite storage the tick stores its events itself (``batch_run_events``, as the code location sets it:
``runless_store``); on the in-memory one it returns them
and the test stores them as the daemon does (``report_runless_asset_event``). Either way the event log is
the record of what was reported: "exactly once" is counted there. Each test starts its own sensor (its own
cursor, instance and incident schema); the first tick starts at the present.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest
from dagster._core.instance.utils import RUNLESS_RUN_ID

from dw_dagster.app.checks import CHECKS_JOB, build_checks_job
from dw_dagster.app.coalesce_runs import build_run_hook
from dw_dagster.checks.metrics import BusinessDay
from dw_dagster.coalesce import CoalesceClient, CoalesceUserCredentials, CoalesceWorkspace
from dw_dagster.coalesce.cursor import CoalesceRunSensorCursor, CoalesceRunSensorError, EnvironmentCursor
from dw_dagster.coalesce.run_models import CoalesceRunStatus
from dw_dagster.coalesce.runless_store import batch_storage_kind
from dw_dagster.coalesce.sensor_builder import build_coalesce_polling_sensor
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.tags import CHECKS_RUN_RETRIES
from dw_dagster.warehouse.migrations import migrate
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource
from dw_local.world import LOCAL_COALESCE_ORG_ID, LocalWorld, free_port
from dw_local.world import LOCAL_COALESCE_TOKEN as TOKEN

FIXTURE_PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "sim_project.yaml"
ENV = "2"
DATABASE = "DW_SENSOR_TEST"
BUSINESS_DAY = BusinessDay(timezone="America/Chicago", cutoff_hour=6)
# customers_nightly (job 1) builds these three; sales_nightly (job 2) fails: RAW.ORDERS is never loaded here.
CUSTOMERS = [dg.AssetKey(["stage", "stg_calendar"]), dg.AssetKey(["stage", "stg_customers"]),
             dg.AssetKey(["mart", "dim_customer"])]  # fmt: skip
DIM_CUSTOMER = dg.AssetKey(["mart", "dim_customer"])
STG_ORDERS = dg.AssetKey(["stage", "stg_orders"])
CHECK_KEY = dg.AssetCheckKey(DIM_CUSTOMER, "dim_customer_has_rows")


@dg.asset_check(asset=DIM_CUSTOMER)
def dim_customer_has_rows() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


# ------------------
# The world and the sensor under test
# ------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorld]:
    root = tmp_path_factory.mktemp("sensor") / "local"
    with LocalWorld(root, project_file=FIXTURE_PROJECT, services=("snowflake", "coalesce")) as lw:
        yield lw


@pytest.fixture(scope="module")
def warehouse(world: LocalWorld) -> WarehouseResource:
    sf = world.snowflake
    return WarehouseResource(
        account=sf.account, user=sf.user, **sf.sign_in(), database=DATABASE, network_timeout=20,
        login_timeout=10,
        additional_snowflake_connection_args={"host": sf.host, "port": sf.port, "protocol": sf.protocol},
    )  # fmt: skip


def workspace_for(url: str) -> CoalesceWorkspace:
    return CoalesceWorkspace(
        base_url=url, api_token=TOKEN, environment_ids=[ENV], request_max_retries=3, request_retry_delay=0.01
    )


@pytest.fixture(scope="module")
def specs(world: LocalWorld) -> list[dg.AssetSpec]:
    return load_coalesce_asset_specs(workspace_for(world.coalesce_url).fetch_workspace_data())


@pytest.fixture
def coalesce(world: LocalWorld) -> Iterator[CoalesceClient]:
    with CoalesceClient(api_token=TOKEN, base_url=world.coalesce_url, request_retry_delay=0.01) as client:
        yield client
        # No test leaves faults, a slow warehouse or an unfinished run behind.
        control(world, "DELETE", "/_sim/faults")
        control(world, "POST", "/_sim/warehouse", {"queryDelaySeconds": 0})
        for run in client.iter_runs(environment_id=ENV, order_by="id", order_by_direction="desc", limit=50):
            if not run.run_status.is_terminal:
                client.wait_for_run(run.id, 0.05, 60)


def control(world: LocalWorld, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = httpx.request(
        method, f"{world.coalesce_url}{path}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    response.raise_for_status()
    return response.json()


def credentials() -> CoalesceUserCredentials:
    # Coalesce's own user: dw-dagster's signs in by key pair only.
    return CoalesceUserCredentials(snowflake_username="TRANSFORM", snowflake_password="local")


def start(client: CoalesceClient, job_id: int) -> int:
    return client.start_run(ENV, job_id=job_id, user_credentials=credentials())


def finish(client: CoalesceClient, job_id: int) -> int:
    run_id = start(client, job_id)
    client.wait_for_run(run_id, 0.05, 60)
    return run_id


def wait_until_running(client: CoalesceClient, run_id: int) -> None:
    deadline = time.monotonic() + 30
    while client.get_run(run_id).run_status is not CoalesceRunStatus.RUNNING:
        assert time.monotonic() < deadline, f"run {run_id} never started"
        time.sleep(0.02)


@dataclass
class Sensor:
    """One sensor with its own instance, cursor and incident schema; ``tick`` evaluates it, stores the events
    it returns as the daemon would, keeps its cursor and, in ``events``, what the tick reported."""

    sensor: dg.SensorDefinition
    defs: dg.Definitions
    instance: dg.DagsterInstance
    incidents: IncidentStore
    warehouse: WarehouseResource
    cursor: str | None = None
    results: list[dg.SensorResult] = field(default_factory=list)
    events: list[dg.AssetMaterialization | dg.AssetObservation] = field(default_factory=list)
    """The last tick's events, as the event log holds them (the runless run's log, in order)."""

    def context(self, cursor: str | None) -> dg.SensorEvaluationContext:
        return dg.build_sensor_context(
            instance=self.instance,
            cursor=cursor,
            repository_def=self.defs.get_repository_def(),
            resources={"snowflake": self.warehouse},
        )

    def tick(self, cursor: str | None | type[Ellipsis] = ...) -> dg.SensorResult:
        before = len(self.instance.all_logs(RUNLESS_RUN_ID))
        with self.context(self.cursor if cursor is ... else cursor) as context:  # as the daemon does
            result = self.sensor(context)
        assert isinstance(result, dg.SensorResult)
        # The tick stores its events on Dagster's sqlite storage; it returns them on the others.
        assert not (result.asset_events and batch_storage_kind(self.instance))
        for event in result.asset_events:
            self.instance.report_runless_asset_event(event)
        logged = self.instance.all_logs(RUNLESS_RUN_ID)[before:]
        self.events = [e.asset_materialization or e.asset_observation for e in logged]
        self.cursor = result.cursor
        self.results.append(result)
        return result

    def tick_events(self) -> list[dg.AssetMaterialization | dg.AssetObservation]:
        self.tick()
        return self.events

    @property
    def position(self) -> EnvironmentCursor:
        return CoalesceRunSensorCursor.parse(self.cursor).environments[ENV]

    def reported(self, kind: type = dg.AssetMaterialization) -> Counter[tuple[str, int]]:
        """(asset, Coalesce run id) -> how many events of this kind the event log holds."""
        fetch = (
            self.instance.fetch_materializations
            if kind is dg.AssetMaterialization
            else self.instance.fetch_observations
        )
        counts: Counter[tuple[str, int]] = Counter()
        for key in self.defs.get_repository_def().asset_graph.get_all_asset_keys():
            for record in fetch(key, limit=1000).records:
                run_id = record.asset_event.metadata["coalesce/run_id"].value
                counts[(key.to_user_string(), run_id)] += 1
        return counts

    def latest(self, key: dg.AssetKey) -> dg.AssetMaterialization:
        event = self.instance.get_latest_materialization_event(key)
        assert event is not None and event.asset_materialization is not None
        return event.asset_materialization


@pytest.fixture
def make_sensor(
    world: LocalWorld, warehouse: WarehouseResource, specs: list[dg.AssetSpec], request: pytest.FixtureRequest
) -> Iterator[Any]:
    instances: list[Any] = []

    def make(
        url: str | None = None, start_now: bool = True, in_memory: bool = False, **options: Any
    ) -> Sensor:
        ops = OpsSchema(DATABASE, f"OPS_{request.node.name.upper()[5:40]}")
        migrate(warehouse, ops)
        workspace = workspace_for(url or world.coalesce_url)
        sensor = build_coalesce_polling_sensor(
            workspace=workspace,
            asset_specs=specs,
            on_run_finished=build_run_hook(BUSINESS_DAY, warehouse, ops, workspace),
            target=build_checks_job(),  # as the code location targets it (dw_dagster/app/components.py)
            # As the code location configures it (dw_dagster/app/defs/coalesce/defs.yaml).
            batch_run_events=True,
            **options,
        )
        defs = dg.Definitions(
            assets=specs,
            asset_checks=[dim_customer_has_rows],
            sensors=[sensor],
            resources={"snowflake": warehouse},
        )
        # In memory: a storage the batch is not used on, so the tick returns its events to the daemon.
        cm = dg.DagsterInstance.ephemeral() if in_memory else dg.instance_for_test()
        instances.append(cm)
        harness = Sensor(sensor, defs, cm.__enter__(), IncidentStore(warehouse, ops), warehouse)
        if start_now:
            first = harness.tick()
            assert first.skip_reason is not None and not harness.events
        return harness

    yield make
    for cm in instances:
        cm.__exit__(None, None, None)


def runs_of(events: list[dg.AssetMaterialization | dg.AssetObservation]) -> set[int]:
    return {e.metadata["coalesce/run_id"].value for e in events}


# ------------------
# What a run reports
# ------------------


@pytest.mark.world
def test_a_completed_run_is_materialized_with_its_metadata_and_its_checks_requested(
    make_sensor: Any, coalesce: CoalesceClient, world: LocalWorld
) -> None:
    sensor = make_sensor()
    assert sensor.tick().skip_reason is not None  # nothing finished since the first tick
    run_id = finish(coalesce, 1)
    result = sensor.tick()

    assert [e.asset_key for e in sensor.events] == CUSTOMERS  # in the order the nodes ended
    assert all(isinstance(e, dg.AssetMaterialization) for e in sensor.events)
    calendar = sensor.events[0].metadata
    assert calendar["coalesce/run_id"] == dg.IntMetadataValue(run_id)
    assert calendar["coalesce/run_link"] == dg.MetadataValue.url(f"{world.coalesce_url}/runs/{run_id}")
    assert calendar["coalesce/environment_id"].value == ENV
    assert calendar["coalesce/job_id"].value == "1"
    assert calendar["coalesce/job_name"].value == "customers_nightly"
    assert [calendar[f"coalesce/rows_{k}"].value for k in ("inserted", "updated", "deleted")] == [7, 0, 0]
    assert calendar["dagster/row_count"].value == 7  # CREATE OR REPLACE TABLE then INSERT: the whole table

    run = coalesce.get_run(run_id)
    results = {r.name: r for r in coalesce.get_run_results(run_id).data}
    dim = sensor.latest(DIM_CUSTOMER).metadata
    node_end = max(q.end_time for q in results["DIM_CUSTOMER"].query_results)
    node_start = min(q.start_time for q in results["DIM_CUSTOMER"].query_results)
    assert isinstance(dim["dagster/last_updated_timestamp"], dg.TimestampMetadataValue)
    assert dim["dagster/last_updated_timestamp"].value == node_end.timestamp()
    assert dim["coalesce/query_end"].value == node_end.timestamp()
    assert dim["coalesce/query_start"].value == node_start.timestamp()
    assert dim["coalesce/duration_seconds"].value == pytest.approx((node_end - node_start).total_seconds())
    assert dim["dagster/row_count"].value == 5
    assert [q["name"] for q in dim["coalesce/queries"].value][:2] == ["Create Table", "Insert Data"]

    # One checks-only run for the checks of the assets built.
    (request,) = result.run_requests
    assert request.run_key == f"{ENV}:{run_id}"
    assert request.asset_check_keys == [CHECK_KEY] and not request.asset_selection
    assert request.tags == {
        **CHECKS_RUN_RETRIES,  # retried with backoff when the warehouse is unreachable (dagster.yaml)
        "dw/coalesce_run_id": str(run_id),
        "dw/coalesce_environment_id": ENV,
        "dw/coalesce_job": "customers_nightly",
        "dw/business_date": BUSINESS_DAY.of(run.run_start_time).isoformat(),
    }
    # As the daemon resolves it: a run of the sensor's one target, the checks job (the UI names it as the
    # sensor's target and the run's), of the checks requested only; and that run executes.
    assert sensor.sensor.job_name == CHECKS_JOB
    with sensor.context(sensor.results[-2].cursor) as context:
        resolved = sensor.sensor.evaluate_tick(context).run_requests
    assert resolved is not None and resolved[0].job_name is None and resolved[0].asset_selection is None
    assert resolved[0].asset_check_keys == [CHECK_KEY]
    job = sensor.defs.get_repository_def().get_job(sensor.sensor.job_name)
    subset = job.get_subset(asset_check_selection={CHECK_KEY})
    outcome = subset.execute_in_process(instance=sensor.instance, tags=request.tags)
    assert outcome.success and outcome.dagster_run.job_name == CHECKS_JOB
    assert [e.check_name for e in outcome.get_asset_check_evaluations()] == [CHECK_KEY.name]
    dg.Definitions.validate_loadable(sensor.defs)

    again = sensor.tick()
    assert again.skip_reason is not None and not again.run_requests
    assert sensor.reported() == Counter({(k.to_user_string(), run_id): 1 for k in CUSTOMERS})


@pytest.mark.world
def test_a_failed_run_reports_its_failed_node_and_opens_one_incident(
    make_sensor: Any, coalesce: CoalesceClient
) -> None:
    sensor = make_sensor()
    before = sensor.cursor
    run_id = finish(coalesce, 2)
    result = sensor.tick()

    built = {e.asset_key for e in sensor.events if isinstance(e, dg.AssetMaterialization)}
    assert built == {dg.AssetKey(["stage", "stg_customers"]), DIM_CUSTOMER}
    (failed,) = [e for e in sensor.events if isinstance(e, dg.AssetObservation)]
    assert failed.asset_key == STG_ORDERS
    assert failed.metadata["coalesce/status"].value == "failed"
    assert failed.metadata["coalesce/run_status"].value == "failed"
    assert failed.metadata["coalesce/failed_query"].value == "Insert Data"
    assert "ORDERS does not exist" in failed.metadata["coalesce/error"].value
    assert "dagster/last_updated_timestamp" not in failed.metadata  # a failure is not an update
    # FCT_SALES and V_REGION_TOTALS read STG_ORDERS: never started, so nothing is said about them.
    assert {e.asset_key for e in sensor.events} == built | {STG_ORDERS}
    # The checks of what did get built still run.
    assert [r.asset_check_keys for r in result.run_requests] == [[CHECK_KEY]]
    assert result.run_requests[0].tags["dw/coalesce_job"] == "sales_nightly"

    (incident,) = sensor.incidents.list()
    run = coalesce.get_run(run_id)
    assert incident.business_date == BUSINESS_DAY.of(run.run_start_time)
    assert incident.cause_key == f"{incident.business_date.isoformat()}|job:sales_nightly"
    assert "node STG_ORDERS failed" in incident.title
    (finding,) = sensor.incidents.events(incident.incident_id, kind="finding")
    assert finding.detail["check_name"] == "coalesce_run"
    assert finding.detail["asset_key"] == "stage/stg_orders"
    assert finding.detail["coalesce_run_id"] == str(run_id)
    assert finding.detail["evidence"]["run_link"].endswith(f"/runs/{run_id}")

    # The tick replayed (its events stored, the daemon dead before the cursor): nothing doubles.
    replay = sensor.tick(cursor=before)
    assert not sensor.events and [r.run_key for r in replay.run_requests] == [f"{ENV}:{run_id}"]
    assert len(sensor.incidents.list()) == 1
    assert len(sensor.incidents.events(incident.incident_id, kind="finding")) == 1
    assert set(sensor.reported().values()) == {1}
    assert set(sensor.reported(dg.AssetObservation).values()) == {1}


# ------------------
# The cursor
# ------------------


@pytest.mark.world
def test_a_long_run_is_reported_once_when_it_finishes(
    make_sensor: Any, coalesce: CoalesceClient, world: LocalWorld
) -> None:
    sensor = make_sensor(in_memory=True)  # the daemon stores the events
    control(world, "POST", "/_sim/warehouse", {"queryDelaySeconds": 0.4})
    run_id = start(coalesce, 1)
    ticks_while_running, deadline = 0, time.monotonic() + 30
    while not (result := sensor.tick()).asset_events:
        assert sensor.position.pending == (run_id,) and time.monotonic() < deadline
        ticks_while_running += 1
        time.sleep(0.1)
    assert ticks_while_running >= 3 and coalesce.get_run(run_id).run_status is CoalesceRunStatus.COMPLETED
    assert runs_of(result.asset_events) == runs_of(sensor.events) == {run_id}
    assert sensor.position == EnvironmentCursor(high_water=run_id, pending=())
    assert sensor.tick().skip_reason is not None
    assert sensor.reported() == Counter({(k.to_user_string(), run_id): 1 for k in CUSTOMERS})


@pytest.mark.world
def test_runs_finishing_out_of_order_are_each_reported_once(
    make_sensor: Any, coalesce: CoalesceClient, world: LocalWorld
) -> None:
    sensor = make_sensor()
    control(world, "POST", "/_sim/warehouse", {"queryDelaySeconds": 0.05})
    first = start(coalesce, 1)
    wait_until_running(coalesce, first)
    second = start(coalesce, 1)  # queued behind the first
    coalesce.cancel_run(second, environment_id=ENV, org_id=LOCAL_COALESCE_ORG_ID)  # ends before the first
    assert coalesce.get_run(second).run_status is CoalesceRunStatus.CANCELED

    result = sensor.tick()
    assert not sensor.events and not result.run_requests  # the canceled run built nothing
    assert sensor.position == EnvironmentCursor(high_water=second, pending=(first,))
    (incident,) = sensor.incidents.list()
    assert incident.severity == "WARN" and f"Coalesce run {second} (job customers_nightly" in incident.title

    coalesce.wait_for_run(first, 0.05, 60)
    assert runs_of(sensor.tick_events()) == {first}
    assert sensor.position == EnvironmentCursor(high_water=second, pending=())
    assert sensor.tick().skip_reason is not None
    assert sensor.reported() == Counter({(k.to_user_string(), first): 1 for k in CUSTOMERS})
    assert len(sensor.incidents.list()) == 1


@pytest.mark.world
def test_runs_caught_up_in_one_tick_leave_each_build_to_the_checks_of_its_last_run(
    make_sensor: Any, coalesce: CoalesceClient
) -> None:
    # Two runs of the same nodes before one tick, as a restart catches up: a check reads the warehouse as
    # it is, which holds the second run's build, so only the second run's checks judge it.
    sensor = make_sensor()
    first, second = finish(coalesce, 1), finish(coalesce, 1)
    result = sensor.tick()
    assert runs_of(sensor.events) == {first, second}  # both builds are in the assets' history
    assert [(r.run_key, r.asset_check_keys) for r in result.run_requests] == [
        (f"{ENV}:{second}", [CHECK_KEY])
    ]
    assert sensor.latest(DIM_CUSTOMER).metadata["coalesce/run_id"].value == second
    assert sensor.reported() == Counter(
        {(k.to_user_string(), r): 1 for k in CUSTOMERS for r in (first, second)}
    )


@pytest.mark.world
def test_pages_are_followed_and_a_partial_last_page_is_resumed_past(
    make_sensor: Any, coalesce: CoalesceClient
) -> None:
    sensor = make_sensor(page_size=2)
    three = [finish(coalesce, 1) for _ in range(3)]  # a full page, then a partial one
    assert runs_of(sensor.tick_events()) == set(three)
    assert sensor.position == EnvironmentCursor(high_water=three[-1])
    two = [finish(coalesce, 1) for _ in range(2)]  # runs that came after the partial page
    assert runs_of(sensor.tick_events()) == set(two)
    assert set(sensor.reported().values()) == {1} and len(sensor.reported()) == 3 * 5


@pytest.mark.world
def test_a_tick_stops_when_its_budget_is_spent_and_the_next_resumes(
    make_sensor: Any, coalesce: CoalesceClient
) -> None:
    # A budget of 0 lets each tick report exactly one run, part way through a page of 2.
    sensor = make_sensor(page_size=2, tick_time_budget_seconds=0)
    runs = [finish(coalesce, 1) for _ in range(3)]
    for done, run_id in enumerate(runs, start=1):
        result = sensor.tick()
        assert runs_of(sensor.events) == {run_id} and [r.run_key for r in result.run_requests] == [
            f"{ENV}:{run_id}"
        ]
        assert sensor.position == EnvironmentCursor(high_water=run_id)
        assert len(sensor.reported()) == 3 * done
    assert sensor.tick().skip_reason is not None
    assert set(sensor.reported().values()) == {1}


# ------------------
# Failures of the tick itself
# ------------------


@pytest.mark.world
def test_an_outage_for_the_whole_tick_changes_nothing_and_loses_nothing(
    make_sensor: Any, coalesce: CoalesceClient, world: LocalWorld
) -> None:
    sensor = make_sensor()
    before = sensor.cursor
    run_id = finish(coalesce, 1)

    control(world, "POST", "/_sim/faults", {"status": 503, "count": 100, "pathPrefix": "/api/v1"})
    with pytest.raises(CoalesceRunSensorError, match=r"No progress this tick.*returned 503"):
        sensor.tick()
    control(world, "DELETE", "/_sim/faults")
    # Coalesce down altogether: nothing listens on the port.
    down = make_sensor(url=f"http://127.0.0.1:{free_port()}", start_now=False)
    with pytest.raises(CoalesceRunSensorError, match="cannot connect"):
        down.tick(cursor=before)
    assert sensor.cursor == before and not sensor.reported()

    assert runs_of(sensor.tick_events()) == {run_id}
    assert sensor.reported() == Counter({(k.to_user_string(), run_id): 1 for k in CUSTOMERS})


@pytest.mark.world
def test_rate_limits_and_5xx_bursts_are_retried_without_loss_or_doubles(
    make_sensor: Any, coalesce: CoalesceClient, world: LocalWorld
) -> None:
    sensor = make_sensor()
    first = finish(coalesce, 1)
    burst = {"status": 429, "count": 3, "retryAfter": 0.05, "pathPrefix": "/api/v1"}
    control(world, "POST", "/_sim/faults", burst)
    assert runs_of(sensor.tick_events()) == {first}
    second = finish(coalesce, 1)
    control(world, "POST", "/_sim/faults", {"status": 503, "count": 3, "pathPrefix": "/api/v1/runs"})
    assert runs_of(sensor.tick_events()) == {second}
    assert control(world, "GET", "/_sim/faults")["http"] is None  # every fault was met, and retried
    expected = {(k.to_user_string(), r): 1 for k in CUSTOMERS for r in (first, second)}
    assert sensor.reported() == Counter(expected)


class TickKilled(BaseException):
    """What a kill looks like from inside the tick: it unwinds everything, no handler stops it."""


@pytest.mark.world
def test_a_tick_killed_midway_stores_nothing_and_the_next_tick_redoes_it(
    make_sensor: Any, coalesce: CoalesceClient, world: LocalWorld
) -> None:
    sensor = make_sensor()
    before = sensor.cursor
    failed = finish(coalesce, 2)  # handed over first: its incident is written before the kill
    completed = finish(coalesce, 1)
    # Both runs read, the first one's hook reviews the environment's columns and meets a 429 asking for
    # 5 s; the tick is killed while it waits.
    fault = {"status": 429, "count": 1, "retryAfter": 5, "pathPrefix": f"/api/v1/environments/{ENV}/nodes"}
    control(world, "POST", "/_sim/faults", fault)

    killed_at: list[float] = []

    def kill_once_waiting() -> None:
        while control(world, "GET", "/_sim/faults")["http"] is not None:
            time.sleep(0.01)
        killed_at.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGUSR1)

    def on_kill(signum: int, frame: Any) -> None:
        raise TickKilled

    previous = signal.signal(signal.SIGUSR1, on_kill)
    killer = threading.Thread(target=kill_once_waiting, daemon=True)
    try:
        killer.start()
        with pytest.raises(TickKilled):
            sensor.tick()
        # The kill came during the 5 s wait, not after it.
        assert killed_at and time.monotonic() - killed_at[0] < 4
        killer.join(5)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert sensor.cursor == before and not sensor.reported()
    (incident,) = sensor.incidents.list()  # the killed tick got that far

    result = sensor.tick()
    assert runs_of(sensor.events) == {failed, completed}
    # The failed run's two builds (customers) were built again by the completed run: its checks judge them.
    assert [r.run_key for r in result.run_requests] == [f"{ENV}:{completed}"]
    assert sensor.position == EnvironmentCursor(high_water=completed)
    assert set(sensor.reported().values()) == {1}
    assert set(sensor.reported(dg.AssetObservation).values()) == {1}
    assert [i.incident_id for i in sensor.incidents.list()] == [incident.incident_id]
    assert len(sensor.incidents.events(incident.incident_id, kind="finding")) == 1


def test_the_cursor_round_trips_and_a_foreign_one_is_refused() -> None:
    cursor = CoalesceRunSensorCursor(environments={ENV: EnvironmentCursor(high_water=9, pending=(7,))})
    assert CoalesceRunSensorCursor.parse(cursor.serialize()) == cursor
    assert cursor.serialize() == '{"version":1,"environments":{"2":{"high_water":9,"pending":[7]}}}'
    assert CoalesceRunSensorCursor.parse(None) == CoalesceRunSensorCursor()
    with pytest.raises(CoalesceRunSensorError, match="Clear the cursor"):
        CoalesceRunSensorCursor.parse('{"finished_at_lower_bound": 1.0}')
