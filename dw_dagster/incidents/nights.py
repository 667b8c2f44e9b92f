"""Whether an incident is over, read from Dagster's own storage night by night.

Every finding names what failed: an asset check (``volume`` on a table, a recorded total, input freshness)
or a Coalesce node that did not build (``coalesce_run``). For each business date after the incident's last
finding, the instance already holds the answer, so no check body needs to know about incidents:

- an asset check's execution records (``get_asset_check_execution_history``), each in a checks run tagged
  with the business date it judged: passed, or failed at WARN, is no longer failing; failed at ERROR,
  errored or skipped is not over;
- a node's materializations, each carrying its Coalesce run id, which the checks run of that Coalesce run
  is tagged with beside its business date: built again is no longer failing;
- a Coalesce job's run as a whole (no node explained the failure): a later checks run of that job;
- a node's cost jump: the nightly cost job's materializations of ``dw/cost``, each naming the night it
  judged and the nodes whose cost jumped (a night the cost job has not judged yet is not judged, whatever
  was built).

A night is **clean** when every one of the incident's signatures was judged that night and none failed,
and no finding with one of its signatures was recorded that night on any incident (a finding the checks
recorded after Dagster's last evaluation, or one that went to another incident).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import dagster as dg

from dw_dagster import tags
from dw_dagster.cost import COST_CHECK
from dw_dagster.cost.night import COST_KEY, cost_series
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.internals import AssetCheckExecutionRecordStatus
from dw_dagster.records.incidents import Finding, Incident
from dw_dagster.records.policy import IncidentPolicy

NODE_BUILD = "coalesce_run"
"""The check name of a finding the Coalesce run sensor records for a node (or job) that did not build."""
HISTORY = 60
"""Executions or materializations read per signature: two months of nights."""


@dataclass
class Night:
    night: date
    outcomes: dict[str, str]
    """Signature -> ``passed``, ``failed``, ``errored`` or ``not judged``."""

    @property
    def clean(self) -> bool:
        return all(v == "passed" for v in self.outcomes.values())

    def describe(self) -> str:
        return "; ".join(f"{s}: {o}" for s, o in sorted(self.outcomes.items()))


def _night_of(run_tags: dict[str, str]) -> date | None:
    try:
        return date.fromisoformat(run_tags.get(tags.BUSINESS_DATE, ""))
    except ValueError:
        return None


def _runs_nights(instance: dg.DagsterInstance, run_filter: dg.RunsFilter) -> dict[str, date]:
    out = {}
    for record in instance.get_run_records(filters=run_filter, limit=HISTORY * 4):
        night = _night_of(dict(record.dagster_run.tags))
        if night is not None:
            out[record.dagster_run.run_id] = night
    return out


class _RunNights:
    """Each checks run's business date, read once for all of an incident's signatures: its checks are
    evaluated by the same runs, night after night, and reading a run record is most of this module's work."""

    def __init__(self, instance: dg.DagsterInstance):
        self.instance = instance
        self.known: dict[str, date | None] = {}

    def of(self, run_ids: set[str]) -> dict[str, date]:
        missing = sorted(run_ids - self.known.keys())
        for start in range(0, len(missing), HISTORY * 4):  # within _runs_nights' limit
            chunk = missing[start : start + HISTORY * 4]
            found = _runs_nights(self.instance, dg.RunsFilter(run_ids=chunk))
            self.known.update({run_id: found.get(run_id) for run_id in chunk})
        return {run_id: night for run_id in run_ids if (night := self.known[run_id]) is not None}


def _check_outcomes(runs: _RunNights, key: dg.AssetCheckKey) -> dict[date, str] | None:
    """Each night's last evaluation of one asset check; None when the instance knows no such check."""
    records = runs.instance.event_log_storage.get_asset_check_execution_history(key, limit=HISTORY)
    if not records:
        return None
    nights = runs.of({r.run_id for r in records})
    out: dict[date, str] = {}
    for r in sorted(records, key=lambda r: r.id):  # later executions of a night win
        night = nights.get(r.run_id)
        if night is None:
            continue
        if r.status is AssetCheckExecutionRecordStatus.SUCCEEDED:
            out[night] = "passed"
        elif r.status is AssetCheckExecutionRecordStatus.FAILED:
            data = r.event.dagster_event.event_specific_data if r.event and r.event.dagster_event else None
            warn = getattr(data, "severity", None) is dg.AssetCheckSeverity.WARN
            out[night] = "passed" if warn else "failed"
        else:
            # Planned and never evaluated: the check errored or was skipped in a run that ended.
            out[night] = "errored"
    return out


