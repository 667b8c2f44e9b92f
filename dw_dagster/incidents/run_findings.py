"""Findings about runs rather than numbers (a scheduled run that never started, checks that could not run),
each with its own diagnosis: ``diagnosis.py`` asks here first."""

from dw_dagster.incidents.checks_not_run import CHECKS_NOT_RUN, checks_not_run_diagnosis
from dw_dagster.incidents.skipped_run import SKIPPED_RUN_CHECK, skipped_run_diagnosis

RUN_FINDINGS = {SKIPPED_RUN_CHECK: skipped_run_diagnosis, CHECKS_NOT_RUN: checks_not_run_diagnosis}
