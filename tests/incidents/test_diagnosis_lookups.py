"""A reference row that changed one or more lookups up the chain (fact -> lookup -> lookup of the lookup),
named where it changed, not at the fact's nearest join; and a value change on a subset that also fails a
Coalesce test, diagnosed from the data. Played for real on two worlds of different shapes: the ad-spend
world (delivery -> campaign -> advertiser -> agency, the agency's name read two lookups up) and the meters
test world (readings -> meter register -> zone, the region read one lookup up, totals by region)."""

from __future__ import annotations

import pytest
from nights import HERE, METERS, Diagnosed, Nights

from dw_dagster.records.incidents import CauseClass, Finding

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]

ADSPEND = HERE.parent.parent / "local" / "dw_local" / "scenarios" / "worlds" / "adspend" / "world.yaml"


def _play(world, tmp_path_factory, faults: dict[str, dict], totals: dict[str, tuple[str, str]] | None = None):
    """Each fault on its own night; where ``totals`` names the fault, the finding a group judgement would
    raise on that total (name, asset) is diagnosed as the diagnosis job would."""
    n = Nights(world, tmp_path_factory.mktemp(world.parent.name))
    out = {}
    try:
        for name, event in faults.items():
            found = n.play(event)
            if name in (totals or {}):
                total, asset = totals[name]  # type: ignore[index]
                day = n.world.business_date(n.night - 1)
                finding = Finding(check_name=f"total_{total}", asset_key=asset, business_date=day,
                                  summary=f"{total} moved between groups", cause_scope="job")  # fmt: skip
                found = [Diagnosed(found[0].incident if found else None, n.diagnose(finding), None, None)]  # type: ignore[arg-type]
            out[name] = found
            n.resolve()
            if event["kind"].startswith("reference_row"):
                n.repair(event)
    finally:
        n.close()
    return out


@pytest.fixture(scope="module")
def adspend(tmp_path_factory):
    return _play(ADSPEND, tmp_path_factory, {
        "deleted": {"kind": "reference_row_deleted", "table": "ADVERTISERS", "where": {"ADVERTISER_ID": 204}},
        "remapped": {"kind": "reference_row_remapped", "table": "ADVERTISERS", "where": {"ADVERTISER_ID": 203},
                     "set": {"AGENCY_ID": 13}},
        "sign": {"kind": "unit_change", "table": "AD_DELIVERY", "column": "SPEND", "factor": -1,
                 "where": {"PLACEMENT_TYPE": "audio"}},
        "agency_deleted": {"kind": "reference_row_deleted", "table": "AGENCIES", "where": {"AGENCY_ID": 13}},
        # A new campaign the trading desk added, pointing at an advertiser nobody added: the row missing is
        # one table further up than the fact's join.
        "parent_missing": {"kind": "new_key_mapped", "table": "AD_DELIVERY", "column": "CAMPAIGN_ID", "value": 3099,
                           "fraction": 0.06, "reference": "CAMPAIGNS",
                           "row": {"CAMPAIGN_ID": 3099, "CAMPAIGN_NAME": "Halden spring", "ADVERTISER_ID": 299,
                                   "CURRENCY": "GBP", "_SYNCED_AT": "2025-12-18 10:00:00"}},
    })  # fmt: skip


@pytest.fixture(scope="module")
def meters(tmp_path_factory):
    return _play(METERS, tmp_path_factory, {
        "deleted": {"kind": "reference_row_deleted", "table": "ZONES", "where": {"ZONE_CODE": "W"}},
        "remapped": {"kind": "reference_row_remapped", "table": "ZONES", "where": {"ZONE_CODE": "W"},
                     "set": {"REGION": "Central"}},
        "parent_missing": {"kind": "new_key_mapped", "table": "READINGS", "column": "METER_ID", "value": 1099,
                           "fraction": 0.06, "reference": "METERS",
                           "row": {"METER_ID": 1099, "ZONE_CODE": "Q", "STATUS": "ACTIVE",
                                   "INSTALLED_AT": "2025-08-13 09:00:00"}},
    }, totals={"remapped": ("billed_kwh", "usage/fct_usage")})  # fmt: skip


def _one(found, classification):
    assert found, "the fault opened an incident"
    hits = [d for d in found if d.diagnosis.classification is classification]
    assert hits, [(d.diagnosis.classification, d.labels, d.diagnosis.cause) for d in found]
    return hits[0]


