"""The warehouse resource takes dagster-snowflake's ``SnowflakeResource`` settings and gives the Snowflake
connector the same arguments (dw_dagster/warehouse/snowflake_config.py), without importing Snowpark and
``snowflake.core`` into every process that loads the code location."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from dagster_snowflake import SnowflakeResource

from dw_dagster.warehouse.resources import WarehouseResource


def _pem(password: bytes | None = None) -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("keys")
    plain, encrypted = _pem(), _pem(b"s3cret")
    (folder / "encrypted.p8").write_bytes(encrypted)
    return {
        "plain": plain.decode(),
        "base64": base64.b64encode(plain).decode(),
        "encrypted_path": str(folder / "encrypted.p8"),
    }


def _settings(keys: dict[str, str]) -> dict[str, dict]:
    base = {"account": "xy12345.eu-west-1", "user": "DW_SVC", "database": "DW_PROD", "warehouse": "OPS_WH"}
    return {
        "password": {**base, "password": "pw", "role": "DW_ROLE", "schema": "DW_OPS"},
        "timeouts and session": {
            **base,
            "password": "pw",
            "login_timeout": 10,
            "network_timeout": 120,
            "autocommit": False,
            "client_session_keep_alive": True,
            "client_prefetch_threads": 2,
            "timezone": "UTC",
            "paramstyle": "qmark",
            "validate_default_parameters": True,
            "ocsp_response_cache_filename": "/tmp/o",
        },  # fmt: skip
        "private key": {**base, "private_key": keys["plain"]},
        "base64 private key": {**base, "private_key": keys["base64"]},
        "encrypted key file": {
            **base,
            "private_key_path": keys["encrypted_path"],
            "private_key_password": "s3cret",
        },
        "authenticator": {**base, "authenticator": "externalbrowser"},
        "authenticator and password": {**base, "authenticator": "username_password_mfa", "password": "pw"},
        "additional args": {
            **base,
            "password": "pw",
            "additional_snowflake_connection_args": {"host": "127.0.0.1", "port": 8080, "protocol": "http"},
        },  # fmt: skip
        "additional args override": {
            **base,
            "password": "pw",
            "additional_snowflake_connection_args": {"application": "mine", "user": "X"},
        },  # fmt: skip
    }


@pytest.mark.parametrize(
    "name",
    [
        "password", "timeouts and session", "private key", "base64 private key", "encrypted key file",
        "authenticator", "authenticator and password", "additional args", "additional args override",
    ],
)  # fmt: skip
def test_the_connector_gets_what_snowflake_resource_gives_it(keys, name):
    settings = _settings(keys)[name]
    ours = WarehouseResource(**settings)._connection_args
    assert ours == dict(SnowflakeResource(**settings)._connection_args)
    assert "retry_backoff_seconds" not in ours


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"user": "U"}, "Password, private key, or authenticator authentication required"),
        ({"user": "U", "password": "pw", "private_key": "k"}, "Cannot provide both password and private key"),
        ({"user": "U", "password": "pw", "paramstyle": "format"}, "'paramstyle' configuration value must be"),
    ],
)
def test_settings_snowflake_resource_refuses_are_refused_with_its_message(settings, message):
    with pytest.raises(Exception, match=message):
        SnowflakeResource(**settings)
    with pytest.raises(Exception, match=message):
        WarehouseResource(**settings)


def test_a_key_that_is_not_a_key_is_refused_as_snowflake_resource_refuses_it():
    settings = {"user": "U", "private_key": base64.b64encode(b"not a key").decode()}
    for resource in (SnowflakeResource(**settings), WarehouseResource(**settings)):
        with pytest.raises(ValueError, match="Unable to load private key"):
            _ = resource._connection_args


def test_loading_the_code_location_imports_neither_snowpark_nor_snowflake_core():
    script = (
        "import sys\n"
        "from dw_dagster.warehouse.resources import warehouse_from_env\n"
        "import dw_dagster.components, dw_dagster.definitions\n"
        "warehouse_from_env({'SNOWFLAKE_DATABASE': 'DW'})\n"
        "print(sorted(m for m in ('dagster_snowflake', 'snowflake.snowpark', 'snowflake.core') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
