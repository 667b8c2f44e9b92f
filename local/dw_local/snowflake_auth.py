"""Who may sign in to the local Snowflake, and how: ``users.json`` in its data directory.

Snowflake signs a user in by a method the user's authentication policy allows
(https://docs.snowflake.com/en/user-guide/authentication-policies, AUTHENTICATION_METHODS: PASSWORD,
KEYPAIR, PROGRAMMATIC_ACCESS_TOKEN, OAUTH, ...), and verifies the credential of that method:

- KEYPAIR (https://docs.snowflake.com/en/user-guide/key-pair-auth): the client signs a JWT with its private
  key, issued by ``<ACCOUNT>.<USER>.SHA256:<fingerprint of the public key>`` about ``<ACCOUNT>.<USER>``;
  Snowflake verifies the signature with a public key registered on the user (RSA_PUBLIC_KEY,
  RSA_PUBLIC_KEY_2, whose RSA_PUBLIC_KEY_FP is that fingerprint) and refuses an expired token and one that
  is valid for more than an hour (https://docs.snowflake.com/en/developer-guide/sql-api/authenticating).
- PROGRAMMATIC_ACCESS_TOKEN (https://docs.snowflake.com/en/user-guide/programmatic-access-tokens): a token
  generated for the user, sent with the PROGRAMMATIC_ACCESS_TOKEN authenticator or in place of a password.
- OAUTH (https://docs.snowflake.com/en/user-guide/oauth-intro): an access token issued for the user.

A user the file names signs in only by the methods it lists, with the secrets registered for it (tokens
and passwords are kept as SHA-256 digests). A user it does not name signs in with any password, as fakesnow
lets everyone (the local world's other clients: the Coalesce simulator's runs, the seeding), and by no
other method: no key or token is registered for it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

USERS_FILE = "users.json"
METHODS = ("PASSWORD", "KEYPAIR", "PROGRAMMATIC_ACCESS_TOKEN", "OAUTH")
# The connector's AUTHENTICATOR in the login request -> the policy's method.
_METHOD_OF = {
    "SNOWFLAKE": "PASSWORD",
    "SNOWFLAKE_JWT": "KEYPAIR",
    "PROGRAMMATIC_ACCESS_TOKEN": "PROGRAMMATIC_ACCESS_TOKEN",
    "OAUTH": "OAUTH",
}
JWT_MAX_LIFETIME_SECONDS = 3600
# Login refusals, as Snowflake answers them. The code of a refusal by the authentication policy is not in
# Snowflake's public documentation: it is answered with the code of a refused sign-in.
_REFUSED = "390100"
_REFUSED_PASSWORD = (_REFUSED, "Incorrect username or password was specified.")
_REFUSED_BY_POLICY = (_REFUSED, "Authentication attempt rejected by the current authentication policy.")
_REFUSED_JWT = ("390144", "JWT token is invalid.")
_REFUSED_TOKEN = (_REFUSED, "Programmatic access token is invalid.")
_REFUSED_OAUTH = ("390303", "Invalid OAuth access token.")


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def public_key_fingerprint(public_key_der: bytes) -> str:
    """``SHA256:<base64>`` of the DER public key, as DESCRIBE USER shows RSA_PUBLIC_KEY_FP."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(public_key_der).digest()).decode()


def register_user(
    data_dir: Path,
    user: str,
    methods: Iterable[str],
    public_key_pem: bytes | None = None,
    tokens: Iterable[str] = (),
    oauth_tokens: Iterable[str] = (),
    password: str | None = None,
) -> None:
    """Names ``user`` in the users file with its methods and credentials (replacing what it had); the
    server reads the file at each sign-in."""
    from cryptography.hazmat.primitives import serialization

    methods = [m.upper() for m in methods]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"authentication methods {unknown}: expected some of {list(METHODS)}")
    entry: dict[str, Any] = {"authentication_methods": methods}
    if public_key_pem is not None:
        key = serialization.load_pem_public_key(public_key_pem)
        der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        entry["rsa_public_keys"] = [base64.b64encode(der).decode()]
    entry["programmatic_access_tokens"] = [digest(t) for t in tokens]
    entry["oauth_tokens"] = [digest(t) for t in oauth_tokens]
    if password is not None:
        entry["password"] = digest(password)
    path = Path(data_dir) / USERS_FILE
    users = json.loads(path.read_text()) if path.exists() else {}
    users[user.upper()] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(users, indent=2))


