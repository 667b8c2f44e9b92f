"""Which incidents get a plan: autonomy L2 and up, and only the classes a plan can fix."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from dw_dagster.context.models import Autonomy, load_context_file
from dw_dagster.records.incidents import AffectedAsset, BlastRadius, CauseClass, Diagnosis, Incident
from dw_dagster.remediation.proposals import NoPlan, PlanContext, plan_remediation
from dw_local.world import DISTRIBUTOR_DIR

NOW = datetime(2025, 6, 17, 7, 30, tzinfo=UTC)


def incident() -> Incident:
    return Incident(
        incident_id="INC-20250616-abcdef", cause_key="k", status="open", business_date=date(2025, 6, 16),
        title="t", severity="ERROR", opened_at=NOW, updated_at=NOW,
    )  # fmt: skip


def diagnosis(klass: CauseClass) -> Diagnosis:
    return Diagnosis(incident_id="INC-20250616-abcdef", classification=klass, cause="c",
                     path=["raw_ebs/mtl_onhand_quantities_detail", "inventory/fct_inventory_position"])  # fmt: skip


RADIUS = BlastRadius(
    assets=[AffectedAsset(asset_key="mart/mart_reorder_candidates", name="r", kind="coalesce")]
)


@pytest.mark.parametrize("level", [Autonomy.L0, Autonomy.L1])
def test_below_l2_nothing_is_proposed(level):
    context = load_context_file(DISTRIBUTOR_DIR / "context.yaml")
    domain = context.domains["inventory"].model_copy(update={"autonomy": level})
    ctx = PlanContext(diagnosis=None, context=context.model_copy(update={"domains": {"inventory": domain}}),  # type: ignore[arg-type]
                      specs={}, coalesce=None)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(NoPlan, match=f"at {level.value}: observe only"):
        plan_remediation(incident(), diagnosis(CauseClass.VALUE_LOSS), RADIUS, ctx, now=NOW)


@pytest.mark.parametrize("klass", [CauseClass.SCHEMA_CHANGE, CauseClass.FAILED_LOAD, CauseClass.VOLUME_LOSS])
def test_causes_fixed_upstream_or_in_coalesce_get_no_plan(klass):
    context = load_context_file(DISTRIBUTOR_DIR / "context.yaml")
    ctx = PlanContext(diagnosis=None, context=context, specs={}, coalesce=None)  # type: ignore[arg-type]
    with pytest.raises(NoPlan, match="fixed upstream"):
        plan_remediation(incident(), diagnosis(klass), RADIUS, ctx, now=NOW)


@pytest.mark.parametrize(
    ("klass", "why"),
    [
        (CauseClass.UNIT_CHANGE, "names no subset, factor and source column"),
        (CauseClass.SIGN_CHANGE, "names no subset, factor and source column"),
        (CauseClass.VALUE_LOSS, "no join on the path drops the rows"),
    ],
)
def test_a_plan_needs_the_evidence_it_acts_on(klass, why):
    context = load_context_file(DISTRIBUTOR_DIR / "context.yaml")
    ctx = PlanContext(diagnosis=None, context=context, specs={}, coalesce=None)  # type: ignore[arg-type]
    with pytest.raises(NoPlan, match=why):
        plan_remediation(incident(), diagnosis(klass), RADIUS, ctx, now=NOW)


@pytest.mark.parametrize(
    ("measured", "snapped"), [(99.6, 100), (11.9938, 12), (3.68, 3.7), (0.2716, 0.27), (-0.98, -1), (3.95, 4)]
)
def test_a_normalising_factor_keeps_the_precision_the_data_supports(measured, snapped):
    from dw_dagster.remediation.plan_normalise import snap

    assert snap(measured) == pytest.approx(snapped)