def _build_outcomes(instance: dg.DagsterInstance, asset: str) -> dict[date, str]:
    """Nights on which a node was built (its materialization's Coalesce run, and that run's checks run)."""
    if asset.startswith("coalesce_job/"):
        job = asset.removeprefix("coalesce_job/")
        return dict.fromkeys(
            _runs_nights(instance, dg.RunsFilter(tags={tags.COALESCE_JOB: job})).values(), "passed"
        )
    records = instance.fetch_materializations(dg.AssetKey(asset.split("/")), limit=HISTORY).records
    run_ids = []
    for record in records:
        materialization = record.asset_materialization
        value = materialization.metadata.get("coalesce/run_id") if materialization else None
        if value is not None:
            run_ids.append(str(getattr(value, "value", value)))
    if not run_ids:
        return {}
    nights = _runs_nights(instance, dg.RunsFilter(tags={tags.COALESCE_RUN_ID: run_ids}))
    return dict.fromkeys(nights.values(), "passed")


def _cost_outcomes(instance: dg.DagsterInstance, asset: str) -> dict[date, str]:
    """Nights the cost job judged a node's credits: failed where they jumped (``cost_night.cost_metadata``)."""
    out: dict[date, str] = {}
    records = instance.fetch_materializations(COST_KEY, limit=HISTORY).records
    for record in sorted(records, key=lambda r: r.storage_id):  # a night attributed again: the last wins
        md = record.asset_materialization.metadata if record.asset_materialization else {}
        night = _night_of({tags.BUSINESS_DATE: str(getattr(md.get("night"), "value", ""))})
        if night is None or f"credits: node {asset}" not in md:
            continue
        jumped = str(getattr(md.get("cost_jump_series"), "value", "")).split(", ")
        out[night] = "failed" if cost_series(asset) in jumped else "passed"
    return out


def later_nights(
    instance: dg.DagsterInstance, incident: Incident, findings: Sequence[Finding]
) -> list[Night]:
    """The incident's signatures as Dagster judged them on each night after its last finding, oldest first."""
    if not findings:
        return []
    last = max(f.business_date for f in findings)
    runs = _RunNights(instance)
    by_signature: dict[str, dict[date, str]] = {}
    for f in {f.signature: f for f in findings}.values():
        outcomes = None
        if f.check_name == COST_CHECK:
            outcomes = _cost_outcomes(instance, f.asset_key)
        elif f.check_name != NODE_BUILD:
            outcomes = _check_outcomes(
                runs, dg.AssetCheckKey(dg.AssetKey(f.asset_key.split("/")), f.check_name)
            )
        by_signature[f.signature] = (
            outcomes if outcomes is not None else _build_outcomes(instance, f.asset_key)
        )
    reported = {n for outcomes in by_signature.values() for n in outcomes if n > last}
    scope = incident.detail.get("cause_scope", "")
    if scope.startswith("job:"):
        job_runs = dg.RunsFilter(tags={tags.COALESCE_JOB: scope.removeprefix("job:")})
        reported |= {n for n in _runs_nights(instance, job_runs).values() if n > last}
    return [
        Night(n, {s: outcomes.get(n, "not judged") for s, outcomes in by_signature.items()})
        for n in sorted(reported)
    ]


@dataclass
class Due:
    action: str
    """``resolve`` or ``stale``."""
    night: date
    reason: str


def lifecycle_due(
    instance: dg.DagsterInstance,
    store: IncidentStore,
    incident: Incident,
    findings: Sequence[Finding],
    policy: IncidentPolicy,
) -> Due | None:
    """What the lifecycle owes an open incident now: resolving it, marking it stale, or nothing.

    Dagster's storage is read first; the warehouse only when it says the incident may be over (to ask
    whether a finding with one of its signatures was recorded those nights on another incident), so an
    incident that is still failing costs no warehouse query on an idle sensor tick.
    """
    nights = later_nights(instance, incident, findings)
    n = policy.resolve_after_clean_nights
    if len(nights) >= n and all(x.clean for x in nights[-n:]):
        recent = nights[-n:]
        recorded = store.findings_recorded([f"{s}|{x.night.isoformat()}" for x in recent for s in x.outcomes])
        for x in recent:
            for s in x.outcomes:
                if f"{s}|{x.night.isoformat()}" in recorded:
                    x.outcomes[s] = "failed"
        if all(x.clean for x in recent):
            checks = ", ".join(sorted(nights[-1].outcomes))
            when = str(nights[-1].night) if n == 1 else f"{n} nights to {nights[-1].night}"
            return Due(
                "resolve", nights[-1].night, f"every check of the incident passed again ({when}): {checks}"
            )
    if not incident.stale_since and len(nights) >= policy.stale_after_nights:
        night = nights[policy.stale_after_nights - 1]
        return Due(
            "stale",
            night.night,
            f"no new finding for {len(nights)} reported night{'s' if len(nights) != 1 else ''}, yet its checks have not all passed again "
            f"({nights[-1].night}: {nights[-1].describe()})",
        )
    return None
