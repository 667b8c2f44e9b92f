"""The proofs an approval is verified with, and the binding of a plan to its run: each forgery is refused.

These run the real verification code on real records (a real Ed25519 key, Slack's signature scheme as
the stand-in computes it, the deployment's HMAC seal); the world tests play the same refusals end to end.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import dagster as dg
import pytest

from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import ContextFile
from dw_dagster.notifications.resources import SlackNotifier
from dw_dagster.remediation.identity import (
    IdentityError,
    KeyProof,
    LocalProof,
    SlackProof,
    command_signer,
    load_private_key,
    new_key_pair,
    sign_record,
    unverified_allowed,
    verify_proof,
)
from dw_dagster.remediation.signing import Seal, SealError
from dw_dagster.remediation.slack_request import SlackRequestError, parse_click, verify_request
from dw_dagster.remediation.submission import (
    Binding,
    RunRecordError,
    Submission,
    check_credential_host,
    check_run,
    check_submitted,
    config_digest,
    credential_hosts,
    nonce_hash,
    origin,
    resource_digests,
)
from dw_dagster.warehouse.resources import warehouse_from_env
from dw_local.slack_server import sign

SECRET = "test-signing-secret"
KEY = "k" * 40


def _context(priya_key: str, dana_key: str) -> ContextFile:
    return ContextFile.model_validate(
        {
            "teams": {
                "inventory-analytics": {"name": "Inventory", "slack_channel": "#inv", "members": [
                    {"name": "Priya Raman", "email": "priya@x.example", "slack_user_id": "U0PRIYA01", "approver_key": priya_key},
                ]},
                "planning-ops": {"name": "Planning", "slack_channel": "#plan", "members": [
                    {"name": "Dana Ortiz", "email": "dana@x.example", "slack_user_id": "U0DANA001", "approver_key": dana_key},
                ]},
            }
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    out = {}
    for who in ("priya", "dana"):
        pem, public = new_key_pair()
        (folder / who).write_bytes(pem)
        out[who] = (folder / who, public)
    return out


@pytest.fixture(scope="module")
def context(keys) -> ContextFile:
    return _context(keys["priya"][1], keys["dana"][1])


def _record(**over):
    return {"plan_id": "INC-1-p1", "run_id": "r1", "team": "planning-ops", "approver": "Dana Ortiz",
            "email": "dana@x.example", "at": "2025-06-17T12:40:00Z", "values": {"WAREHOUSE_NAME": "Dallas"},
            "plan_digest": "sha256:abc", **over}  # fmt: skip


def test_a_record_signed_with_its_approvers_key_verifies(keys, context):
    proof = sign_record(load_private_key(keys["dana"][0]), _record())
    assert verify_proof(_record(), proof, context, "dw_approve").name == "Dana Ortiz"


def test_an_altered_record_fails_its_signature(keys, context):
    proof = sign_record(load_private_key(keys["dana"][0]), _record())
    with pytest.raises(IdentityError, match="does not match the record: altered"):
        verify_proof(_record(values={"WAREHOUSE_NAME": "Elsewhere"}), proof, context, "dw_approve")


def test_another_persons_key_cannot_sign_for_them(keys, context):
    """Priya signs a record that names Dana: the key is Priya's, so the record is refused."""
    proof = sign_record(load_private_key(keys["priya"][0]), _record())
    with pytest.raises(IdentityError, match="the proof is Priya Raman's"):
        verify_proof(_record(), proof, context, "dw_approve")


def test_a_key_nobody_holds_in_the_context_file_is_refused(context):
    pem, public = new_key_pair()
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pem, password=None)
    with pytest.raises(IdentityError, match="nobody's approver_key"):
        verify_proof(_record(), sign_record(key, _record()), context, "dw_approve")


def test_a_record_without_proof_is_refused_outside_the_local_world(context, monkeypatch):
    monkeypatch.delenv("DW_ALLOW_UNVERIFIED_APPROVERS", raising=False)
    with pytest.raises(IdentityError, match="recorded without proof"):
        verify_proof(_record(), LocalProof(os_user="dana"), context, "dw_approve")


def test_unverified_approvers_only_where_coalesce_and_snowflake_are_local():
    local = {"DW_ALLOW_UNVERIFIED_APPROVERS": "local-world", "COALESCE_BASE_URL": "http://127.0.0.1:47102",
             "SNOWFLAKE_HOST": "127.0.0.1"}  # fmt: skip
    assert unverified_allowed(local)
    assert not unverified_allowed({**local, "DW_ALLOW_UNVERIFIED_APPROVERS": "yes"})
    with pytest.raises(DwConfigError, match="for the local world only"):
        unverified_allowed({**local, "COALESCE_BASE_URL": "https://app.coalescesoftware.io"})
    with pytest.raises(DwConfigError, match="for the local world only"):
        unverified_allowed({**local, "SNOWFLAKE_HOST": "acme.snowflakecomputing.com"})


