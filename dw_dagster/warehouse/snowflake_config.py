"""dagster-snowflake's ``SnowflakeResource`` configuration and connection arguments, without its imports.

``dagster_snowflake.resources`` imports Snowpark and ``snowflake.core`` whether or not they are used, and
Dagster's component loader imports every installed package that registers components: about 3.5 s of every
process that loads the code location (each run worker, each ``dw-dagster`` command, the code server), for
a product that only opens connector connections. So dagster-snowflake is not a dependency: this resource
takes the same settings under the same names, validated the same way, and gives
``snowflake.connector.connect`` the arguments ``SnowflakeResource`` gives it (recorded from it for every
kind of setting and replayed by ``tests/warehouse/test_snowflake_config_contract.py``), built by
``settings.connection_args``, which the commands use outside Dagster. The SQLAlchemy and ADBC connectors'
settings are not offered: nothing here uses them.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field, field_validator, model_validator

from dw_dagster.warehouse.settings import connection_args

PARAMSTYLES = ("pyformat", "qmark", "numeric")


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
        return connection_args(
            {(f.alias or name): getattr(self, name) for name, f in type(self).model_fields.items()}
        )