def new_key_pair(private_key_path: Path) -> bytes:
    """A 2048-bit RSA key pair (Snowflake's minimum): the private key written unencrypted as PKCS#8 PEM to
    ``private_key_path`` (owner-only), the public key returned as PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_key_path.parent.mkdir(parents=True, exist_ok=True)
    private_key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    private_key_path.chmod(0o600)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


class Users:
    """The users file, read again when it changes."""

    def __init__(self, data_dir: Path):
        self._path = Path(data_dir) / USERS_FILE
        self._seen: tuple[int, int] | None = None
        self._users: dict[str, Any] = {}

    def get(self, login: str) -> dict[str, Any] | None:
        try:
            stat = self._path.stat()
        except FileNotFoundError:
            self._seen, self._users = None, {}
            return None
        if (stat.st_mtime_ns, stat.st_size) != self._seen:
            self._users = json.loads(self._path.read_text())
            self._seen = (stat.st_mtime_ns, stat.st_size)
        return self._users.get(login.upper())


def refusal(data: dict[str, Any], users: Users) -> tuple[str, str] | None:
    """Why Snowflake would refuse this sign-in (``data`` of the login request), or None."""
    login = str(data.get("LOGIN_NAME") or "")
    method = _METHOD_OF.get(str(data.get("AUTHENTICATOR") or "SNOWFLAKE").upper())
    user = users.get(login)
    if user is None:
        return None if method == "PASSWORD" else _refused_for(method)
    password = data.get("PASSWORD")
    if method == "PASSWORD" and password and digest(password) in user.get("programmatic_access_tokens", []):
        method = "PROGRAMMATIC_ACCESS_TOKEN"  # a token in place of the password
        token = password
    else:
        token = data.get("TOKEN")
    if method not in user.get("authentication_methods", []):
        return _REFUSED_BY_POLICY
    if method == "PASSWORD":
        return None if password and digest(password) == user.get("password") else _REFUSED_PASSWORD
    if method == "KEYPAIR":
        return None if _jwt_valid(token, data, login, user) else _REFUSED_JWT
    registered = user.get(
        "programmatic_access_tokens" if method == "PROGRAMMATIC_ACCESS_TOKEN" else "oauth_tokens"
    )
    return None if token and digest(token) in (registered or []) else _refused_for(method)


def _refused_for(method: str | None) -> tuple[str, str]:
    return {
        "KEYPAIR": _REFUSED_JWT,
        "PROGRAMMATIC_ACCESS_TOKEN": _REFUSED_TOKEN,
        "OAUTH": _REFUSED_OAUTH,
    }.get(method or "", _REFUSED_PASSWORD)


def _jwt_valid(token: Any, data: dict[str, Any], login: str, user: dict[str, Any]) -> bool:
    import jwt
    from cryptography.hazmat.primitives import serialization

    if not isinstance(token, str):
        return False
    account = str(data.get("ACCOUNT_NAME") or "").partition(".")[0].upper()
    subject = f"{account}.{login.upper()}"
    for encoded in user.get("rsa_public_keys", []):
        der = base64.b64decode(encoded)
        key = serialization.load_der_public_key(der)
        try:
            claims = jwt.decode(
                token, key, algorithms=["RS256"], options={"require": ["iss", "sub", "iat", "exp"]}
            )
        except jwt.PyJWTError:
            continue
        if (
            claims["sub"] == subject
            and claims["iss"] == f"{subject}.{public_key_fingerprint(der)}"
            and claims["exp"] - claims["iat"] <= JWT_MAX_LIFETIME_SECONDS
        ):
            return True
    return False


def install(app: Any, data_dir: Path) -> None:
    """Refuses, before fakesnow opens a session, every sign-in Snowflake would refuse."""
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from dw_local.account_usage import request_body

    users = Users(data_dir)
    routes = app.router.routes
    index, route = next(
        (i, r) for i, r in enumerate(routes) if getattr(r, "path", None) == "/session/v1/login-request"
    )
    endpoint = route.endpoint

    async def login_request(request: Request):
        data = json.loads(await request_body(request)).get("data") or {}
        refused = await run_in_threadpool(refusal, data, users)
        if refused is None:
            return await endpoint(request)
        code, message = refused
        return JSONResponse({"data": {"errorCode": code}, "code": code, "message": message, "success": False})

    routes[index] = Route(route.path, login_request, methods=["POST"])
