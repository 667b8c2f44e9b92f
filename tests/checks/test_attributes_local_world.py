"""A reference row re-pointed to another value of a dimension attribute no recorded total groups by: the
totals stay flat, the attribute's values trade units. The attribute is found from the lineage (a column the
joins bring from a reference table), measured nightly by the total's own SQL regrouped, and the shift is an
ERROR traced to the row. On two worlds, each with the total that grouped by the attribute taken out of its
metrics file: e-commerce (a storefront's channel, carried into the sales fact) and ad spend (an advertiser's
agency, two lookups up, carried into the delivery fact)."""

from __future__ import annotations

import pytest
from test_baselines_local_world import ECOMMERCE, play

from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.scenarios.suite import SUITE_DIR

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]

ADSPEND = SUITE_DIR.parent / "worlds" / "adspend" / "world.yaml"
CASES = {
    "ecommerce": (
        str(ECOMMERCE / "world.yaml"), "channel_revenue", "DW_SHOP", "total_daily_revenue", "CHANNEL", "STORE_ID=2",
        {"kind": "reference_row_remapped", "table": "STORE_MAP", "where": {"STORE_ID": 2}, "set": {"CHANNEL": "web"}},
    ),
    "adspend": (
        str(ADSPEND), "agency_spend_gbp", "MEDIA_DW", "total_delivered_impressions", "AGENCY_NAME", "ADVERTISER_ID=203",
        {"kind": "reference_row_remapped", "table": "ADVERTISERS", "where": {"ADVERTISER_ID": 203}, "set": {"AGENCY_ID": 13}},
    ),
}  # fmt: skip


@pytest.mark.parametrize("world", CASES)
def test_a_shift_between_values_of_an_attribute_no_total_groups_by(world, tmp_path):
    path, grouped_by_it, database, check, attribute, key, event = CASES[world]
    diagnoses = {}

    def without(m):
        m["totals"] = [t for t in m["totals"] if t["name"] != grouped_by_it]

    def diagnosed(night, daemon):
        store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema(database, "DW_OPS"))
        for incident in store.list():
            found = latest_diagnosis(store, incident.incident_id)
            if found:
                diagnoses[incident.incident_id] = found[0]

    night = {"events": [event], "expect": {"class": ["reference_data_change"], "cause_keys": [key]}}
    played = play(tmp_path, path, [{}, night], metrics=without, between=diagnosed)
    assert played.errors(0) == []
    shifted = next(c for c in played.outcomes[1].checks if c.check == check)
    assert shifted.severity == "ERROR", played.errors(1)
    assert (
        "a shift between groups" in shifted.description and f"{attribute} is carried" in shifted.description
    )
    traced = [d for d in diagnoses.values() if d.classification.value == "reference_data_change"]
    assert traced and any(key in [k.label for k in d.keys] for d in traced), [
        (d.classification, [k.label for k in d.keys], d.cause) for d in diagnoses.values()
    ]
