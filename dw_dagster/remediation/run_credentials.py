"""Whose Snowflake credentials a remediation rerun starts Coalesce with: the approving owner's own."""

import dagster as dg

from dw_dagster.coalesce.job_assets import user_credentials_from_env
from dw_dagster.coalesce.models import CoalesceUserCredentials
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.context.models import ContextFile
from dw_dagster.records.remediation import Approval


def run_credentials(
    coalesce: CoalesceWorkspace, context_file: ContextFile, approval: Approval
) -> CoalesceUserCredentials:
    """The approver's own credentials: the workspace's ``owner_credentials`` for their email, else their
    ``run_as`` in the context file, its password (or programmatic access token) or key pair read now (one
    approver's missing or broken variable fails only the rerun they approved)."""
    if approval.email in coalesce.owner_credentials:
        return coalesce.user_credentials_for(approval.email)
    person = context_file.person(approval.email)
    if person is None or person.run_as is None:
        raise dg.Failure(
            f"{approval.approver}: no run_as in the context file and no owner_credentials for {approval.email}"
        )
    run_as = person.run_as
    try:
        return user_credentials_from_env(
            run_as.snowflake_username,
            password_var=run_as.password_env,
            private_key_var=run_as.private_key_env,
            passphrase_var=run_as.private_key_passphrase_env,
            warehouse=run_as.snowflake_warehouse,
            role=run_as.snowflake_role,
        )
    except ValueError as e:
        raise dg.Failure(
            f"{e}: it holds {approval.approver}'s Snowflake credentials for Coalesce reruns (context file, "
            f"run_as of {approval.email})"
        ) from None
