"""What Dagster's storage says about a run that ended badly."""

import dagster as dg


def failure_reason(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    """What stopped the run, from its event log: the first failed step's own error (Dagster wraps it), else
    the run's failure or cancellation message (a worker that died, run monitoring)."""
    failed = instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE, limit=1
    ).records
    event = failed[0].event_log_entry.dagster_event if failed else None
    error = getattr(event.event_specific_data, "error", None) if event else None
    if event is not None and error is not None:
        while error.cause is not None:
            error = error.cause
        return f"step {event.step_key}: {error.message.strip()}"
    for event_type in (dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.RUN_CANCELED):
        records = instance.get_records_for_run(run.run_id, of_type=event_type, limit=1).records
        if records and records[0].event_log_entry.dagster_event:
            return records[0].event_log_entry.dagster_event.message or event_type.value
    return f"the run ended {run.status.value}"
