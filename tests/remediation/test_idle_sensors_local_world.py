"""The sensors whose work lives in the ops schema send nothing to Snowflake while nothing happens, and still
do their work when it comes: the reference night's checks run opens an incident, the incident sensor's next
tick requests its diagnosis, the proposals sensor submits the held run, and the approval expires at its
time, all with the cursors carried from tick to tick as Dagster's sensor daemon carries them (the local
daemon keeps none for these sensors), statements counted at the connector. On the distributor world and on
the e-commerce world (a duplicate load there, diagnosed after idle ticks that read nothing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from dagster._core.run_coordinator import SubmitRunContext
from warehouse_statements import logins, statements
from world_cache import running_copy

from dw_dagster.app.incidents import DIAGNOSE_JOB
from dw_dagster.app.remediation import remediation_run_config
from dw_dagster.app.remediation_sensors import build_remediation_sensors
from dw_dagster.checks import load_metrics_file
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.remediation.approvals import REMEDIATION_JOB, ApprovalBook
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource
from dw_local.daemon import QUIET, LocalDaemon, business_clock
from dw_local.scenarios.suite import SUITE_DIR
from dw_local.scenarios.worlds import FileScenarioWorld
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]
ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce" / "world.yaml"
GATED = ("incident_sensor", "remediation_proposals", "approval_expiry", "slack_outbox")


class Ticks:
    """Evaluates the deployed sensors as the sensor daemon does: each keeps its cursor between ticks."""

    def __init__(self, daemon: LocalDaemon):
        self.daemon = daemon
        self.cursors: dict[str, str | None] = {}
        self.now = datetime.now(UTC)
        settings = daemon.settings
        self.ops = OpsSchema(settings.database, load_metrics_file(settings.metrics_file).ops_schema)
        context = load_context_file(settings.context_file)
        job = daemon.repo.get_job(REMEDIATION_JOB)
        # The deployed sensors, but acting at ``self.now`` (an approval expires when its plan says).
        self.sensors = {s.name: s for s in daemon.defs.sensors or [] if s.name in GATED}
        self.sensors.update(
            {
                s.name: s
                for s in build_remediation_sensors(
                    job, self.ops, context, remediation_run_config(), clock=lambda: self.now
                )
            }
        )

    def tick(self, name: str) -> tuple[list[dg.RunRequest], str | None]:
        with self.daemon._sensor_context(self.sensors[name], cursor=self.cursors.get(name)) as context:
            result = self.sensors[name](context)
            items = list(result) if not isinstance(result, dg.SkipReason) and result is not None else [result]
            self.cursors[name] = context.cursor
        requests = [r for r in items if isinstance(r, dg.RunRequest)]
        skips = [r.skip_message for r in items if isinstance(r, dg.SkipReason)]
        return requests, (skips[0] if skips else None)

    def idle(self) -> dict[str, int]:
        """One tick of each gated sensor; the statements each sent."""
        out = {}
        for name in GATED:
            with statements() as sent:
                requests, _ = self.tick(name)
            assert requests == [], f"{name}: an idle tick requests nothing"
            out[name] = len(sent)
        return out

    def settle(self) -> None:
        """Ticks each sensor until it acts on nothing new (the runs it requested are created by the test)."""
        for _ in range(3):
            for name in GATED:
                self.tick(name)


@pytest.fixture(scope="module")
def night(ordinary_world):
    daemon = LocalDaemon(ordinary_world)  # an ordinary night first, played and watched (conftest)
    ticks = Ticks(daemon)
    ticks.settle()
    return daemon, ticks


def test_idle_ticks_send_nothing_to_snowflake(night):
    daemon, ticks = night
    assert ticks.idle() == dict.fromkeys(GATED, 0)
    _, reason = ticks.tick("incident_sensor")
    assert "the warehouse was not read" in reason


def test_an_incident_a_checks_run_opens_is_diagnosed_and_its_fix_expires_on_time(night):
    daemon, ticks = night
    store = IncidentStore(daemon.defs.resources["snowflake"], ticks.ops)
    DistributorWorld().play_reference_night(daemon.lw.snowflake, daemon.lw.coalesce_client())
    outcome = daemon._tick_run_sensor()  # the run sensor and its checks run, which opens the incident
    assert outcome.checks and not all(c.passed for c in outcome.checks)
    (incident,) = store.list(status="open")
    assert latest_diagnosis(store, incident.incident_id) is None

    requests, _ = ticks.tick("incident_sensor")
    assert [(r.job_name, r.tags["dw/incident_id"]) for r in requests] == [
        (DIAGNOSE_JOB, incident.incident_id)
    ]
    result = daemon.repo.get_job(DIAGNOSE_JOB).execute_in_process(
        instance=daemon.instance, tags=requests[0].tags, run_config=QUIET
    )
    assert result.success and latest_diagnosis(store, incident.incident_id) is not None
    assert ticks.tick("incident_sensor")[0] == [], "diagnosed once: its next tick requests nothing"

    # The diagnosis recorded a plan: the proposals sensor's next tick submits its held run.
    requests, _ = ticks.tick("remediation_proposals")
    (request,) = requests
    sensor = daemon.repo.get_sensor_def("remediation_proposals")
    with daemon._sensor_tick(sensor.name) as tick:  # the run as the sensor daemon creates it
        run, _ = daemon._create_run(sensor, tick, request, dict(request.run_config))
    daemon.instance.run_coordinator.submit_run(SubmitRunContext(run, workspace=None))
    ticks.tick("remediation_proposals")  # binds the plan to that run
    book = ApprovalBook(store, load_context_file(daemon.settings.context_file))
    (plan,) = book.plans(incident.incident_id)
    assert book.binding(plan).run_id == run.run_id
    ticks.settle()

    # The night is over: the held run waits, and nothing more is read until the approval is due.
    assert ticks.idle() == dict.fromkeys(GATED, 0), "an open incident and a held run cost nothing idle"
    ticks.now = plan.expires_at - timedelta(minutes=1)
    with statements() as early:
        _, reason = ticks.tick("approval_expiry")
    assert early == [] and "next due" in reason
    assert daemon.instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.QUEUED
    ticks.now = plan.expires_at + timedelta(seconds=1)
    with statements() as due:
        _, reason = ticks.tick("approval_expiry")
    assert due, "at its expiry the sensor reads the plan"
    assert reason == "expired 1 unanswered approval request"
    assert daemon.instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
    assert book.decision(plan).kind == "expired"


def test_the_local_daemon_runs_a_generator_sensor_with_its_tick_resources_up(night):
    """As Dagster's evaluation (``evaluate_tick`` lists a generator inside the tick's resource context): every
    read of one tick shares the tick's warehouse session. The local daemon listed the generator after the
    teardown, so each read signed in on its own (the incident sensor: a login per store call)."""
    daemon, _ = night

    @dg.sensor(job_name=DIAGNOSE_JOB)
    def reads_twice(context, snowflake: WarehouseResource):
        for _ in range(2):
            with snowflake.tagged_connection("test.read") as conn:
                conn.cursor().execute("SELECT 1")
        yield dg.SkipReason("read twice")

    with logins() as signed_in, daemon._sensor_tick(reads_twice.name) as tick:
        assert daemon._run_requests(reads_twice, tick) == []
    assert len(signed_in) == 1 and tick.skip_reason == "read twice"


@pytest.fixture(scope="module")
def ecommerce(tmp_path_factory):
    world = FileScenarioWorld(ECOMMERCE)
    with running_copy(world, tmp_path_factory.mktemp("ecommerce")) as lw:
        daemon = LocalDaemon(lw, env=world.env())
        night = world.play_night(lw, world.history_nights, [])
        daemon.tick(at=night.watched_at)  # an ordinary night first
        ticks = Ticks(daemon)
        ticks.settle()
        yield world, lw, daemon, ticks


def test_on_another_world_idle_ticks_read_nothing_and_a_fault_is_still_diagnosed(ecommerce):
    world, lw, daemon, ticks = ecommerce
    assert ticks.idle() == dict.fromkeys(GATED, 0)
    store = IncidentStore(daemon.defs.resources["snowflake"], ticks.ops)
    event = world.parse_event({"kind": "duplicate_load", "table": "ORDER_LINES"}, world.history_nights)
    night = world.play_night(lw, world.history_nights + 1, [event])
    with business_clock(night.watched_at):
        outcome = daemon._tick_run_sensor()  # the run sensor and its checks run, which opens the incident
    assert outcome.checks and not all(c.passed for c in outcome.checks)
    (incident,) = store.list(status="open")

    requests, _ = ticks.tick("incident_sensor")
    assert [(r.job_name, r.tags["dw/incident_id"]) for r in requests] == [
        (DIAGNOSE_JOB, incident.incident_id)
    ]
    result = daemon.repo.get_job(DIAGNOSE_JOB).execute_in_process(
        instance=daemon.instance, tags=requests[0].tags, run_config=QUIET
    )
    assert result.success
    assert latest_diagnosis(store, incident.incident_id)[0].classification == "duplication"
    ticks.settle()
    assert ticks.idle() == dict.fromkeys(GATED, 0), "an open, diagnosed incident costs nothing idle"
