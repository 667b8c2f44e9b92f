"""The run the system submitted for a plan, bound to what it may do.

The proposals sensor submits each plan's run (held QUEUED) with a one-time value in the run tag
``dw/submission``, and records, sealed with the deployment's key: the plan, a hash of that value, the
job, the run config it requested (a keyed digest: op config, resources, loggers, execution), the tags it
requested, a keyed digest of each resource the run will use (Coalesce, Snowflake, Slack) and the hosts
credentials may be sent to (the configured Coalesce base URL only).

On its next tick it binds the plan to the first run carrying that value, and only if that run is exactly
what was requested: the job, the run config, the tags (plus the ones Dagster's daemon adds when it creates a
requested run), no op, asset or step selection, no parent run. The one-time value is a visible tag, so
anyone who can launch runs can copy it; what they cannot do is make a run of another configuration pass as
the requested one. The binding is a MAC with the deployment's key over the run's own id and a keyed digest
of its whole configuration (:func:`run_configuration`), and that is what approvals are given for.

Every step that changes something refuses a run that is not the bound one, or whose configuration or
resources differ from the recorded ones, whatever its tags; credentials are sent only to the recorded hosts.

Dagster's tag names (``internals.py``) are imported by the checks that use them, not at load: reading a
binding (``proposals``) imports no Dagster.
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
from dw_dagster.tags import APPROVAL, APPROVALS_NEEDED, APPROVE_BY, APPROVE_HOW, SUBMISSION

BOUND_RESOURCES = ("coalesce", "snowflake", "slack")
"""The resources a remediation run may use; each changing step checks all of them."""
_SUBMISSION, _BINDING = "submission", "binding"
GATE_TAGS = frozenset({APPROVAL, APPROVALS_NEEDED, APPROVE_BY, APPROVE_HOW})
"""The tags dw-dagster itself changes on the held run while it waits (the queue's hold, what it shows)."""


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


def _configuration_tags(tags: Mapping[str, str], keys: Sequence[str] | None = None) -> dict[str, str | None]:
    # Dagster's hidden tags (``.dagster/...``) are its own bookkeeping (the launcher's gRPC address, the
    # worker's id), added after the run is created; the gate's tags change while the run waits.
    from dw_dagster.internals import HIDDEN_TAG_PREFIX

    kept = {k: v for k, v in tags.items() if k not in GATE_TAGS and not k.startswith(HIDDEN_TAG_PREFIX)}
    return dict(kept) if keys is None else {k: kept.get(k) for k in keys}


def run_configuration(run: Any, tag_keys: Sequence[str] | None = None) -> dict[str, Any]:
    """Everything about a Dagster run that decides what it does: its job, its whole run config (op config,
    resources, loggers, execution), the tags that matter (every tag but the gate's own and Dagster's hidden
    ones; only ``tag_keys`` when given: the ones it carried when it was bound, as a launcher may add its
    own later), what it selects and what it re-executes."""

    def names(keys: Any) -> list[str] | None:
        return (
            sorted(k.to_user_string() if hasattr(k, "to_user_string") else str(k) for k in keys)
            if keys
            else None
        )

    return {
        "job": run.job_name,
        "run_config": run.run_config,
        "tags": _configuration_tags(run.tags, tag_keys),
        "op_selection": sorted(run.op_selection) if run.op_selection else None,
        "asset_selection": names(run.asset_selection),
        "asset_check_selection": names(run.asset_check_selection),
        "step_keys_to_execute": sorted(run.step_keys_to_execute) if run.step_keys_to_execute else None,
        "parent_run_id": run.parent_run_id,
        "root_run_id": run.root_run_id,
    }


class Submission(BaseModel):
    plan_id: str
    seq: int
    """1 for the plan's first run; one more each time the system submits it again (its run was canceled)."""
    nonce_sha256: str
    job: str
    run_config_digest: str = ""
    """A keyed digest of the run config requested (empty on a submission recorded before it was kept)."""
    tags: dict[str, str] = {}
    """The tags requested, the one-time value excepted (only its hash is kept)."""
    job_tags: dict[str, str] = {}
    """The job's own run tags (Dagster's daemon adds them to the runs it creates)."""
    steps: list[str] = []
    """Every step of the job: a run of all of them selects nothing."""
    resources: dict[str, str]
    credential_hosts: list[str]
    at: datetime


class Binding(BaseModel):
    plan_id: str
    seq: int
    run_id: str
    job: str
    config_digest: str = ""
    """A keyed digest of the run's :func:`run_configuration` when it was bound: what approvals are given for."""
    tag_keys: list[str] = []
    """The tags that matter on the run when it was bound; the gate compares their values."""
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
        self,
        plan_id: str,
        seq: int,
        job: Any,
        resources: Mapping[str, Any],
        run_config: Mapping[str, Any],
        tags: Mapping[str, str],
    ) -> tuple[Submission, str]:
        """Records a new submission of ``job`` (its definition) with ``run_config`` and ``tags``; returns it
        and the one-time value to tag its run with."""
        seal = self._required_seal()
        nonce = secrets.token_urlsafe(24)
        sub = Submission(
            plan_id=plan_id,
            seq=seq,
            nonce_sha256=nonce_hash(nonce),
            job=job.name,
            run_config_digest=seal.keyed_digest(dict(run_config)),
            tags={k: v for k, v in tags.items() if k != SUBMISSION},
            job_tags=dict(job.run_tags or {}),
            steps=sorted(n.name for n in job.nodes),
            resources=resource_digests(seal, resources),
            credential_hosts=credential_hosts(resources["coalesce"]),
            at=datetime.now(UTC),
        )
        detail = seal.seal(_SUBMISSION, sub.model_dump(mode="json"))
        self.store.append_event(incident_of(plan_id), _SUBMISSION, f"{_SUBMISSION}|{plan_id}|{seq}", detail)
        return sub, nonce

    def bind(self, sub: Submission, run: Any) -> Binding:
        """Binds the plan to ``run``, the run created for ``sub``: only if it is exactly what was requested
        (:func:`check_submitted`, else :class:`RunRecordError`)."""
        seal = self._required_seal()
        check_submitted(sub, run, seal)
        tags = _configuration_tags(run.tags)
        binding = Binding(
            plan_id=sub.plan_id,
            seq=sub.seq,
            run_id=run.run_id,
            job=run.job_name,
            config_digest=seal.keyed_digest(run_configuration(run)),
            tag_keys=sorted(tags),
            resources=sub.resources,
            credential_hosts=sub.credential_hosts,
            at=datetime.now(UTC),
        )
        detail = seal.seal(_BINDING, binding.model_dump(mode="json"))
        key = f"{_BINDING}|{sub.plan_id}|{sub.seq}"
        if not self.store.append_event(incident_of(sub.plan_id), _BINDING, key, detail):
            # Another tick bound it first: that binding stands.
            return next(b for b in self.bindings(sub.plan_id) if b.seq == sub.seq)
        return binding


