"""Snowflake's settings as dagster-snowflake's ``SnowflakeResource`` takes them, read from SNOWFLAKE_*
variables, and the connector arguments they make: one code path for the warehouse resource of the runs
(``resources.py``, ``snowflake_config.py``) and for the commands and the MCP server outside Dagster
(``direct_warehouse``), which thus open their connections without importing Dagster.

Sign-in, as ``SnowflakeResource`` takes it: a key pair (``private_key_path`` or ``private_key``, with
``private_key_password`` for an encrypted key), a programmatic access token or an OAuth access token
(``authenticator`` PROGRAMMATIC_ACCESS_TOKEN or OAUTH, the token in ``additional_snowflake_connection_args``),
or a password, which still works but is logged as a warning: Snowflake is blocking password-only sign-ins
(https://docs.snowflake.com/en/user-guide/security-mfa-rollout).
"""

from __future__ import annotations

import base64
import functools
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dw_dagster.config import DwConfigError
from dw_dagster.warehouse.connections import Warehouse, import_connector_without_pandas

TOKEN_AUTHENTICATORS = ("PROGRAMMATIC_ACCESS_TOKEN", "OAUTH")
SIGN_IN_VARIABLES = (
    "SNOWFLAKE_PRIVATE_KEY_PATH",
    "SNOWFLAKE_PRIVATE_KEY",
    "SNOWFLAKE_TOKEN",
    "SNOWFLAKE_PASSWORD",
)
# What dagster-snowflake names its connections with (dagster_snowflake/constants.py), so that Snowflake's
# partner attribution sees the same application.
APPLICATION = "DagsterLabs_Dagster"
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
logger = logging.getLogger(__name__)