def test_the_command_line_needs_the_persons_own_key(keys, context):
    with pytest.raises(IdentityError, match="must prove who runs it"):
        command_signer(context, "Dana Ortiz", env={})
    with pytest.raises(IdentityError, match="is Priya Raman's: it cannot act as Dana Ortiz"):
        command_signer(context, "dana@x.example", env={"DW_APPROVER_KEY_FILE": str(keys["priya"][0])})
    signer = command_signer(context, None, env={"DW_APPROVER_KEY_FILE": str(keys["dana"][0])})
    assert signer.person.name == "Dana Ortiz" and isinstance(signer.prove(_record()), KeyProof)


# -- Slack ---------------------------------------------------------------------------------------------


def _click_body(user="U0DANA001", run_id="r1", action="dw_approve", values=None) -> str:
    payload = {"type": "block_actions", "user": {"id": user}, "channel": {"id": "#plan"},
               "container": {"message_ts": "1.2"}, "response_url": "http://x/r",
               "actions": [{"action_id": action, "value": json.dumps({"plan_id": "INC-1-p1", "run_id": run_id})}],
               "state": {"values": {"b": {f"dw_set:{k}": {"value": v} for k, v in (values or {}).items()}}}}  # fmt: skip
    return urlencode({"payload": json.dumps(payload)})


def test_slack_requests_are_verified_as_slack_signs_them():
    body, now = _click_body(), time.time()
    ts = str(int(now))
    verify_request(body, ts, sign(SECRET, ts, body), SECRET, now=now)
    with pytest.raises(SlackRequestError) as unsigned:
        verify_request(body, None, None, SECRET, now=now)
    assert unsigned.value.problem == "unsigned"
    with pytest.raises(SlackRequestError) as forged:
        verify_request(body, ts, sign("another secret", ts, body), SECRET, now=now)
    assert forged.value.problem == "forged"
    with pytest.raises(SlackRequestError) as altered:
        verify_request(body.replace("r1", "r2"), ts, sign(SECRET, ts, body), SECRET, now=now)
    assert altered.value.problem == "forged"
    old = str(int(now) - 6 * 60)
    with pytest.raises(SlackRequestError) as stale:
        verify_request(body, old, sign(SECRET, old, body), SECRET, now=now)
    assert stale.value.problem == "stale"


def test_a_click_carries_the_user_the_plan_the_run_and_typed_values():
    click = parse_click(_click_body(values={"WAREHOUSE_NAME": "Dallas"}))
    assert (click.user_id, click.plan_id, click.run_id, click.values) == (
        "U0DANA001",
        "INC-1-p1",
        "r1",
        {"WAREHOUSE_NAME": "Dallas"},
    )
    with pytest.raises(SlackRequestError, match="not a click"):
        parse_click("payload=%7B%7D")


def _slack_proof(body: str, at: float) -> SlackProof:
    ts = str(int(at))
    return SlackProof(body=body, timestamp=ts, signature=sign(SECRET, ts, body))


def test_a_recorded_click_verifies_later_and_only_for_its_own_record(context, monkeypatch):
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    at = datetime(2025, 6, 17, 12, 40, tzinfo=UTC).timestamp()
    proof = _slack_proof(_click_body(values={"WAREHOUSE_NAME": "Dallas"}), at)
    record = _record()
    assert verify_proof(record, proof, context, "dw_approve").name == "Dana Ortiz", (
        "hours later, still Slack's"
    )
    with pytest.raises(IdentityError, match="not this record"):
        verify_proof(_record(run_id="r2"), proof, context, "dw_approve")
    with pytest.raises(IdentityError, match="not this record"):
        verify_proof(record, proof, context, "dw_reject")
    with pytest.raises(IdentityError, match="values recorded are not the ones given"):
        verify_proof(_record(values={"WAREHOUSE_NAME": "Elsewhere"}), proof, context, "dw_approve")
    with pytest.raises(IdentityError, match="the proof is Dana Ortiz's"):
        verify_proof(_record(email="priya@x.example", approver="Priya Raman"), proof, context, "dw_approve")
    with pytest.raises(IdentityError, match="not the time of the Slack click"):
        verify_proof(_record(at="2025-06-17T12:00:00Z"), proof, context, "dw_approve")
    tampered = proof.model_copy(update={"body": proof.body.replace("U0DANA001", "U0PRIYA01")})
    with pytest.raises(IdentityError, match="not signed by Slack"):
        verify_proof(_record(), tampered, context, "dw_approve")


