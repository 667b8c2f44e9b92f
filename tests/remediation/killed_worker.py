"""A remediation run's worker, as Dagster's run launcher starts one: its own process, executing one run of the
code location's ``remediate_incident`` on the deployment's instance. It is killed (SIGKILL, nothing cleans
up) at one crash point: the moment it sends the warehouse the record of a change it has just made, after the
change itself. Used by ``test_killed_worker_local_world.py``.

``python killed_worker.py DAGSTER_HOME RUN_ID`` with the code location's environment.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _dies_on_the_change_record() -> None:
    """The warehouse client sends nothing more once the run writes its ``change`` event: the process dies
    as that statement is about to go out (the row it records is already in the table)."""
    from snowflake.connector.cursor import SnowflakeCursor

    execute = SnowflakeCursor.execute

    def dying_execute(self, command, params=None, *args, **kwargs):
        if (
            "INCIDENT_EVENTS" in command
            and command.lstrip().upper().startswith("MERGE")
            and "change" in (params or ())
        ):
            os.kill(os.getpid(), signal.SIGKILL)
        return execute(self, command, params, *args, **kwargs)

    SnowflakeCursor.execute = dying_execute  # type: ignore[method-assign]


def main(home: str, run_id: str) -> None:
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.events import DagsterEvent, DagsterEventType
    from dagster._core.execution.api import execute_run_iterator

    from dw_dagster.app.definitions import load_definitions
    from dw_local.instance_storage import deployment_instance

    _dies_on_the_change_record()
    instance = deployment_instance(Path(home))
    job = load_definitions(instance).resolve_job_def("remediate_incident")
    run = instance.get_run_by_id(run_id)
    instance.report_dagster_event(
        DagsterEvent(event_type_value=DagsterEventType.RUN_STARTING.value, job_name=run.job_name), run_id
    )
    for _ in execute_run_iterator(InMemoryJob(job), instance.get_run_by_id(run_id), instance):
        pass


if __name__ == "__main__":
    main(*sys.argv[1:3])
