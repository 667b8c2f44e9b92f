"""Who approves: a verified person, never a typed name.

An approval or rejection is recorded with its proof, and the proof is verified again before anything
trusts the record:

- ``slack``: the Slack request of the click (signed by Slack with the app's signing secret); its user id is
  a person of the context file (``slack_user_id``), its button names the plan and the run.
- ``key``: an Ed25519 signature over the record, made with the person's own approver key (the private
  half, in the file ``DW_APPROVER_KEY_FILE`` names); the public half is their ``approver_key`` in the
  context file. ``dw-dagster approver-key new`` makes a pair.
- ``local``: a name given with ``--as`` and nothing else. Accepted only when the deployment itself says it
  is the local world (``DW_ALLOW_UNVERIFIED_APPROVERS=local-world``) *and* its Coalesce and Snowflake are
  on this machine: never where a real Coalesce or Snowflake is configured.
"""

from __future__ import annotations

import base64
import getpass
import ipaddress
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, Field

from dw_dagster.config import DwConfigError
from dw_dagster.context.models import ContextFile, Person
from dw_dagster.remediation.signing import canonical
from dw_dagster.remediation.slack_request import (
    SlackClick,
    SlackRequestError,
    is_recorded_request_valid,
    parse_click,
    signing_secret,
)

APPROVER_KEY_FILE_ENV = "DW_APPROVER_KEY_FILE"
UNVERIFIED_ENV = "DW_ALLOW_UNVERIFIED_APPROVERS"
UNVERIFIED_VALUE = "local-world"
_KEY_PREFIX = "ed25519:"


class IdentityError(Exception):
    """Who is acting could not be proven, or the proof does not fit the record."""


class KeyProof(BaseModel):
    kind: Literal["key"] = "key"
    public_key: str
    signature: str


class SlackProof(BaseModel):
    kind: Literal["slack"] = "slack"
    body: str
    timestamp: str
    signature: str


class LocalProof(BaseModel):
    kind: Literal["local"] = "local"
    os_user: str | None = None
    """The operating-system account the command ran under: recorded, proves nothing."""


Proof = Annotated[KeyProof | SlackProof | LocalProof, Field(discriminator="kind")]

VIA = {"key": "their approver key", "slack": "Slack", "local": "--as in the local world (unverified)"}


# -- keys --------------------------------------------------------------------------------------------


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _KEY_PREFIX + base64.b64encode(raw).decode()


def new_key_pair() -> tuple[bytes, str]:
    """A new approver key: the private half as PEM (for its owner only) and the public half's text."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem, public_key_text(key)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise IdentityError(f"{path}: no such approver key file ({APPROVER_KEY_FILE_ENV})") from None
    except (ValueError, TypeError) as e:
        raise IdentityError(f"{path}: not an unencrypted Ed25519 private key in PEM: {e}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise IdentityError(f"{path}: an approver key is Ed25519, got {type(key).__name__}")
    return key


def _public_key(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(text.removeprefix(_KEY_PREFIX)))


def sign_record(key: Ed25519PrivateKey, record: Mapping[str, Any]) -> KeyProof:
    signature = base64.b64encode(key.sign(canonical(record))).decode()
    return KeyProof(public_key=public_key_text(key), signature=signature)


# -- the local world -----------------------------------------------------------------------------------


def _is_loopback(url_or_host: str | None) -> bool:
    host = urlsplit(url_or_host).hostname if url_or_host and "//" in url_or_host else url_or_host
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unverified_allowed(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``--as`` alone is accepted: only in a deployment that declares itself the local world and
    whose Coalesce and Snowflake are both on this machine."""
    env = os.environ if env is None else env
    if env.get(UNVERIFIED_ENV) != UNVERIFIED_VALUE:
        return False
    if not (_is_loopback(env.get("COALESCE_BASE_URL")) and _is_loopback(env.get("SNOWFLAKE_HOST"))):
        raise DwConfigError(
            f"{UNVERIFIED_ENV}={UNVERIFIED_VALUE}: refused, COALESCE_BASE_URL and SNOWFLAKE_HOST are not on this "
            "machine; unverified approvers are for the local world only"
        )
    return True


# -- who runs a command ----------------------------------------------------------------------------------


