"""A skipped night: the Coalesce job's schedule came and went and nothing ran.

When the Scheduler does not start a job (a paused schedule, a scheduler outage) nothing fails: no run, so no
checks run and no finding. Dagster's freshness policies see it (one per scheduled job,
``checks/freshness.py``): the freshness daemon marks the job's tables FAIL once the schedule's grace has passed
without a build. The incident sensor reads those states from Dagster's storage (one query, never the
warehouse) and, for a job whose tables failed, judges the night against the job's own schedule: the latest
scheduled start whose grace had passed when the state turned FAIL, and whether a Coalesce run of that job was
reported for its business date (the checks runs the run sensor tagged with it). A day the cron does not
schedule (a weekend of a weekday cron) is then no skip; a day the metrics file's calendar names a holiday is
logged, not raised.

A skip is recorded by the ``report_skipped_run`` run (``skipped_run_job.py``): one ``scheduled_run`` finding per
failing table of the job, all on one incident (the job's cause scope), diagnosed here as stale input that
names the job, when it was due and the last night it ran.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
from croniter import croniter

from dw_dagster import tags
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.specs import key_from_path
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.internals import FreshnessState
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident

SKIPPED_RUN_CHECK = "scheduled_run"
"""The check name of the finding a skipped night records on each of the job's failing tables."""
REPORTED_RUNS = 20
"""Checks runs of a job read to find the latest night a Coalesce run of it was reported."""


@dataclass(frozen=True)
class SkippedRun:
    job: str
    scheduled_at: datetime
    """The start the schedule promised (aware, in the schedule's time zone)."""
    deadline: datetime
    """``scheduled_at`` plus the schedule's grace: when the freshness policy failed the tables."""
    business_date: date
    failing: tuple[str, ...]
    """The job's tables whose freshness policy failed, as asset key paths."""
    last_night: date | None
    """The latest business date a Coalesce run of the job was reported for (None: never)."""
    last_coalesce_run_id: str | None
    holiday: str | None = None
    """The metrics file's calendar names the night a holiday: a WARN (the schedule may have been paused on
    purpose), never silent, since the cron still promised a run."""

    @property
    def run_key(self) -> str:
        return f"skipped:{self.job}:{self.scheduled_at.isoformat()}"

    def describe(self) -> str:
        last = (
            f"its last run was Coalesce run {self.last_coalesce_run_id} for {self.last_night}"
            if self.last_night
            else "no run of it was ever reported"
        )
        return (
            f"Coalesce job {self.job} did not run: scheduled {self.scheduled_at:%a %Y-%m-%d %H:%M %Z}, nothing "
            f"built by {self.deadline:%H:%M %Z}; {last}"
        )

    def finding(self, asset: str, built_at: datetime | None) -> Finding:
        since = f"{built_at:%Y-%m-%d %H:%M} UTC" if built_at else "never"
        evidence: dict[str, Any] = {
            "coalesce_job": self.job,
            "scheduled_at": self.scheduled_at.isoformat(),
            "deadline": self.deadline.isoformat(),
            "last_reported_night": str(self.last_night) if self.last_night else "",
            "last_coalesce_run_id": self.last_coalesce_run_id or "",
            "built_at": built_at.isoformat() if built_at else "",
            "failing_tables": list(self.failing),
            "skip": self.describe(),
        }
        if built_at is not None:
            evidence["hours_since_build"] = round((self.deadline - built_at).total_seconds() / 3600, 1)
        holiday = f" ({self.business_date} is {self.holiday})" if self.holiday else ""
        return Finding(
            check_name=SKIPPED_RUN_CHECK,
            asset_key=asset,
            business_date=self.business_date,
            summary=f"{self.describe()}{holiday}; {asset} not built since {since}",
            severity="WARN" if self.holiday else "ERROR",
            evidence=evidence,
            cause_scope=f"job:{self.job}",
        )


