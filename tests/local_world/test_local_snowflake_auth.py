"""The local Snowflake signs users in as Snowflake does (local/dw_local/snowflake_auth.py), over its real socket:
a local world requires key pair of the product's user (its default, as the product advises a deployment) and
takes the product's key-pair sign-in, without the password warning, and refuses its password; a JWT is
verified against the user's registered public key; a programmatic access token and an OAuth token are
checked against the user's own. The product signs in from its environment variables (warehouse_from_env)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dw_dagster.config import DwConfigError
from dw_dagster.warehouse import settings
from dw_dagster.warehouse.connections import WarehouseUnavailable
from dw_dagster.warehouse.resources import warehouse_from_env
from dw_local import snowflake_auth
from dw_local.world import LOCAL_SNOWFLAKE_PASSWORD, LocalWorld
from dw_local.world_clock import clock_env, clock_file

PAT = "pat-local-0f6b2c4e9a"  # not a secret: registered in this test's own server
OAUTH = "oauth-local-77d1e0"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("keypair") / "local"
    with (
        pytest.MonkeyPatch.context() as env,
        LocalWorld(root, services=("snowflake",)) as lw,
    ):
        # Read by the connector from this process's environment (else a connect may probe cloud metadata).
        env.setenv("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")
        snowflake_auth.register_user(
            lw.root / "snowflake", "PAT_USER", ["PROGRAMMATIC_ACCESS_TOKEN"], tokens=[PAT]
        )
        snowflake_auth.register_user(lw.root / "snowflake", "OAUTH_USER", ["OAUTH"], oauth_tokens=[OAUTH])
        yield lw


def _sign_in(env: dict[str, str]) -> list[tuple]:
    """Signs in as the product does and runs one statement."""
    warehouse = warehouse_from_env(env, resolved=True)
    with warehouse.tagged_connection("test.sign_in") as conn:
        cur = conn.cursor()
        cur.execute("SELECT 1")
        return cur.fetchall()


def _without_sign_in(world: LocalWorld, **given: str) -> dict[str, str]:
    env = {
        k: v for k, v in world.env().items() if k not in ("SNOWFLAKE_PASSWORD", "SNOWFLAKE_PRIVATE_KEY_PATH")
    }
    return {**env, **given}


def test_the_product_signs_in_with_its_key_pair(world, caplog, monkeypatch):
    env = world.env()
    assert "SNOWFLAKE_PASSWORD" not in env and env["SNOWFLAKE_PRIVATE_KEY_PATH"]
    # Every process of the world builds the resource: none warns that it signs in by password.
    monkeypatch.setattr(settings, "_warn_password_sign_in", settings._warn_password_sign_in.__wrapped__)
    with caplog.at_level(logging.WARNING, logger=settings.__name__):
        assert _sign_in(env) == [(1,)]
    assert [r.getMessage() for r in caplog.records if r.name == settings.__name__] == []


def test_a_process_on_the_worlds_clock_signs_in_with_its_key_pair(world, tmp_path):
    """The commands of world.env and the UI's processes run on the world's clock (June 2025): the key-pair
    token they sign is still valid on the clock the local Snowflake verifies it on, as Snowflake's own."""
    clock = clock_file(tmp_path)
    clock.parent.mkdir(parents=True)
    clock.write_text(json.dumps({"offset_seconds": timedelta(days=-538).total_seconds()}))
    code = (
        "from datetime import UTC, datetime; from dw_dagster.warehouse.resources import warehouse_from_env\n"
        "with warehouse_from_env(resolved=True).tagged_connection('test.clock') as conn:\n"
        "    cur = conn.cursor(); cur.execute('SELECT 1'); print(datetime.now(UTC).year, cur.fetchall())"
    )
    env = {**os.environ, **world.env(), **clock_env(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2025", "[(1,)]"]


def test_the_key_as_pem_text_signs_in_too(world):
    pem = (world.root / "keys" / "snowflake_rsa_key.p8").read_text()
    assert _sign_in(_without_sign_in(world, SNOWFLAKE_PRIVATE_KEY=pem)) == [(1,)]


def test_a_password_is_refused_by_the_key_pair_policy(world):
    env = _without_sign_in(world, SNOWFLAKE_PASSWORD=LOCAL_SNOWFLAKE_PASSWORD)
    with pytest.raises(
        WarehouseUnavailable, match="refused the sign-in.*rejected by the current authentication policy"
    ):
        _sign_in(env)


def test_a_key_the_user_has_not_registered_is_refused(world, tmp_path):
    other = tmp_path / "other.p8"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(WarehouseUnavailable, match="JWT token is invalid"):
        _sign_in(_without_sign_in(world, SNOWFLAKE_PRIVATE_KEY_PATH=str(other)))


def test_a_programmatic_access_token_signs_in_and_a_wrong_one_is_refused(world):
    env = _without_sign_in(world, SNOWFLAKE_USER="PAT_USER", SNOWFLAKE_TOKEN=PAT)
    assert _sign_in(env) == [(1,)]
    with pytest.raises(WarehouseUnavailable, match="Programmatic access token is invalid"):
        _sign_in({**env, "SNOWFLAKE_TOKEN": PAT + "x"})
    # A user whose policy allows tokens only is refused a key pair.
    with pytest.raises(WarehouseUnavailable, match="rejected by the current authentication policy"):
        _sign_in(world.env() | {"SNOWFLAKE_USER": "PAT_USER"})


def test_an_oauth_token_signs_in_with_the_oauth_authenticator(world):
    env = _without_sign_in(
        world, SNOWFLAKE_USER="OAUTH_USER", SNOWFLAKE_TOKEN=OAUTH, SNOWFLAKE_AUTHENTICATOR="oauth"
    )
    assert _sign_in(env) == [(1,)]
    with pytest.raises(WarehouseUnavailable, match="Invalid OAuth access token"):
        _sign_in({**env, "SNOWFLAKE_TOKEN": "not-issued"})


def test_other_users_still_sign_in_with_a_password_as_the_worlds_other_clients_do(world):
    env = _without_sign_in(world, SNOWFLAKE_USER="COALESCE", SNOWFLAKE_PASSWORD="anything")
    assert _sign_in(env) == [(1,)]


def test_no_sign_in_variable_is_named_before_connecting(world):
    with pytest.raises(DwConfigError, match="none of SNOWFLAKE_PRIVATE_KEY_PATH, SNOWFLAKE_PRIVATE_KEY"):
        warehouse_from_env(_without_sign_in(world), resolved=True)
