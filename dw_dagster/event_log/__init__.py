"""Dagster event log storages for the deployment: Dagster's own, storing a run's planned check events in one
transaction (``planned_checks``). Named in the instance's ``dagster.yaml`` (``event_log_storage``)."""