def test_a_row_deleted_two_lookups_up_is_named_where_it_was_deleted(adspend):
    d = _one(adspend["deleted"], CauseClass.REFERENCE_DATA_CHANGE)
    assert d.labels[0] == "ADVERTISER_ID=204", d.diagnosis.cause
    assert "deleted from" in d.diagnosis.keys[0].change and "ADVERTISERS" in d.diagnosis.keys[0].change
    assert {"CAMPAIGN_ID=3006", "CAMPAIGN_ID=3007"} <= set(d.labels), "the fact's keys it took with it"
    assert d.diagnosis.evidence["lookup_node"] == "delivery/dim_campaign"
    assert any("delivery/dim_campaign's INNER join" in q.purpose for q in d.diagnosis.queries)


def test_a_row_deleted_one_lookup_up_on_another_shape(meters):
    d = _one(meters["deleted"], CauseClass.REFERENCE_DATA_CHANGE)
    assert d.labels[0] == "ZONE_CODE=W", d.diagnosis.cause
    assert "deleted from" in d.diagnosis.keys[0].change and "ZONES" in d.diagnosis.keys[0].change
    assert d.diagnosis.evidence["lookup_node"] == "usage/dim_meter"


@pytest.mark.parametrize("world", ["adspend", "meters"])
def test_a_new_key_whose_parent_row_is_missing_up_the_chain_is_named_there(world, request):
    found = request.getfixturevalue(world)["parent_missing"]
    parent, table, child = {"adspend": ("ADVERTISER_ID=299", "ADVERTISERS", "CAMPAIGN_ID=3099"),
                            "meters": ("ZONE_CODE=Q", "ZONES", "METER_ID=1099")}[world]  # fmt: skip
    d = _one(found, CauseClass.REFERENCE_DATA_CHANGE)
    assert d.labels[0] == parent, d.diagnosis.cause
    change = d.diagnosis.keys[0].change or ""
    assert "no row in" in change and table in change and child in change
    assert child in d.labels, "the fact's new key, which points at it"


def test_a_row_remapped_up_the_chain_is_a_reference_change_not_a_unit_change(adspend):
    d = _one(adspend["remapped"], CauseClass.REFERENCE_DATA_CHANGE)
    assert d.labels == ["ADVERTISER_ID=203"], d.diagnosis.cause
    assert "ADVERTISERS" in d.diagnosis.keys[0].change and "Copperleaf Partners" in d.diagnosis.keys[0].change
    assert not [x for x in adspend["remapped"] if x.diagnosis.classification is CauseClass.UNIT_CHANGE]


def test_a_row_remapped_up_the_chain_on_another_shape_is_named_by_its_own_key(meters):
    d = _one(meters["remapped"], CauseClass.REFERENCE_DATA_CHANGE)
    assert d.labels == ["ZONE_CODE=W"], (
        "a key the fact does not carry, read from its lookup: " + d.diagnosis.cause
    )
    assert "ZONES" in d.diagnosis.keys[0].change and "REGION=Central" in d.diagnosis.keys[0].change
    assert not [x for x in meters["remapped"] if x.diagnosis.classification is CauseClass.UNIT_CHANGE]


def test_a_row_deleted_behind_a_left_join_is_a_shift_to_no_group_named_where_it_was_deleted(adspend):
    # DIM_CAMPAIGN left-joins AGENCIES: nothing drops, every count holds, and Copperleaf's billing now
    # groups under no agency. Before, the NULL group was taken for a new key and nothing was raised.
    d = _one(adspend["agency_deleted"], CauseClass.REFERENCE_DATA_CHANGE)
    assert d.labels == ["AGENCY_ID=13"], d.diagnosis.cause
    assert "deleted from" in d.diagnosis.keys[0].change and "AGENCIES" in d.diagnosis.keys[0].change
    assert "Copperleaf Partners" in d.diagnosis.keys[0].change


def test_a_sign_flip_that_fails_a_test_below_every_total_is_read_from_the_data(adspend):
    d = _one(adspend["sign"], CauseClass.SIGN_CHANGE)
    assert d.labels == ["PLACEMENT_TYPE=audio"], d.diagnosis.cause
    assert "NO_NEGATIVE_SPEND" in d.diagnosis.cause, "the failed test is evidence, not the class"
    assert (
        d.diagnosis.keys[0].factor == pytest.approx(-1, rel=0.15)
        and d.diagnosis.evidence["measure"] == "SPEND"
    )


def test_within_the_query_budget(adspend, meters):
    from dw_dagster.incidents.audit import QUERY_BUDGET

    for name, found in [*adspend.items(), *(("meters " + k, v) for k, v in meters.items())]:
        for d in found:
            assert 0 < len(d.diagnosis.queries) <= QUERY_BUDGET, name