def job_tables(specs: Sequence[dg.AssetSpec], only: Collection[str] | None = None) -> dict[str, list[str]]:
    """Each Coalesce job (of ``only``, e.g. the scheduled ones of ``freshness.schedules``) -> the tables it
    builds."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        jobs = spec.metadata.get("coalesce/jobs")
        for name in [j["name"] for j in jobs.data] if jobs is not None else []:  # type: ignore[union-attr]
            if only is None or name in only:
                out.setdefault(name, []).append(spec.key.to_user_string())
    return out


def _last_reported(instance: dg.DagsterInstance, job: str) -> tuple[date | None, str | None]:
    """The latest business date (and its Coalesce run) the run sensor reported for the job: its checks runs."""
    best: tuple[date | None, str | None] = (None, None)
    for record in instance.get_run_records(dg.RunsFilter(tags={tags.COALESCE_JOB: job}), limit=REPORTED_RUNS):
        run_tags = record.dagster_run.tags
        if tags.COALESCE_RUN_ID not in run_tags:
            continue
        try:
            night = date.fromisoformat(run_tags.get(tags.BUSINESS_DATE, ""))
        except ValueError:
            continue
        if best[0] is None or night > best[0]:
            best = (night, run_tags.get(tags.COALESCE_RUN_ID))
    return best


def judge(
    instance: dg.DagsterInstance, metrics: MetricsFile, job: str, failing: Mapping[str, datetime]
) -> SkippedRun | None:
    """Whether the job skipped the night its failing tables were due (``failing``: table -> when its
    freshness state turned FAIL); None when a run of it was reported for that night."""
    schedule = metrics.freshness.schedules[job]
    tz = ZoneInfo(schedule.timezone)
    grace = timedelta(minutes=schedule.grace_minutes)
    failed_at = min(failing.values()).astimezone(tz)
    # The latest start whose grace had passed when Dagster failed the tables: the run that did not land.
    scheduled_at = croniter(schedule.cron, failed_at - grace + timedelta(seconds=1)).get_prev(datetime)
    night = metrics.business_day.of(scheduled_at)
    last_night, last_run = _last_reported(instance, job)
    if last_night is not None and last_night >= night:
        return None
    holiday = metrics.calendar.holiday(night)
    return SkippedRun(
        job=job,
        scheduled_at=scheduled_at,
        deadline=scheduled_at + grace,
        business_date=night,
        failing=tuple(sorted(failing)),
        last_night=last_night,
        last_coalesce_run_id=last_run,
        holiday=holiday[0] if holiday else None,
    )


def skipped_runs(
    instance: dg.DagsterInstance, metrics: MetricsFile, tables: Mapping[str, Sequence[str]]
) -> list[SkippedRun]:
    """The scheduled jobs (``tables``: job -> its tables, ``job_tables``) that skipped the night their
    tables' freshness policies failed, read from Dagster's storage only."""
    keys = sorted({key_from_path(t) for ts in tables.values() for t in ts}, key=lambda k: k.to_user_string())
    if not keys:
        return []
    records = instance.get_freshness_state_records(keys)
    failed = {
        key.to_user_string(): record.updated_at
        for key, record in records.items()
        if record.freshness_state is FreshnessState.FAIL
    }
    out = []
    for job, job_assets in sorted(tables.items()):
        failing = {t: failed[t] for t in job_assets if t in failed}
        skipped = judge(instance, metrics, job, failing) if failing else None
        if skipped is not None:
            out.append(skipped)
    return out


def skipped_run_diagnosis(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    """Stale input: the tables hold an earlier night's numbers because the job that builds them did not run."""
    ev = finding.evidence
    failing = [t for t in ev.get("failing_tables", [finding.asset_key]) if t in ctx.graph]
    last = ev.get("last_reported_night") or "no earlier night"
    evidence: dict[str, float | int | str] = {
        k: ev[k]
        for k in ("coalesce_job", "scheduled_at", "last_reported_night", "last_coalesce_run_id")
        if ev.get(k)
    }
    evidence["stale_tables"] = len(failing)
    if isinstance(ev.get("hours_since_build"), int | float):
        evidence["hours_since_build"] = float(ev["hours_since_build"])
    shown = ", ".join(failing[:5]) + (f" and {len(failing) - 5} more" if len(failing) > 5 else "")
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.STALE_INPUT,
        cause=f"{ev.get('skip') or finding.summary}. {shown or finding.asset_key} still hold the numbers of "
        f"{last}: nothing failed, the run was never started (see the job's schedule in Coalesce).",
        evidence=evidence,
        upstream_change=f"the scheduled run of Coalesce job {ev.get('coalesce_job')} at {ev.get('scheduled_at')} "
        "did not start",
        cause_asset=failing[0] if failing else finding.asset_key,
        path=failing or [finding.asset_key],
        owners=ctx.graph.owners_on(failing),
    )