class Signer:
    """The person running a command, and how their records are proven."""

    def __init__(self, person: Person, key: Ed25519PrivateKey | None = None):
        self.person = person
        self._key = key

    @property
    def via(self) -> str:
        return VIA["key" if self._key else "local"]

    @property
    def key(self) -> Ed25519PrivateKey | None:
        """Their approver key (None: ``--as`` alone, the local world's way): it also signs the audit trail's
        entries of what they do where the code location's key is not held."""
        return self._key

    def prove(self, record: Mapping[str, Any]) -> KeyProof | LocalProof:
        if self._key is not None:
            return sign_record(self._key, record)
        try:
            os_user = getpass.getuser()
        except (KeyError, OSError):
            os_user = None
        return LocalProof(os_user=os_user)


def command_signer(context: ContextFile, who: str | None, env: Mapping[str, str] | None = None) -> Signer:
    """Who runs this command, proven: their approver key (``--as``, if given, must name its owner), or,
    in the local world only, ``--as`` alone."""
    env = os.environ if env is None else env
    key_file = env.get(APPROVER_KEY_FILE_ENV)
    named = context.person(who) if who else None
    if who and named is None:
        raise IdentityError(f"{who!r} is not a member of any team in the context file")
    if key_file:
        key = load_private_key(Path(key_file))
        person = context.person_by_key(public_key_text(key))
        if person is None:
            raise IdentityError(
                f"{key_file}: this approver key is nobody's in the context file (add its public half, "
                f"{public_key_text(key)}, as the approver_key of its owner)"
            )
        if named is not None and named.email != person.email:
            raise IdentityError(
                f"the approver key in {key_file} is {person.name}'s: it cannot act as {named.name}"
            )
        return Signer(person, key)
    if unverified_allowed(env):
        if named is None:
            raise IdentityError("--as NAME: required in the local world (name a person of the context file)")
        return Signer(named)
    raise IdentityError(
        f"this command must prove who runs it: set {APPROVER_KEY_FILE_ENV} to your own approver key (made by "
        "`dw-dagster approver-key new`, its public half your approver_key in the context file), or use the "
        "Approve and Reject buttons in the incident's Slack thread; --as alone is accepted only in the local world"
    )


# -- verifying a recorded proof ---------------------------------------------------------------------------


def verify_proof(
    record: Mapping[str, Any], proof: KeyProof | SlackProof | LocalProof, context: ContextFile, action: str
) -> Person:
    """The person who made ``record`` (an approval or a rejection: ``action`` is the Slack button it must
    come from); :class:`IdentityError` if the proof does not prove it."""
    email = str(record.get("email", "")).lower()
    if isinstance(proof, KeyProof):
        person = context.person_by_key(proof.public_key)
        if person is None:
            raise IdentityError("signed with a key that is nobody's approver_key in the context file")
        try:
            _public_key(proof.public_key).verify(base64.b64decode(proof.signature), canonical(record))
        except (InvalidSignature, ValueError):
            raise IdentityError(
                f"the signature of {person.name}'s key does not match the record: altered"
            ) from None
    elif isinstance(proof, SlackProof):
        if not is_recorded_request_valid(proof.body, proof.timestamp, proof.signature, signing_secret()):
            raise IdentityError("the recorded Slack request is not signed by Slack: forged or altered")
        click = _click(proof)
        person = context.person_by_slack_id(click.user_id)
        if person is None:
            raise IdentityError(f"Slack user {click.user_id} is nobody's slack_user_id in the context file")
        if click.action_id != action or (click.plan_id, click.run_id) != (
            record.get("plan_id"),
            record.get("run_id"),
        ):
            raise IdentityError(
                f"the Slack click was {click.action_id} on plan {click.plan_id}, run {click.run_id}: not this record"
            )
        if record.get("values", {}) != click.values:
            raise IdentityError("the values recorded are not the ones given in Slack: altered")
        at = datetime.fromisoformat(str(record.get("at")))
        if abs(at.timestamp() - int(proof.timestamp)) > 1:
            raise IdentityError("the time recorded is not the time of the Slack click: altered")
    else:
        if not unverified_allowed():
            raise IdentityError("recorded without proof (--as alone, the local world's way): refused here")
        person = context.person(email)
        if person is None:
            raise IdentityError(f"{email}: not a member of any team in the context file")
    if person.email.lower() != email:
        raise IdentityError(
            f"the proof is {person.name}'s, the record names {record.get('approver') or email}"
        )
    return person


def _click(proof: SlackProof) -> SlackClick:
    try:
        return parse_click(proof.body)
    except SlackRequestError as e:
        raise IdentityError(str(e)) from None
