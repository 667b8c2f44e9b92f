"""Run tags dw-dagster reads and writes. The ``dw/`` prefix keeps them apart from Dagster's own."""

# Set by the Coalesce run sensor on the checks run it requests.
COALESCE_RUN_ID = "dw/coalesce_run_id"
COALESCE_ENVIRONMENT_ID = "dw/coalesce_environment_id"
COALESCE_JOB = "dw/coalesce_job"
BUSINESS_DATE = "dw/business_date"
