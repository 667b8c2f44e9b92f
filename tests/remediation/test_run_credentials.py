"""The approvers' own Snowflake credentials for a rerun (the context file's ``run_as``): a password (or a
programmatic access token in its place) as Coalesce's Basic, or a key pair as KeyPair (``snowflakeKeyPairKey``,
``snowflakeKeyPairPass``); what startRun then carries, through the real client; and the clear errors, naming
the file, the field or the variable. The key pair signing a rerun in against the simulator and the local
Snowflake: ``tests/local_world/test_coalesce_fidelity.py``."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dw_dagster.coalesce import CoalesceClient, CoalesceWorkspace
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import load_context_file
from dw_dagster.records.remediation import Approval
from dw_dagster.remediation.run_credentials import run_credentials

EMAIL = "priya.raman@example.com"
KEY_VAR, PASS_VAR, PASSWORD_VAR = "DW_TEST_RUN_KEY", "DW_TEST_RUN_KEY_PASS", "DW_TEST_RUN_PASSWORD"


def _context(tmp_path: Path, run_as: dict) -> Path:
    path = tmp_path / "context.yaml"
    member = {
        "name": "Priya Raman",
        "email": EMAIL,
        "run_as": {"snowflake_username": "PRIYA_RAMAN", **run_as},
    }
    team = {"name": "Inventory analytics", "slack_channel": "#inventory-analytics", "members": [member]}
    path.write_text(yaml.safe_dump({"teams": {"inventory-analytics": team}}))
    return path


def _credentials(tmp_path: Path, run_as: dict):
    approval = Approval(
        plan_id="p", team="inventory-analytics", approver="Priya Raman", email=EMAIL, at=datetime.now(UTC),
        run_id="r",
    )  # fmt: skip
    workspace = CoalesceWorkspace(api_token="t", environment_ids=["2"])
    return run_credentials(workspace, load_context_file(_context(tmp_path, run_as)), approval)


def _pem(passphrase: bytes | None = None) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    encryption = (
        serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()


def _start_run_body(credentials) -> dict:
    """What the real client sends to startRun with these credentials."""
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"runCounter": 7})

    with CoalesceClient("t", "https://app.coalescesoftware.io", transport=httpx.MockTransport(handler)) as c:
        assert c.start_run("2", job_id=1, user_credentials=credentials) == 7
    return sent[0]["userCredentials"]


def test_a_key_pair_goes_to_coalesce_as_keypair_with_its_passphrase(tmp_path, monkeypatch):
    pem = _pem(b"open sesame")
    monkeypatch.setenv(KEY_VAR, pem)
    monkeypatch.setenv(PASS_VAR, "open sesame")
    credentials = _credentials(
        tmp_path, {"private_key_env": KEY_VAR, "private_key_passphrase_env": PASS_VAR, "snowflake_role": "R"}
    )
    assert _start_run_body(credentials) == {
        "snowflakeUsername": "PRIYA_RAMAN", "snowflakeAuthType": "KeyPair", "snowflakeKeyPairKey": pem,
        "snowflakeKeyPairPass": "open sesame", "snowflakeRole": "R",
    }  # fmt: skip
    # Never shown: the key and its passphrase are masked wherever the credentials are printed.
    assert "PRIVATE KEY" not in repr(credentials) and "open sesame" not in repr(credentials)


def test_the_key_may_be_given_as_its_base64_and_an_unencrypted_one_needs_no_passphrase(tmp_path, monkeypatch):
    pem = _pem()
    monkeypatch.setenv(KEY_VAR, base64.b64encode(pem.encode()).decode())
    body = _start_run_body(_credentials(tmp_path, {"private_key_env": KEY_VAR}))
    assert body["snowflakeAuthType"] == "KeyPair" and body["snowflakeKeyPairKey"] == pem
    assert "snowflakeKeyPairPass" not in body


def test_a_password_or_a_programmatic_access_token_goes_as_basic(tmp_path, monkeypatch):
    monkeypatch.setenv(PASSWORD_VAR, "pat-0123456789abcdef")
    body = _start_run_body(_credentials(tmp_path, {"password_env": PASSWORD_VAR}))
    assert body == {
        "snowflakeUsername": "PRIYA_RAMAN", "snowflakeAuthType": "Basic", "snowflakePassword": "pat-0123456789abcdef",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("run_as", "expected"),
    [
        ({}, "run_as: Value error, expected one of password_env (a password or programmatic access token) and "
             "private_key_env (a key pair), got neither"),
        ({"password_env": PASSWORD_VAR, "private_key_env": KEY_VAR}, "got both"),
        ({"password_env": PASSWORD_VAR, "private_key_passphrase_env": PASS_VAR},
         "private_key_passphrase_env is the passphrase of private_key_env's key"),
        ({"private_key_env": "lower_case"}, "run_as.private_key_env: String should match pattern"),
    ],
)  # fmt: skip
def test_a_run_as_without_exactly_one_credential_is_refused_naming_file_and_field(tmp_path, run_as, expected):
    with pytest.raises(DwConfigError) as refused:
        load_context_file(_context(tmp_path, run_as))
    message = str(refused.value)
    assert "context.yaml" in message and "teams.inventory-analytics.members.0.run_as" in message
    assert expected in message


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, f"{KEY_VAR}: not set (the PEM private key of PRIYA_RAMAN's key pair)"),
        ({KEY_VAR: "not a key"}, f"{KEY_VAR}: expected a PEM private key or its base64, got neither"),
        ({KEY_VAR: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"},
         f"{KEY_VAR}: not a private key that loads"),
        ({KEY_VAR: "ENCRYPTED"}, f"{KEY_VAR}: the private key is encrypted; name the variable holding its passphrase"),
    ],
)  # fmt: skip
def test_a_key_that_cannot_be_used_fails_the_rerun_naming_its_variable_and_whose_it_is(
    tmp_path, monkeypatch, env, expected
):
    monkeypatch.delenv(KEY_VAR, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, _pem(b"secret") if value == "ENCRYPTED" else value)
    with pytest.raises(dg.Failure) as failed:
        _credentials(tmp_path, {"private_key_env": KEY_VAR})
    assert expected in str(failed.value) and "Priya Raman's Snowflake credentials" in str(failed.value)
    assert "PRIVATE KEY-----\nAAAA" not in str(failed.value)


def test_a_wrong_or_missing_passphrase_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, _pem(b"open sesame"))
    monkeypatch.setenv(PASS_VAR, "open barley")
    run_as = {"private_key_env": KEY_VAR, "private_key_passphrase_env": PASS_VAR}
    with pytest.raises(
        dg.Failure, match=f"{KEY_VAR}: not a private key that loads with the passphrase in {PASS_VAR}"
    ):
        _credentials(tmp_path, run_as)
    monkeypatch.delenv(PASS_VAR)
    with pytest.raises(dg.Failure, match=f"{PASS_VAR}: not set"):
        _credentials(tmp_path, run_as)
