"""dagster-snowflake's ``SnowflakeResource`` configuration and connection arguments, without its imports.

``dagster_snowflake.resources`` imports Snowpark and ``snowflake.core`` whether or not they are used, and
Dagster's component loader imports every installed package that registers components: about 3.5 s of every
process that loads the code location (each run worker, each ``dw-dagster`` command, the code server), for
a product that only opens connector connections. So dagster-snowflake is not a dependency: this resource
takes the same settings under the same names, validated the same way, and gives
``snowflake.connector.connect`` the arguments ``SnowflakeResource`` gives it (recorded from it for every
kind of setting and replayed by ``tests/warehouse/test_snowflake_config_contract.py``). The SQLAlchemy and
ADBC connectors' settings are not offered: nothing here uses them.
"""

from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, field_validator, model_validator

# What dagster-snowflake names its connections with (dagster_snowflake/constants.py), so that Snowflake's
# partner attribution sees the same application.
APPLICATION = "DagsterLabs_Dagster"
PARAMSTYLES = ("pyformat", "qmark", "numeric")
# Passed to the connector as they are, when set.
_CONNECT_FIELDS = (
    "account",
    "user",
    "password",
    "database",
    "schema",
    "role",
    "warehouse",
    "autocommit",
    "client_prefetch_threads",
    "client_session_keep_alive",
    "login_timeout",
    "network_timeout",
    "ocsp_response_cache_filename",
    "validate_default_parameters",
    "paramstyle",
    "timezone",
    "authenticator",
)


class SnowflakeConnectionResource(dg.ConfigurableResource):
    """The connector settings of dagster-snowflake's ``SnowflakeResource`` (same names and meaning; see
    the connector's documentation for each)."""

    account: str | None = Field(default=None, description="Snowflake account identifier.")
    user: str = Field(description="User login name.")
    password: str | None = Field(default=None, description="User password.")
    database: str | None = Field(default=None, description="Default database.")
    schema_: str | None = Field(default=None, alias="schema", description="Default schema.")
    role: str | None = Field(default=None, description="Default role.")
    warehouse: str | None = Field(default=None, description="Default warehouse.")
    private_key: str | None = Field(
        default=None, description="PEM private key for key-pair authentication (optionally base64-encoded)."
    )
    private_key_password: str | None = Field(
        default=None, description="Password of an encrypted private key."
    )
    private_key_path: str | None = Field(default=None, description="Path of a PEM private key file.")
    autocommit: bool | None = Field(default=None, description="Session autocommit; None: Snowflake's.")
    client_prefetch_threads: int | None = Field(default=None, description="Threads downloading results.")
    client_session_keep_alive: bool | None = Field(default=None, description="Keep the session alive.")
    login_timeout: int | None = Field(default=None, description="Seconds for the login.")
    network_timeout: int | None = Field(default=None, description="Seconds for every other request.")
    ocsp_response_cache_filename: str | None = Field(default=None, description="OCSP response cache file.")
    validate_default_parameters: bool | None = Field(
        default=None, description="Fail the login if the warehouse, database or schema does not exist."
    )
    paramstyle: str | None = Field(default=None, description="pyformat (default), qmark or numeric.")
    timezone: str | None = Field(default=None, description="Session time zone; None: Snowflake's.")
    authenticator: str | None = Field(default=None, description="Authentication mechanism.")
    additional_snowflake_connection_args: dict[str, Any] | None = Field(
        default=None, description="Further keyword arguments for snowflake.connector.connect."
    )

    @field_validator("paramstyle")
    @classmethod
    def _known_paramstyle(cls, value: str | None) -> str | None:
        if value is not None and value not in PARAMSTYLES:
            raise ValueError(
                f"Snowflake Resource: 'paramstyle' configuration value must be one of: {','.join(PARAMSTYLES)}."
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _one_way_to_authenticate(cls, values: Any) -> Any:
        given = sum(values.get(k) is not None for k in ("password", "private_key", "private_key_path"))
        if given == 0 and values.get("authenticator") is None:
            raise ValueError(
                "Missing config: Password, private key, or authenticator authentication required for "
                "Snowflake resource."
            )
        if given > 1:
            raise ValueError(
                "Incorrect config: Cannot provide both password and private key authentication to "
                "Snowflake Resource."
            )
        return values

    @property
    def _connection_args(self) -> dict[str, Any]:
        """``snowflake.connector.connect``'s keyword arguments, as ``SnowflakeResource`` builds them."""
        values = {name: getattr(self, "schema_" if name == "schema" else name) for name in _CONNECT_FIELDS}
        args = {name: value for name, value in values.items() if value is not None}
        if self.private_key is not None or self.private_key_path is not None:
            args["private_key"] = _private_key(
                self.private_key, self.private_key_path, self.private_key_password
            )
        args["application"] = APPLICATION
        args.update(self.additional_snowflake_connection_args or {})
        return args


def _private_key(pem: str | None, path: str | None, password: str | None) -> Any:
    """The private key as the connector takes it (a loaded key object), from a PEM text, which may be
    base64-encoded to keep it on one line, or a PEM file (which wins when both are set)."""
    raw = Path(path).read_bytes() if path is not None else (pem or "").encode()
    return _loaded_key(raw, password)


@functools.lru_cache(maxsize=4)
def _loaded_key(raw: bytes, password: str | None) -> Any:
    """Loaded once a process: loading checks the RSA key, ~0.17 s of CPU, and the connector given DER bytes
    (as ``SnowflakeResource`` gives them) loads and checks it again for every connection; given the key
    object it signs with it (``snowflake.connector.auth.keypair``: bytes, or an RSA or EC private key)."""
    from cryptography.hazmat.primitives import serialization

    secret = password.encode() if password is not None else None
    try:
        return serialization.load_pem_private_key(raw, password=secret)
    except ValueError:
        try:
            return serialization.load_pem_private_key(base64.b64decode(raw), password=secret)
        except ValueError:
            raise ValueError(
                "Unable to load private key. You may need to base64 encode your private key. You can "
                "retrieve the base64 encoded key with this shell command: cat rsa_key.p8 | base64"
            ) from None
