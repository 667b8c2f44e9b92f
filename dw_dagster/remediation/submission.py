"""The run the system submitted for a plan, bound to what it may do.

The proposals sensor submits each plan's run (held QUEUED) with a one-time value in the run tag
``dw/submission``, and records, sealed with the deployment's key: the plan, a hash of that value, the
job, a keyed digest of each resource the run will use (Coalesce, Snowflake, Slack) and the hosts
credentials may be sent to (the configured Coalesce base URL only). On its next tick it finds the first
run carrying that value, the one the daemon created from its request (a copy someone launched with the
same tags can only come after them), and binds the plan to that run id and a digest of its run config.

Approvals name the bound run. Every step that changes something refuses a run that is not the bound one,
or whose run config or resources differ from the recorded ones, whatever its tags; credentials are sent
only to the recorded hosts.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from dw_dagster.config import resolve_env_vars
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.remediation.signing import Seal
from dw_dagster.tags import SUBMISSION

BOUND_RESOURCES = ("coalesce", "snowflake", "slack")
"""The resources a remediation run may use; each changing step checks all of them."""
_SUBMISSION, _BINDING = "submission", "binding"


class RunRecordError(Exception):
    """The run is not the one the system submitted, or not as it was submitted."""


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL, lower-cased: where a request to it goes."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        raise RunRecordError(f"{url!r}: not an absolute URL")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}{port}"


def nonce_hash(nonce: str) -> str:
    return hashlib.sha256(nonce.encode()).hexdigest()


def resource_digests(seal: Seal, resources: Mapping[str, Any]) -> dict[str, str]:
    """A keyed digest of each bound resource's configuration, secrets included (they never leave the
    digest): a run whose Coalesce host, token, warehouse or Slack differs has a different digest."""
    missing = [k for k in BOUND_RESOURCES if k not in resources]
    if missing:
        raise RunRecordError(
            f"resources {missing}: not given; a remediation run is checked against all of {BOUND_RESOURCES}"
        )
    return {
        k: seal.keyed_digest(resolve_env_vars(resources[k]).model_dump(mode="json")) for k in BOUND_RESOURCES
    }


def credential_hosts(coalesce: Any) -> list[str]:
    """Where an approver's credentials may go: the configured Coalesce base URL, nowhere else."""
    return [origin(resolve_env_vars(coalesce).base_url)]


class Submission(BaseModel):
    plan_id: str
    seq: int
    """1 for the plan's first run; one more each time the system submits it again (its run was canceled)."""
    nonce_sha256: str
    job: str
    resources: dict[str, str]
    credential_hosts: list[str]
    at: datetime


class Binding(BaseModel):
    plan_id: str
    seq: int
    run_id: str
    job: str
    run_config_digest: str
    resources: dict[str, str]
    credential_hosts: list[str]
    at: datetime


def incident_of(plan_id: str) -> str:
    return plan_id.rsplit("-", 1)[0]


