"""The org-wide stop holds the L3 hold notice; an unanswered approval expires, cancels and escalates."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import httpx
import pytest

from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_notifier import IncidentNotifier
from dw_dagster.remediation.approvals import ApprovalBook, ApprovalError
from dw_dagster.remediation.control import OrgControl
from dw_dagster.remediation.gate import approve_run
from dw_dagster.remediation.identity import command_signer
from dw_dagster.remediation.proposer import expire_pending
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def stopped_night(ordinary_world):
    """The reference night played while an org-wide stop is in force (after night 60, played and watched:
    conftest ``ordinary_world``)."""
    daemon = LocalDaemon(ordinary_world)
    ops = OpsSchema("DW_PROD", "DW_OPS")
    context = load_context_file(daemon.settings.context_file)
    control = OrgControl(daemon.defs.resources["snowflake"], ops, context)
    world = DistributorWorld()
    # Omar (data-platform, the domain's escalation team) stops it: --as alone, the local world's way.
    state = control.set("stop", command_signer(context, "Omar Haddad"), "warehouse migration tonight")
    assert state.stopped
    world.play_reference_night(ordinary_world.snowflake, ordinary_world.coalesce_client())
    outcome = daemon.tick()
    assert [r.success for r in outcome.diagnoses] == [True]
    store = IncidentStore(daemon.defs.resources["snowflake"], ops)
    (incident,) = store.list(status="open")
    return daemon, store, control, incident


def _messages(lw, channel=None):
    messages = httpx.get(f"{lw.slack_url}/_sink/messages").json()["messages"]
    return [m for m in messages if channel is None or m["channel"] == channel]


def test_the_stop_blocks_the_l3_hold_notice(stopped_night):
    daemon, store, control, incident = stopped_night
    lw = daemon.lw
    assert _messages(lw, "#buyers") == [], "nothing autonomous goes out while stopped"
    owners = _messages(lw, "#inventory-analytics")
    assert owners, "observing and alerting the owners is not autonomous action: it still happens"
    assert any("proposed" in (m["text"] or "").lower() for m in owners), "the hold goes to a person instead"
    assert "STOPPED by Omar Haddad" in control.state().describe()


def test_a_hold_queued_before_the_stop_waits_in_the_outbox(stopped_night):
    daemon, store, control, incident = stopped_night
    from dw_dagster.incidents.events import latest_diagnosis
    from dw_dagster.notifications.routing import route_incident

    diagnosis, radius = latest_diagnosis(store, incident.incident_id)
    context = load_context_file(daemon.settings.context_file)
    notifier = IncidentNotifier(
        daemon.defs.resources["slack"],
        store,
        context=context,
        autonomous_dispatch_allowed=control.dispatch_allowed,
    )
    # Routed as if no stop were in force (the notice was enqueued just before the stop was given).
    notifier.notify(incident, diagnosis, radius, route_incident(context, diagnosis, radius, stopped=False))
    assert _messages(daemon.lw, "#buyers") == []
    assert [m.kind for m in notifier.pending(incident.incident_id)] == ["hold"]
    outbox = daemon.defs.get_sensor_def("slack_outbox")
    with daemon._sensor_context(outbox) as sensor_context:
        outbox(sensor_context)
    assert _messages(daemon.lw, "#buyers") == [], "the outbox sensor holds it too"
    control.set("resume", command_signer(load_context_file(daemon.settings.context_file), "Omar Haddad"))
    assert notifier.flush_pending(incident_id=incident.incident_id).sent
    assert len(_messages(daemon.lw, "#buyers")) == 1


def test_an_unanswered_approval_expires_cancels_and_escalates(stopped_night):
    daemon, store, control, incident = stopped_night
    context = load_context_file(daemon.settings.context_file)
    book = ApprovalBook(store, context)
    (run_id,) = daemon.tick().submitted or [
        r.run_id for r in daemon.instance.get_runs(dg.RunsFilter(job_name="remediate_incident"))
    ]
    daemon.tick()  # binds the plan to its run
    (plan,) = book.plans(incident.incident_id)
    assert book.binding(plan).run_id == run_id
    assert expire_pending(daemon.instance, book, daemon.defs.resources["slack"], context) == [], (
        "nothing expires before its time"
    )
    later = plan.expires_at + timedelta(minutes=1)
    assert expire_pending(daemon.instance, book, daemon.defs.resources["slack"], context, now=later) == [
        run_id
    ]
    assert daemon.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    decision = book.decision(plan)
    assert (
        decision.kind == "expired"
        and "planning-ops" in decision.reason
        and "inventory-analytics" in decision.reason
    )
    escalations = [m for m in _messages(daemon.lw) if "Needs a person" in (m["text"] or "")]
    assert "#data-platform" in {m["channel"] for m in escalations}, "the domain's escalation team is told"
    priya = command_signer(context, "Priya Raman")
    with pytest.raises(ApprovalError, match="no remediation run is waiting for approval"):
        approve_run(daemon.instance, book, incident.incident_id, priya.person, priya.prove, priya.via)
    with pytest.raises(ApprovalError, match="not waiting for approval") as refused:
        approve_run(daemon.instance, book, run_id, priya.person, priya.prove, priya.via)
    # An expired plan is not submitted again (issue #29: the message promised it "within a minute").
    assert "within a minute" not in str(refused.value) and "it is not submitted again" in str(refused.value)
    assert daemon.tick().launched == [], "an expired request is never granted"
    assert daemon.tick().submitted == [], "an expired plan is not proposed again"