def connection_args(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``snowflake.connector.connect``'s keyword arguments for ``SnowflakeResource``'s settings (by their
    names, ``schema`` included), as ``SnowflakeResource`` builds them."""
    args = {name: settings[name] for name in _CONNECT_FIELDS if settings.get(name) is not None}
    key, path = settings.get("private_key"), settings.get("private_key_path")
    if key is not None or path is not None:
        args["private_key"] = _private_key(key, path, settings.get("private_key_password"))
    args["application"] = APPLICATION
    args.update(settings.get("additional_snowflake_connection_args") or {})
    return args


def direct_warehouse(env: Mapping[str, str] | None = None) -> Warehouse:
    """The warehouse's connections from SNOWFLAKE_* variables (default: this process's), outside Dagster:
    the same settings as the runs' resource (``resources.warehouse_from_env``), the secrets read at once.
    For the commands a person types: the connector comes without its pandas support."""
    import_connector_without_pandas()
    return Warehouse(connection_args(settings_from_env(os.environ if env is None else env)))


def settings_from_env(env: Mapping[str, str], secret: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """``SnowflakeResource``'s settings from SNOWFLAKE_* variables. ``secret(name)`` stands for a secret
    variable (its ``EnvVar`` in a resource, read at run time); without it, secrets are read from ``env`` now."""
    resolved = secret is None
    if secret is None:
        secret = functools.partial(_read_secret, env)
    sign_in, token = _sign_in(env, secret, resolved)
    additional = {**(_local_connection_args(env) or {}), **token}
    return {
        "account": secret("SNOWFLAKE_ACCOUNT"),
        "user": secret("SNOWFLAKE_USER"),
        **sign_in,
        "database": env.get("SNOWFLAKE_DATABASE"),
        "warehouse": env.get("SNOWFLAKE_WAREHOUSE"),
        "role": env.get("SNOWFLAKE_ROLE"),
        # Bounded end to end (connections.py): an unreachable warehouse ends a check as errored in about
        # this time instead of hanging the run.
        "network_timeout": _seconds(env, "SNOWFLAKE_NETWORK_TIMEOUT", 120),
        "login_timeout": _seconds(env, "SNOWFLAKE_LOGIN_TIMEOUT", 60),
        "additional_snowflake_connection_args": additional or None,
    }


def retry_backoff_seconds(env: Mapping[str, str]) -> int:
    """How long a retried run waits before its first login (DW_RETRY_BACKOFF_SECONDS, default 30)."""
    return _seconds(env, "DW_RETRY_BACKOFF_SECONDS", 30, minimum=0)


def _read_secret(env: Mapping[str, str], name: str) -> str:
    if not env.get(name):
        raise DwConfigError(f"{name}: not set")
    return env[name]


def _local_connection_args(env: Mapping[str, str]) -> dict[str, Any] | None:
    if not env.get("SNOWFLAKE_HOST"):
        return None
    return {
        "host": env["SNOWFLAKE_HOST"],
        "port": int(env.get("SNOWFLAKE_PORT", "443")),
        "protocol": env.get("SNOWFLAKE_PROTOCOL", "https"),
    }


def _sign_in(env: Mapping[str, str], secret: Any, resolved: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The resource's sign-in settings, and the connector's token argument (SnowflakeResource takes it in
    ``additional_snowflake_connection_args``), from whichever one of SIGN_IN_VARIABLES is set."""
    given = [name for name in SIGN_IN_VARIABLES if env.get(name)]
    authenticator = (env.get("SNOWFLAKE_AUTHENTICATOR") or "").upper() or None
    if len(given) > 1:
        raise DwConfigError(
            f"Snowflake sign-in: {' and '.join(given)} are all set; set one of {', '.join(SIGN_IN_VARIABLES)}"
        )
    chosen = given[0] if given else None
    if chosen == "SNOWFLAKE_TOKEN":
        authenticator = authenticator or "PROGRAMMATIC_ACCESS_TOKEN"
        if authenticator not in TOKEN_AUTHENTICATORS:
            raise DwConfigError(
                f"SNOWFLAKE_AUTHENTICATOR: {authenticator!r} takes no SNOWFLAKE_TOKEN; expected one of "
                f"{', '.join(TOKEN_AUTHENTICATORS)} (a programmatic access token, or an OAuth access token)"
            )
        return {"authenticator": authenticator}, {"token": secret("SNOWFLAKE_TOKEN")}
    if authenticator in TOKEN_AUTHENTICATORS:
        raise DwConfigError(f"SNOWFLAKE_AUTHENTICATOR {authenticator}: set the token in SNOWFLAKE_TOKEN")
    settings: dict[str, Any] = {"authenticator": authenticator} if authenticator else {}
    if chosen in ("SNOWFLAKE_PRIVATE_KEY_PATH", "SNOWFLAKE_PRIVATE_KEY"):
        if chosen == "SNOWFLAKE_PRIVATE_KEY_PATH":
            settings["private_key_path"] = env[chosen]  # a path, not a secret
        else:
            settings["private_key"] = secret(chosen)
        if env.get("SNOWFLAKE_PRIVATE_KEY_PASSWORD"):
            settings["private_key_password"] = secret("SNOWFLAKE_PRIVATE_KEY_PASSWORD")
        return settings, {}
    if chosen == "SNOWFLAKE_PASSWORD":
        _warn_password_sign_in()
    if chosen is None and not authenticator and resolved:
        raise DwConfigError(f"Snowflake sign-in: none of {', '.join(SIGN_IN_VARIABLES)} is set")
    if chosen == "SNOWFLAKE_PASSWORD" or not authenticator:
        # Nothing set: the password's variable, which names itself when a connection needs it (loading the
        # code location needs none).
        settings["password"] = secret("SNOWFLAKE_PASSWORD")
    return settings, {}


@functools.cache
def _warn_password_sign_in() -> None:
    # Once a process: every command and run worker reads the settings.
    logger.warning(
        "Snowflake sign-in by password (SNOWFLAKE_PASSWORD): Snowflake is blocking password-only sign-ins; "
        "sign in with a key pair (SNOWFLAKE_PRIVATE_KEY_PATH) or a programmatic access token (SNOWFLAKE_TOKEN)"
    )


def _seconds(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        seconds = int(raw)
    except ValueError:
        seconds = minimum - 1
    if seconds < minimum:
        raise DwConfigError(f"{name}: expected a whole number of seconds, at least {minimum}, got {raw!r}")
    return seconds


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