def test_a_slack_user_mapped_to_nobody_is_refused(context, monkeypatch):
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    at = datetime(2025, 6, 17, 12, 40, tzinfo=UTC).timestamp()
    proof = _slack_proof(_click_body(user="U0MALLORY"), at)
    with pytest.raises(IdentityError, match="U0MALLORY is nobody's slack_user_id"):
        verify_proof(_record(), proof, context, "dw_approve")


# -- the deployment's seal and the run binding --------------------------------------------------------


def test_a_sealed_record_altered_or_resealed_with_another_key_is_not_sealed():
    seal = Seal(KEY)
    sealed = seal.seal("proposal", {"plan_id": "p", "values": [1, 2]})
    assert seal.is_sealed("proposal", sealed)
    assert not seal.is_sealed("binding", sealed), "a plan's seal is not a binding's"
    assert not seal.is_sealed("proposal", {**sealed, "values": [1, 3]})
    assert not seal.is_sealed("proposal", Seal("x" * 40).seal("proposal", sealed))
    assert not seal.is_sealed("proposal", {"plan_id": "p", "values": [1, 2]}), "an unsealed row is not sealed"
    with pytest.raises(SealError, match="DW_SIGNING_KEY: not set"):
        Seal.from_env({})
    with pytest.raises(SealError, match="at least 32 characters"):
        Seal("short")


def _resources(base_url: str = "http://127.0.0.1:47102", token: str = "t") -> dict:
    return {
        "coalesce": CoalesceWorkspace(base_url=base_url, api_token=token, environment_ids=["2"]),
        "snowflake": warehouse_from_env({"SNOWFLAKE_HOST": "127.0.0.1"}).model_copy(
            update={"account": "a", "user": "u", "password": "p"}
        ),
        "slack": SlackNotifier(token="xoxb", base_url="http://127.0.0.1:47103/api/"),
    }


def _run(run_id: str = "r1", job: str = "remediate_incident", run_config: dict | None = None, **tags: str):
    return dg.DagsterRun(job_name=job, run_id=run_id, run_config=run_config or {},
                         tags={"dw/plan_id": "INC-1-p1", "dw/approval": "pending", **tags})  # fmt: skip


def _binding(seal: Seal, run: dg.DagsterRun | None = None) -> Binding:
    resources = _resources()
    run = run or _run()
    tags = sorted(k for k in run.tags if k != "dw/approval")
    binding = Binding(plan_id="INC-1-p1", seq=1, run_id=run.run_id, job=run.job_name, tag_keys=tags,
                      resources=resource_digests(seal, resources), credential_hosts=credential_hosts(resources["coalesce"]),
                      at=datetime.now(UTC))  # fmt: skip
    return binding.model_copy(update={"config_digest": config_digest(run, binding, seal)})


def test_only_the_bound_run_as_submitted_passes():
    seal = Seal(KEY)
    binding = _binding(seal)
    check_run(binding, _run(), _resources(), seal)
    # The gate's own tag and Dagster's hidden ones change while the run waits: still the bound run.
    check_run(binding, _run(**{"dw/approval": "approved", ".dagster/grpc_info": "{}"}), _resources(), seal)
    with pytest.raises(RunRecordError, match="is not the run dw-dagster submitted"):
        check_run(binding, _run("r2"), _resources(), seal)
    with pytest.raises(RunRecordError, match="is of job"):
        check_run(binding, _run(job="other_job"), _resources(), seal)
    with pytest.raises(RunRecordError, match="configuration .* is not the one bound"):
        check_run(binding, _run(run_config={"resources": {"coalesce": {"config": {"base_url": "http://evil"}}}}),
                  _resources(), seal)  # fmt: skip
    with pytest.raises(RunRecordError, match="configuration .* is not the one bound"):
        check_run(binding, _run(run_config={"ops": {"scoped_rerun": {"config": {"poll_seconds": 1}}}}),
                  _resources(), seal)  # fmt: skip
    with pytest.raises(RunRecordError, match="configuration .* is not the one bound"):
        check_run(binding, _run(**{"dw/plan_id": "INC-1-p2"}), _resources(), seal)
    with pytest.raises(RunRecordError, match="resources coalesce are not configured"):
        check_run(binding, _run(), _resources(base_url="http://evil.example"), seal)
    with pytest.raises(RunRecordError, match="resources coalesce are not configured"):
        check_run(binding, _run(), _resources(token="another"), seal)


