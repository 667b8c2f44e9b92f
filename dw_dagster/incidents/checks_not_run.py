"""A night whose checks could not run is a finding of its own (``checks_not_run``), never a pass.

A checks run that errors (the warehouse unreachable) or whose worker dies is retried by Dagster's run
retries (``tags.CHECKS_RUN_RETRIES``). When the last retry fails too, or run monitoring cancels a hung one,
that Coalesce run's night was never judged. Two run-status sensors (failure, cancellation) read that from
Dagster's storage, never the warehouse: a failed checks run that Dagster will not retry (its
``dagster/will_retry`` tag, as the retry daemon decides it) or a canceled one requests ``report_checks_not_run``,
which records the finding for the job's owners (the on-call), on the job's incident of the night.
"""

from collections.abc import Mapping, Sequence
from datetime import date

import dagster as dg

from dw_dagster import tags
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.internals import (
    RETRY_NUMBER_TAG,
    ROOT_RUN_ID_TAG,
    WILL_RETRY_TAG,
    auto_reexecution_should_retry_run,
)
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident
from dw_dagster.runs import failure_reason

CHECKS_NOT_RUN = "checks_not_run"
REPORT_JOB = "report_checks_not_run"
FAILED_RUN = "dw/failed_run_id"
"""The checks run (the last of its retries) that could not judge the night, on the report run."""
OUTCOME = "dw/checks_run_outcome"


def is_checks_run(run: dg.DagsterRun) -> bool:
    """A run the Coalesce run sensor requested to judge one Coalesce run (not a diagnosis or remediation)."""
    return tags.COALESCE_RUN_ID in run.tags and tags.INCIDENT_ID not in run.tags


def retried(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether Dagster's run retries will launch another attempt of this failed run."""
    value = run.tags.get(WILL_RETRY_TAG)
    if value is None:
        return bool(auto_reexecution_should_retry_run(instance, run, None))
    return value.lower() == "true"


def report_request(run: dg.DagsterRun, what: str) -> dg.RunRequest:
    # Only the failed run's id: the checks runs' own tags would make this run count as a reported night.
    return dg.RunRequest(
        run_key=f"{CHECKS_NOT_RUN}:{run.run_id}",
        job_name=REPORT_JOB,
        tags={FAILED_RUN: run.run_id, OUTCOME: what},
    )


def not_run_finding(
    instance: dg.DagsterInstance, run: dg.DagsterRun, tables: Mapping[str, Sequence[str]]
) -> Finding:
    job = run.tags.get(tags.COALESCE_JOB)
    coalesce_run = run.tags[tags.COALESCE_RUN_ID]
    tries = int(run.tags.get(RETRY_NUMBER_TAG, "0"))
    what = "was canceled" if run.status is dg.DagsterRunStatus.CANCELED else "failed"
    after = f" after {tries} {'retry' if tries == 1 else 'retries'}" if tries else ""
    night = date.fromisoformat(run.tags[tags.BUSINESS_DATE])
    subject = f"Coalesce job {job}" if job else "Coalesce"
    return Finding(
        check_name=CHECKS_NOT_RUN,
        asset_key=f"coalesce_job/{job}" if job else f"coalesce_run/{coalesce_run}",
        business_date=night,
        summary=f"The checks of {subject} run {coalesce_run} ({night}) could not run: checks run {run.run_id} "
        f"{what}{after}: {failure_reason(instance, run)}. Nothing of that night was judged.",
        evidence={
            "checks_run_id": run.run_id,
            "root_run_id": run.tags.get(ROOT_RUN_ID_TAG, run.run_id),
            "retries": tries,
            "outcome": run.status.value,
            "tables": list(tables.get(job, [])) if job else [],
        },
        cause_scope=f"job:{job}" if job else f"coalesce_run:{coalesce_run}",
        dagster_run_id=run.run_id,
        coalesce_run_id=coalesce_run,
    )


def checks_not_run_diagnosis(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    """Not a data cause: the night is unjudged. The owners of the job's tables are told what stopped it."""
    tables = [t for t in finding.evidence.get("tables", []) if t in ctx.graph]
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.UNKNOWN,
        cause=finding.summary + " Rerun the checks once the cause is fixed (re-execute the checks run).",
        evidence={
            k: finding.evidence[k] for k in ("checks_run_id", "retries", "outcome") if k in finding.evidence
        },
        path=tables,
        owners=ctx.graph.owners_on(tables),
    )
