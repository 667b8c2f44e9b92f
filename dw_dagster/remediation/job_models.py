"""What the remediation job's steps hand each other, and the job's run config: the approval check's
result (the plan, its approvals, its incident and what the run was bound to) and the rerun started."""

from collections.abc import Sequence

import dagster as dg
from pydantic import BaseModel

from dw_dagster.records.incidents import Incident
from dw_dagster.records.remediation import Approval, RemediationPlan
from dw_dagster.remediation.submission import Binding


class Approved(BaseModel):
    plan: RemediationPlan
    approvals: list[Approval]
    incident: Incident
    binding: Binding

    def approver_for(self, owners: Sequence[str]) -> Approval:
        found = next((a for a in self.approvals if a.team in owners), None)
        if found is None:
            raise dg.Failure(f"plan {self.plan.plan_id}: no approval from any of {', '.join(owners)}")
        return found


class Rerun(BaseModel):
    coalesce_run_id: int
    run_as: str


class RemediationConfig(dg.Config):
    deploy_timeout_seconds: float = 6 * 3600.0
    """How long after the last approval to wait for the node owner's deploy before escalating."""
    poll_seconds: float = 15.0
    rerun_timeout_seconds: float = 4 * 3600.0
    stop_wait_seconds: float = 24 * 3600.0
    """How long a step waits for `dw-dagster resume` while the org-wide stop is in force."""