def test_a_plan_binds_only_to_a_run_of_exactly_the_configuration_requested():
    """Issue #29's relaunch: a run launched through GraphQL with the held run's tags, its visible one-time
    value included, and changed op config; re-executions and selections; extra tags."""
    seal = Seal(KEY)
    requested = {"ops": {"scoped_rerun": {"config": {"poll_seconds": 15}}}}
    tags = {"dw/plan_id": "INC-1-p1", "dw/approval": "pending"}
    sub = Submission(plan_id="INC-1-p1", seq=2, nonce_sha256=nonce_hash("n0nce"), job="remediate_incident",
                     run_config_digest=seal.keyed_digest(requested), tags=tags, job_tags={"dw/kind": "remediation"},
                     steps=["check_approval", "scoped_rerun"], resources={}, credential_hosts=[],
                     at=datetime.now(UTC))  # fmt: skip
    daemon = {"dw/submission": "n0nce", "dagster/sensor_name": "remediation_proposals", "dagster/run_key": "k",
              "dagster/tick": "7", "dw/kind": "remediation"}  # fmt: skip

    def run(run_config=requested, **more):
        fields = {k: more.pop(k) for k in ("parent_run_id", "root_run_id", "op_selection", "step_keys_to_execute")
                  if k in more}  # fmt: skip
        return dg.DagsterRun(job_name="remediate_incident", run_id="r3", run_config=run_config,
                             tags={**tags, **daemon, **more}, **fields)  # fmt: skip

    check_submitted(sub, run(), seal)
    check_submitted(sub, run(step_keys_to_execute=["check_approval", "scoped_rerun"]), seal)  # every step
    changed = {"ops": {"scoped_rerun": {"config": {"poll_seconds": 15, "rerun_timeout_seconds": 1}}}}
    refusals = {
        "its run config (op config, resources) is not the one dw-dagster requested": run(changed),
        "its tags differ from the ones requested: dagster/max_retries": run(**{"dagster/max_retries": "3"}),
        "its tags differ from the ones requested: dw/approval": run(**{"dw/approval": "approved"}),
        "re-executes run r1": run(parent_run_id="r1", root_run_id="r1"),
        "(op_selection)": run(op_selection=["scoped_rerun"]),
        "(step_keys_to_execute)": run(step_keys_to_execute=["scoped_rerun"]),
        "does not carry the one-time value": run(**{"dw/submission": "guessed"}),
    }
    for why, relaunched in refusals.items():
        with pytest.raises(RunRecordError) as refused:
            check_submitted(sub, relaunched, seal)
        assert why in str(refused.value)


def test_credentials_go_only_to_the_configured_coalesce():
    binding = _binding(Seal(KEY))
    assert binding.credential_hosts == ["http://127.0.0.1:47102"]
    check_credential_host("http://127.0.0.1:47102/", binding)
    for elsewhere in ("http://127.0.0.1:9999", "https://127.0.0.1:47102", "http://attacker.example"):
        with pytest.raises(RunRecordError, match="nothing was sent"):
            check_credential_host(elsewhere, binding)
    assert origin("HTTPS://App.EU.Coalescesoftware.io/api") == "https://app.eu.coalescesoftware.io"


def test_the_resource_digest_hides_the_secrets_it_covers():
    digests = resource_digests(Seal(KEY), _resources(token="very-secret-token"))
    assert "very-secret-token" not in json.dumps(digests)
    envvar = {
        **_resources(),
        "coalesce": CoalesceWorkspace(
            base_url="http://127.0.0.1:47102", api_token=dg.EnvVar("TOKEN_X"), environment_ids=["2"]
        ),
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKEN_X", "t")
        assert resource_digests(Seal(KEY), envvar) == resource_digests(Seal(KEY), _resources()), (
            "an EnvVar and its value are the same configuration"
        )


def test_approver_key_new_writes_a_private_key_only_its_owner_reads(tmp_path: Path):
    from click.testing import CliRunner

    from dw_dagster.app.cli import main

    out = CliRunner().invoke(main, ["approver-key", "new", "--out", str(tmp_path / "me.pem")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "me.pem").stat().st_mode & 0o077 == 0
    public = out.output.split("approver_key: ")[1].strip()
    assert public.startswith("ed25519:") and public in out.output
    again = CliRunner().invoke(main, ["approver-key", "new", "--out", str(tmp_path / "me.pem")])
    assert again.exit_code != 0 and "never overwritten" in again.output
