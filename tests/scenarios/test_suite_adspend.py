"""The public suite's third world (ad spend: a UK agency group's delivery through campaign -> advertiser ->
agency and the day's FX rates), played through the real machinery on a fresh copy of its seeded template:
a new key unmapped through the joins, a stale lookup table and a skipped night. The rest of its suite
(local/dw_local/scenarios/suite/adspend/, bank holidays and month-end included) is played by `scenario score`."""

from __future__ import annotations

import pytest
from suite_play import TIMEOUT
from world_cache import WORLD_CACHE

from dw_local.scenarios.runner import run_scenario
from dw_local.scenarios.suite import SUITE_DIR

pytestmark = [pytest.mark.world, pytest.mark.timeout(TIMEOUT)]


def _play(name: str):
    return run_scenario(SUITE_DIR / "adspend" / f"{name}.yaml", WORLD_CACHE)


def _alarms(night) -> set[tuple[str, str]]:
    return {(a.asset, a.check) for a in night.alarms}


def test_a_new_campaign_missing_from_the_sheet_is_found_through_the_joins():
    night = _play("new_campaign_unmapped").nights[1]
    assert night.run_status == "completed"
    assert any(a.asset == "delivery/fct_ad_delivery" for a in night.alarms), night.alarms
    assert any(
        i.classification == "value_loss" and "CAMPAIGN_ID=3010" in i.cause_keys for i in night.incidents
    )


def test_a_stale_rates_table_fails_its_input_freshness():
    night = _play("fx_rates_not_refreshed").nights[1]
    assert night.run_status == "completed"
    assert ("stage/stg_fx", "input_freshness") in _alarms(night), night.alarms


def test_a_skipped_night_is_seen_by_the_freshness_policies():
    report = _play("scheduler_skip")
    night = report.nights[1]
    assert (night.run_id, night.run_status) == (None, "skipped")
    stale = {a.asset for a in night.alarms if a.check == "freshness_policy"}
    assert {"delivery/fct_ad_delivery", "billing/mart_agency_billing"} <= stale, night.alarms
    assert not [a for a in report.nights[0].alarms if a.check == "freshness_policy"]
