"""Dagster event log storages for the deployment: Dagster's own, storing a run's planned check events in one
transaction when configured (``batch_planned_check_events``; ``planned_checks``). Named in the instance's
``dagster.yaml`` (``event_log_storage``)."""