class RunRecords:
    """The sealed submission and binding records of plans, in the incident's event log."""

    def __init__(self, store: IncidentStore, seal: Seal | None):
        self.store = store
        self.seal = seal
        self.forged: list[str] = []
        """Event keys read whose seal did not verify (they are ignored; the caller reports them)."""

    def _read(self, plan_id: str, kind: str) -> list[dict[str, Any]]:
        prefix = f"{kind}|{plan_id}|"
        out = []
        for e in self.store.events(incident_of(plan_id), kind=kind):
            if not e.event_key.startswith(prefix):
                continue
            if self.seal is not None and not self.seal.is_sealed(kind, e.detail):
                self.forged.append(e.event_key)
                continue
            out.append(e.detail)
        return sorted(out, key=lambda d: int(d.get("seq", 0)))

    def submissions(self, plan_id: str) -> list[Submission]:
        return [Submission.model_validate(d) for d in self._read(plan_id, _SUBMISSION)]

    def bindings(self, plan_id: str) -> list[Binding]:
        return [Binding.model_validate(d) for d in self._read(plan_id, _BINDING)]

    def binding(self, plan_id: str) -> Binding | None:
        """The plan's current run: the binding of its latest submission, if it is bound yet."""
        subs, binds = self.submissions(plan_id), self.bindings(plan_id)
        if not subs:
            return None
        return next((b for b in binds if b.seq == subs[-1].seq), None)

    def _required_seal(self) -> Seal:
        if self.seal is None:
            raise RunRecordError("only the code location (which holds DW_SIGNING_KEY) submits and binds runs")
        return self.seal

    def submit(
        self, plan_id: str, seq: int, job: str, resources: Mapping[str, Any]
    ) -> tuple[Submission, str]:
        """Records a new submission; returns it and the one-time value to tag its run with."""
        seal = self._required_seal()
        nonce = secrets.token_urlsafe(24)
        sub = Submission(
            plan_id=plan_id, seq=seq, nonce_sha256=nonce_hash(nonce), job=job,
            resources=resource_digests(seal, resources), credential_hosts=credential_hosts(resources["coalesce"]),
            at=datetime.now(UTC),
        )  # fmt: skip
        detail = seal.seal(_SUBMISSION, sub.model_dump(mode="json"))
        self.store.append_event(incident_of(plan_id), _SUBMISSION, f"{_SUBMISSION}|{plan_id}|{seq}", detail)
        return sub, nonce

    def bind(self, sub: Submission, run_id: str, job: str, run_config: Mapping[str, Any]) -> Binding:
        seal = self._required_seal()
        binding = Binding(
            plan_id=sub.plan_id, seq=sub.seq, run_id=run_id, job=job,
            run_config_digest=seal.keyed_digest(dict(run_config)), resources=sub.resources,
            credential_hosts=sub.credential_hosts, at=datetime.now(UTC),
        )  # fmt: skip
        detail = seal.seal(_BINDING, binding.model_dump(mode="json"))
        key = f"{_BINDING}|{sub.plan_id}|{sub.seq}"
        if not self.store.append_event(incident_of(sub.plan_id), _BINDING, key, detail):
            # Another tick bound it first: that binding stands.
            return next(b for b in self.bindings(sub.plan_id) if b.seq == sub.seq)
        return binding


def submitted_run(sub: Submission, runs: Sequence[Any]) -> Any | None:
    """The run the daemon created for ``sub``: the oldest carrying its one-time value (``runs`` newest
    first, as the instance lists them)."""
    mine = [r for r in runs if nonce_hash(r.tags.get(SUBMISSION, "")) == sub.nonce_sha256]
    return mine[-1] if mine else None


def check_run(
    binding: Binding,
    run_id: str,
    job: str,
    run_config: Mapping[str, Any],
    resources: Mapping[str, Any],
    seal: Seal,
) -> None:
    """Raises :class:`RunRecordError` unless this is the bound run, with its run config and resources."""
    if run_id != binding.run_id:
        raise RunRecordError(
            f"run {run_id} is not the run dw-dagster submitted for plan {binding.plan_id} ({binding.run_id}); "
            "a run launched by anyone else is never approved, whatever its tags"
        )
    if job != binding.job:
        raise RunRecordError(
            f"run {run_id} is of job {job}, but plan {binding.plan_id} was submitted as {binding.job}"
        )
    if seal.keyed_digest(dict(run_config)) != binding.run_config_digest:
        raise RunRecordError(
            f"run {run_id}: its run config is not the one submitted for plan {binding.plan_id}"
        )
    digests = resource_digests(seal, resources)
    changed = sorted(k for k, d in digests.items() if binding.resources.get(k) != d)
    if changed:
        raise RunRecordError(
            f"run {run_id}: resources {', '.join(changed)} are not configured as when plan {binding.plan_id} was "
            "submitted (a run config or environment that points them elsewhere)"
        )


def check_credential_host(url: str, binding: Binding) -> None:
    """Credentials go only to the hosts recorded for the plan's run (the configured Coalesce)."""
    if origin(url) not in binding.credential_hosts:
        raise RunRecordError(
            f"{origin(url)}: not a host credentials may be sent to for plan {binding.plan_id} "
            f"({', '.join(binding.credential_hosts)}); nothing was sent"
        )
