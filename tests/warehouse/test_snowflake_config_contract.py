"""The warehouse resource takes dagster-snowflake's ``SnowflakeResource`` settings and gives the Snowflake
connector the same arguments (dw_dagster/warehouse/snowflake_config.py), without importing Snowpark and
``snowflake.core`` into every process that loads the code location. What ``SnowflakeResource`` gives for
each kind of setting is recorded (tests/fixtures/snowflake_resource/record.py) and replayed here."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from dw_dagster.warehouse.resources import WarehouseResource

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "snowflake_resource"
sys.path.insert(0, str(FIXTURE))
from record import filled, keys  # noqa: E402 - the recorder's own placeholders and keys

RECORDED = json.loads((FIXTURE / "recorded.json").read_text())


@pytest.fixture(scope="module")
def values(tmp_path_factory) -> dict[str, str]:
    return keys(tmp_path_factory.mktemp("keys"))


def _der(settings: dict, values: dict[str, str]) -> bytes:
    """The key a case names, as unencrypted PKCS#8 DER."""
    if "private_key_path" in settings or settings.get("private_key") == "$ENCRYPTED_KEY":
        pem, password = Path(values["$ENCRYPTED_KEY_PATH"]).read_bytes(), b"s3cret"
    else:
        pem, password = values["$PLAIN_KEY"].encode(), None
    key = serialization.load_pem_private_key(pem, password=password)
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.mark.parametrize("name", sorted(RECORDED["cases"]))
def test_the_connector_gets_what_snowflake_resource_gives_it(values, name):
    case = RECORDED["cases"][name]
    expected = dict(case["connect_args"])
    args = WarehouseResource(**filled(case["settings"], values))._connection_args
    if expected.get("private_key") == "$DER":
        # The same key, given loaded (the connector takes bytes or the key object; a key loaded once a
        # process spares the connector's check of it on every connection).
        expected["private_key"] = _der(case["settings"], values)
        args["private_key"] = args["private_key"].private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    assert args == expected


@pytest.mark.parametrize("name", sorted(RECORDED["refused"]))
def test_settings_snowflake_resource_refuses_are_refused_with_its_reason(name):
    case = RECORDED["refused"][name]
    with pytest.raises(Exception) as refused:
        WarehouseResource(**case["settings"])
    assert case["reason"] in str(refused.value)


def test_a_key_that_is_not_a_key_is_refused_naming_what_to_do():
    resource = WarehouseResource(user="U", private_key=base64.b64encode(b"not a key").decode())
    with pytest.raises(ValueError, match="Unable to load private key. You may need to base64 encode"):
        _ = resource._connection_args


def test_the_recording_covers_every_setting_the_resource_passes_on():
    given = {k for case in RECORDED["cases"].values() for k in case["settings"]}
    fields = {f.alias or name for name, f in WarehouseResource.model_fields.items()} - {
        "retry_backoff_seconds"
    }
    assert fields <= given


def test_loading_the_code_location_imports_neither_snowpark_nor_snowflake_core():
    script = (
        "import sys\n"
        "from dw_dagster.warehouse.resources import warehouse_from_env\n"
        "import dw_dagster.app.components, dw_dagster.app.definitions\n"
        "warehouse_from_env({'SNOWFLAKE_DATABASE': 'DW'})\n"
        "print(sorted(m for m in ('dagster_snowflake', 'snowflake.snowpark', 'snowflake.core') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