def config_digest(run: Any, binding: Binding, seal: Seal) -> str:
    """The keyed digest of ``run``'s configuration as the binding covers it (its tags as bound)."""
    return seal.keyed_digest(run_configuration(run, binding.tag_keys))


def submitted_run(sub: Submission, runs: Sequence[Any]) -> Any | None:
    """The run the daemon created for ``sub``: the oldest carrying its one-time value (``runs`` newest
    first, as the instance lists them)."""
    mine = [r for r in runs if nonce_hash(r.tags.get(SUBMISSION, "")) == sub.nonce_sha256]
    return mine[-1] if mine else None


def check_submitted(sub: Submission, run: Any, seal: Seal) -> None:
    """Raises :class:`RunRecordError` unless ``run`` is exactly the run ``sub`` requested: its one-time
    value, job, run config and tags, no selection and no parent. Whoever launches, re-executes or relaunches
    a run with the held run's tags (the one-time value is visible) and anything else changed is refused."""
    from dw_dagster.internals import CODE_LOCATION_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG, TICK_ID_TAG

    # The tags Dagster adds to a run its sensor daemon creates from a run request (the code location's name
    # from the run's origin).
    creation_tags = {SENSOR_NAME_TAG, RUN_KEY_TAG, TICK_ID_TAG, CODE_LOCATION_TAG}
    where = f"run {run.run_id} carries the submission of plan {sub.plan_id}"
    if nonce_hash(run.tags.get(SUBMISSION, "")) != sub.nonce_sha256:
        raise RunRecordError(
            f"run {run.run_id} does not carry the one-time value of plan {sub.plan_id}'s submission"
        )
    if run.job_name != sub.job:
        raise RunRecordError(f"{where} but is of job {run.job_name}, not {sub.job}")
    if not sub.run_config_digest or seal.keyed_digest(dict(run.run_config)) != sub.run_config_digest:
        raise RunRecordError(
            f"{where} but its run config (op config, resources) is not the one dw-dagster requested"
        )
    tags = _configuration_tags(run.tags)
    changed = sorted(k for k, v in sub.tags.items() if run.tags.get(k) != v)  # as requested, held included
    extra = sorted(
        k
        for k, v in tags.items()
        if k not in sub.tags and k not in creation_tags and k != SUBMISSION and sub.job_tags.get(k) != v
    )
    if changed or extra:
        raise RunRecordError(
            f"{where} but its tags differ from the ones requested: {', '.join(changed + extra)}"
        )
    config = run_configuration(run)
    if config["step_keys_to_execute"] == sub.steps:
        config["step_keys_to_execute"] = None  # every step: the whole job
    selected = [
        k
        for k in ("op_selection", "asset_selection", "asset_check_selection", "step_keys_to_execute")
        if config[k]
    ]
    if selected or run.parent_run_id or run.root_run_id:
        what = ", ".join(selected) or f"re-executes run {run.parent_run_id or run.root_run_id}"
        raise RunRecordError(f"{where} but is not the whole job as requested ({what})")


def check_run(binding: Binding, run: Any, resources: Mapping[str, Any], seal: Seal) -> None:
    """Raises :class:`RunRecordError` unless ``run`` is the bound run, with the configuration it was bound
    with and resources configured as when the plan was submitted."""
    run_id = run.run_id
    if run_id != binding.run_id:
        raise RunRecordError(
            f"run {run_id} is not the run dw-dagster submitted for plan {binding.plan_id} ({binding.run_id}); "
            "a run launched by anyone else is never approved, whatever its tags"
        )
    if run.job_name != binding.job:
        raise RunRecordError(
            f"run {run_id} is of job {run.job_name}, but plan {binding.plan_id} was submitted as {binding.job}"
        )
    if not binding.config_digest or config_digest(run, binding, seal) != binding.config_digest:
        raise RunRecordError(
            f"run {run_id}: its configuration (run config, tags, selection) is not the one bound for plan "
            f"{binding.plan_id}"
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
