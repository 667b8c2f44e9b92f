"""Run tags dw-dagster reads and writes. The ``dw/`` prefix keeps them apart from Dagster's own."""

# Set by the Coalesce run sensor on the checks run it requests.
COALESCE_RUN_ID = "dw/coalesce_run_id"
COALESCE_ENVIRONMENT_ID = "dw/coalesce_environment_id"
COALESCE_JOB = "dw/coalesce_job"
BUSINESS_DATE = "dw/business_date"

# Set on the diagnosis run and the remediation run of one incident.
INCIDENT_ID = "dw/incident_id"

# The approval gate (dagster.yaml holds runs tagged dw/approval=pending in the queue at limit 0). Only
# `dw-dagster approve` flips it, and the remediation job's first op checks the project's own approval
# record, not this tag: a tag typed at launch approves nothing.
PLAN_ID = "dw/plan_id"
APPROVAL = "dw/approval"
APPROVAL_PENDING = "pending"
APPROVAL_APPROVED = "approved"
# The owning teams whose approval the queued run still waits for (shown on the run in the UI).
APPROVALS_NEEDED = "dw/approvals_needed"

# Run-time parameters dw-dagster sets on the Coalesce reruns it starts (visible in Coalesce's run details): the
# run sensor counts such a rerun for the incident's business date, not for the morning it ran.
COALESCE_PARAM_INCIDENT_ID = "dw_incident_id"
COALESCE_PARAM_BUSINESS_DATE = "dw_business_date"

# What the held run says about itself in the UI: who must still approve (APPROVALS_NEEDED), by when, how.
APPROVE_BY = "dw/approve_by"
APPROVE_HOW = "dw/approve_how"
# A one-time value the proposals sensor puts on the run it submits; only a hash of it is recorded, so the
# sensor can tell its own run from a copy someone launched with the same tags after seeing them.
SUBMISSION = "dw/submission"

# Set on the incident lifecycle run: what the incident sensor found due (``resolve`` or ``stale``).
LIFECYCLE_ACTION = "dw/lifecycle"

# Checks runs are retried by Dagster's run retries (dagster.yaml enables them; runs opt in with these tags):
# up to 3 times, from the failed steps, when a step errors (an unreachable warehouse) or the run worker dies.
# Each retry waits before its first login, doubling (WarehouseResource.retry_backoff_seconds). A checks run
# still going after 30 minutes is stopped by run monitoring.
CHECKS_RUN_RETRIES = {
    "dagster/max_retries": "3",
    "dagster/retry_strategy": "FROM_FAILURE",
    "dagster/max_runtime": "1800",
}
