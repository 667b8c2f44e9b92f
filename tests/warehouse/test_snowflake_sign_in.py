"""How the warehouse resource signs in, from the environment (``warehouse_from_env``): a key pair (file or PEM
text, encrypted or not), a programmatic access token or an OAuth token, as dagster-snowflake's
``SnowflakeResource`` takes them; a password still, with a warning; one way at a time. Signing in over the
socket: tests/local_world/test_local_snowflake_auth.py."""

from __future__ import annotations

import logging

import dagster as dg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dw_dagster.config import DwConfigError
from dw_dagster.warehouse import settings
from dw_dagster.warehouse.resources import WarehouseResource, warehouse_from_env
from dw_dagster.warehouse.settings import direct_warehouse

BASE = {"SNOWFLAKE_ACCOUNT": "xy12345", "SNOWFLAKE_USER": "DW_SVC", "SNOWFLAKE_DATABASE": "DW_PROD"}


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _der(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem(key: rsa.RSAPrivateKey, passphrase: bytes | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _args(env: dict[str, str]) -> dict:
    args = warehouse_from_env(env, resolved=True)._resolved_connection_args()
    # The commands sign in from the same settings without building the resource.
    assert direct_warehouse(env).connector.args == args
    return args


def test_a_key_file_signs_in_with_the_key_and_no_password(key, tmp_path):
    path = tmp_path / "rsa_key.p8"
    path.write_bytes(_pem(key))
    args = _args({**BASE, "SNOWFLAKE_PRIVATE_KEY_PATH": str(path)})
    assert _der(args["private_key"]) == _der(key) and "password" not in args and "authenticator" not in args


def test_an_encrypted_key_as_pem_text_is_opened_with_its_passphrase(key):
    pem = _pem(key, b"s3cret").decode()
    args = _args({**BASE, "SNOWFLAKE_PRIVATE_KEY": pem, "SNOWFLAKE_PRIVATE_KEY_PASSWORD": "s3cret"})
    assert _der(args["private_key"]) == _der(key)
    with pytest.raises(ValueError, match="Unable to load private key"):
        _args({**BASE, "SNOWFLAKE_PRIVATE_KEY": pem, "SNOWFLAKE_PRIVATE_KEY_PASSWORD": "wrong"})


@pytest.mark.parametrize(
    ("authenticator", "expected"), [(None, "PROGRAMMATIC_ACCESS_TOKEN"), ("oauth", "OAUTH")]
)
def test_a_token_signs_in_with_its_authenticator(authenticator, expected):
    env = {**BASE, "SNOWFLAKE_TOKEN": "tok-123"}
    if authenticator:
        env["SNOWFLAKE_AUTHENTICATOR"] = authenticator
    args = _args(env)
    assert args["authenticator"] == expected and args["token"] == "tok-123" and "password" not in args


def test_a_token_for_an_authenticator_that_takes_none_is_refused():
    with pytest.raises(
        DwConfigError, match="SNOWFLAKE_AUTHENTICATOR: 'EXTERNALBROWSER' takes no SNOWFLAKE_TOKEN"
    ):
        warehouse_from_env({**BASE, "SNOWFLAKE_TOKEN": "t", "SNOWFLAKE_AUTHENTICATOR": "externalbrowser"})


def test_two_ways_to_sign_in_are_refused_naming_both(tmp_path):
    with pytest.raises(DwConfigError, match="SNOWFLAKE_PRIVATE_KEY_PATH and SNOWFLAKE_PASSWORD are all set"):
        warehouse_from_env({**BASE, "SNOWFLAKE_PRIVATE_KEY_PATH": "/k.p8", "SNOWFLAKE_PASSWORD": "pw"})


def test_a_password_still_signs_in_with_a_warning_that_never_shows_it(caplog, monkeypatch):
    monkeypatch.setattr(settings, "_warn_password_sign_in", settings._warn_password_sign_in.__wrapped__)
    with caplog.at_level(logging.WARNING, logger=settings.__name__):
        args = _args({**BASE, "SNOWFLAKE_PASSWORD": "hunter2-pw"})
    assert args["password"] == "hunter2-pw"
    # One warning for the resource, one for the commands' connections (uncached here; once a process else).
    warned = [r.getMessage() for r in caplog.records if r.name == settings.__name__]
    assert len(warned) == 2
    assert all("blocking password-only sign-ins" in w and "hunter2" not in w for w in warned)


def test_the_secrets_stay_env_vars_in_the_definitions_and_the_token_is_read_in_a_run(monkeypatch):
    """Dagster leaves an EnvVar inside a mapping field as {"env": NAME}; the token is read at connect."""
    monkeypatch.setenv("SNOWFLAKE_TOKEN", "tok-in-a-run")
    monkeypatch.setenv("SNOWFLAKE_ACCOUNT", "xy12345")
    monkeypatch.setenv("SNOWFLAKE_USER", "DW_SVC")
    warehouse = warehouse_from_env({**BASE, "SNOWFLAKE_TOKEN": "tok-in-a-run"})
    assert isinstance(warehouse.additional_snowflake_connection_args["token"], dg.EnvVar)
    seen = {}

    @dg.asset
    def reads_the_token(warehouse: WarehouseResource) -> None:
        seen.update(warehouse._resolved_connection_args())

    assert dg.materialize([reads_the_token], resources={"warehouse": warehouse}).success
    assert seen["token"] == "tok-in-a-run" and seen["authenticator"] == "PROGRAMMATIC_ACCESS_TOKEN"


def test_a_session_time_zone_other_than_utc_is_refused():
    with pytest.raises(ValueError, match="reads and writes every time in UTC"):
        WarehouseResource(user="U", password="pw", timezone="America/Los_Angeles")
