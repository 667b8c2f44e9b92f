"""From a diagnosis to a remediation plan: what to change, who must approve each part, and how to verify.

One plan per class the project can act on, each through the same gate (every owning team approves), the same
remediation job and the same receipt:

- value loss or a reference-data change through a join (``plan_reference.py``): the missing reference row,
  a node diff that keeps unmatched rows visible, a scoped rerun;
- duplication (``plan_source.py``): the source's owner confirms, the job removes the load's copies (kept for
  undo), then a scoped rerun of what reads the source;
- stale input (``plan_source.py``): the source's owner confirms the feed is fixed, the job waits until the
  source has caught up, then a scoped rerun;
- a unit or sign change (``plan_normalise.py``): a node diff that normalises the subset's values and adds a
  test that fails if they move again, then a scoped rerun.

Each is verified like the reference night's: totals reconcile and are back to their baseline, the new node
test passed, and the class's own check (no copies left, the input fresh).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

from dw_dagster.context.models import Autonomy
from dw_dagster.notifications.routing import incident_domain
from dw_dagster.records.incidents import BlastRadius, CauseClass, Diagnosis, Incident
from dw_dagster.records.remediation import RemediationPlan
from dw_dagster.remediation.plan_common import NoPlan, PlanContext
from dw_dagster.remediation.plan_normalise import normalise_plan
from dw_dagster.remediation.plan_reference import reference_plan
from dw_dagster.remediation.plan_source import dedupe_plan, stale_plan

__all__ = ["PLANNED_CLASSES", "NoPlan", "PlanContext", "plan_remediation"]

PLANS = {
    CauseClass.VALUE_LOSS: reference_plan,
    CauseClass.REFERENCE_DATA_CHANGE: reference_plan,
    CauseClass.DUPLICATION: dedupe_plan,
    CauseClass.STALE_INPUT: stale_plan,
    CauseClass.UNIT_CHANGE: normalise_plan,
    CauseClass.SIGN_CHANGE: normalise_plan,
}
PLANNED_CLASSES = tuple(PLANS)


def plan_remediation(
    incident: Incident,
    diagnosis: Diagnosis,
    radius: BlastRadius,
    ctx: PlanContext,
    now: datetime | None = None,
) -> RemediationPlan:
    """The plan for an incident's diagnosis. Raises :class:`NoPlan` when there is nothing to propose."""
    found = incident_domain(ctx.context, diagnosis, radius)
    domain_name, domain = found if found else (None, None)
    autonomy = domain.autonomy if domain else Autonomy.L1
    if not autonomy.at_least(Autonomy.L2):
        raise NoPlan(
            f"domain {domain_name or '(none)'} is at {autonomy.value}: observe only, nothing is proposed"
        )
    build = PLANS.get(diagnosis.classification)
    if build is None:
        raise NoPlan(
            f"{diagnosis.classification.value}: fixed upstream of the project or in Coalesce; no plan"
        )
    proposals, expectations = build(incident, diagnosis, radius, ctx)

    now = now or datetime.now(UTC)
    hours = domain.approval_timeout_hours if domain else 12.0
    body = [p.model_dump(mode="json") for p in proposals]
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
    return RemediationPlan(
        plan_id=f"{incident.incident_id}-{digest}",
        incident_id=incident.incident_id,
        domain=domain_name,
        autonomy=autonomy.value,
        proposals=proposals,
        expectations=expectations,
        created_at=now,
        expires_at=now + timedelta(hours=hours),
    )
