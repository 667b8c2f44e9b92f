"""The deployment's seal: records only the code location can have written.

Plans, the runs the system submitted for them and the resources those runs may use live in the warehouse,
where anyone with write access to the ops schema could add a row. Each such record carries an
HMAC-SHA256 over its canonical JSON, keyed with ``DW_SIGNING_KEY``, a secret only the code location's
processes hold (webserver, daemon, run workers, the Slack endpoint; never the people running commands).
Every step that changes something checks the seal before it trusts a record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

from dw_dagster.config import DwConfigError

SIGNING_KEY_ENV = "DW_SIGNING_KEY"
SEAL_FIELD = "seal"
_MIN_KEY_LENGTH = 32


class SealError(DwConfigError):
    """The deployment's signing key is missing or too short to seal anything."""


def canonical(value: Any) -> bytes:
    """One byte string per JSON value, whatever the order its keys were written in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def unsealed(detail: Mapping[str, Any]) -> dict[str, Any]:
    """A stored record without its seal: what the seal covers."""
    return {k: v for k, v in detail.items() if k != SEAL_FIELD}


class Seal:
    """HMAC-SHA256 with the deployment's key. ``purpose`` keeps a seal for one kind of record from being
    valid on another (a plan's seal never passes as a run binding's)."""

    def __init__(self, key: str):
        if len(key.strip()) < _MIN_KEY_LENGTH:
            raise SealError(
                f"{SIGNING_KEY_ENV}: expected a random secret of at least {_MIN_KEY_LENGTH} characters, e.g. "
                "the output of `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        self._key = key.strip().encode()

    def __repr__(self) -> str:
        return "Seal(***)"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Seal:
        key = (os.environ if env is None else env).get(SIGNING_KEY_ENV)
        if not key:
            raise SealError(
                f"{SIGNING_KEY_ENV}: not set; the code location seals its plans and the runs it submits with it, "
                "so that a row written into the ops schema can never release a remediation (docs/approve.md)"
            )
        return cls(key)

    @classmethod
    def optional(cls) -> Seal | None:
        """The seal when this process holds the key (the code location), else None (a person's shell)."""
        return cls.from_env() if os.environ.get(SIGNING_KEY_ENV) else None

    def sign(self, purpose: str, value: Any) -> str:
        mac = hmac.new(self._key, purpose.encode() + b"\n" + canonical(value), hashlib.sha256)
        return "hmac-sha256:" + mac.hexdigest()

    def keyed_digest(self, value: Any) -> str:
        """A digest of something that may hold secrets (a resource's config): without the key it reveals
        nothing about them, not even a guessable password."""
        return self.sign("digest", value)

    def seal(self, purpose: str, detail: Mapping[str, Any]) -> dict[str, Any]:
        record = unsealed(detail)
        return {**record, SEAL_FIELD: self.sign(purpose, record)}

    def is_sealed(self, purpose: str, detail: Mapping[str, Any]) -> bool:
        given = detail.get(SEAL_FIELD)
        return isinstance(given, str) and hmac.compare_digest(given, self.sign(purpose, unsealed(detail)))
