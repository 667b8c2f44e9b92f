"""Whose Snowflake credentials a remediation rerun starts Coalesce with: the approving owner's own."""

import os

import dagster as dg

from dw_dagster.coalesce.models import CoalesceUserCredentials
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.context.models import ContextFile
from dw_dagster.records.remediation import Approval


def run_credentials(
    coalesce: CoalesceWorkspace, context_file: ContextFile, approval: Approval
) -> CoalesceUserCredentials:
    """The approver's own credentials: the workspace's ``owner_credentials`` for their email, else their
    ``run_as`` in the context file with the password read now (one approver's missing variable fails only
    the rerun they approved)."""
    try:
        return coalesce.user_credentials_for(approval.email)
    except KeyError:
        pass
    person = context_file.person(approval.email)
    if person is None or person.run_as is None:
        raise dg.Failure(
            f"{approval.approver}: no run_as in the context file and no owner_credentials for {approval.email}"
        )
    password = os.environ.get(person.run_as.password_env)
    if not password:
        raise dg.Failure(
            f"{person.run_as.password_env}: not set; it holds {approval.approver}'s Snowflake password for Coalesce reruns"
        )
    return CoalesceUserCredentials(
        snowflake_username=person.run_as.snowflake_username,
        snowflake_password=password,
        snowflake_warehouse=person.run_as.snowflake_warehouse,
        snowflake_role=person.run_as.snowflake_role,
    )
