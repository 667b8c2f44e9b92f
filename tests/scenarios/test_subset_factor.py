"""A unit change by an unusual factor on one subset of rows, small enough that the day's total stays inside
its spread: the subset's group falls alone while the others hold, beyond its share's own record, and the
diagnosis measures the factor from the rows. Played through the real machinery on two worlds of the public
suite (e-commerce: a storefront's prices at a quarter; ad spend: a campaign's impressions at three tenths)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from suite_play import TIMEOUT
from world_cache import WORLD_CACHE

from dw_local.scenarios.runner import run_scenario
from dw_local.scenarios.suite import SUITE_DIR

pytestmark = [pytest.mark.world, pytest.mark.timeout(TIMEOUT)]

WORLDS = SUITE_DIR.parent / "worlds"
CASES = {
    # UK web at 10% of the day's revenue: the total moves 7.5%, under daily_revenue's 10% minimum change.
    "ecommerce": ("ORDER_LINES", "UNIT_PRICE", {"STORE_ID": 3}, 0.25, "STORE_ID=3", "sales/fct_sales"),
    # One campaign in eight: impressions move 8%, under delivered_impressions' 15%.
    "adspend": ("AD_DELIVERY", "IMPRESSIONS", {"CAMPAIGN_ID": 3003}, 0.3, "CAMPAIGN_ID=3003", "delivery/fct_ad_delivery"),
}  # fmt: skip


@pytest.mark.parametrize("world", CASES)
def test_a_subset_scaled_by_an_unusual_factor_is_found_and_named(world, tmp_path: Path):
    table, column, where, factor, key, fact = CASES[world]
    event = {"kind": "unit_change", "table": table, "column": column, "factor": factor, "where": where}
    path = tmp_path / f"{world}-subset-factor.yaml"
    path.write_text(yaml.safe_dump({
        "name": f"{world}-subset-factor", "world": str(WORLDS / world / "world.yaml"),
        "nights": [{}, {"events": [event], "expect": {"class": ["unit_change"], "cause_keys": [key]}}],
    }))  # fmt: skip
    report = run_scenario(path, WORLD_CACHE)
    quiet, fault = report.nights
    assert quiet.alarms == [], quiet.alarms
    alone = [a for a in fault.alarms if "fell alone" in a.summary]
    assert alone and all(a.severity == "ERROR" for a in alone), [a.summary for a in fault.alarms]
    diagnosed = [i for i in fault.incidents if i.classification == "unit_change" and key in i.cause_keys]
    assert diagnosed, [(i.classification, i.cause_keys, i.cause) for i in fault.incidents]
    assert fact in diagnosed[0].blast_radius or fact in diagnosed[0].assets
