"""The public suite's e-commerce fault scenarios: a world written only as files, seeded once and cached,
each scenario played on a fresh copy through the real machinery."""

from __future__ import annotations

import pytest
from suite_play import TIMEOUT, play

from dw_local.scenarios.score import BASELINE, DW

pytestmark = [pytest.mark.world, pytest.mark.timeout(TIMEOUT)]


@pytest.fixture(scope="module")
def played():
    return play("ecommerce", benign=False)


def _incident(reports, name, night=1):
    (incident,) = reports[name].nights[night].incidents
    return incident


def test_the_reference_night_on_another_world(played):
    reports, _ = played
    incident = _incident(reports, "ecommerce-new-storefront-unmapped")
    assert (incident.classification, incident.cause_keys[0]) == ("value_loss", "STORE_ID=7")
    assert (
        incident.gap["gap_units"] == pytest.approx(incident.gap["dropped_units"])
        and incident.gap["gap_units"] > 0
    )
    assert {"mart/mart_channel_revenue", "looker/daily_revenue"} <= set(incident.blast_radius)


@pytest.mark.parametrize(
    ("name", "classification", "key"),
    [
        ("ecommerce-store-row-deleted", "reference_data_change", "STORE_ID=3"),
        ("ecommerce-duplicate-load", "duplication", None),
        ("ecommerce-partial-load", "volume_loss", None),
        ("ecommerce-replication-stalled", "stale_input", None),
        ("ecommerce-unit-change", "unit_change", "STORE_ID=4"),
        ("ecommerce-column-renamed", "schema_change", None),
    ],
)
def test_faults_are_diagnosed(played, name, classification, key):
    reports, _ = played
    incident = _incident(reports, name)
    assert incident.classification == classification
    assert key is None or key in incident.cause_keys


def test_a_remap_between_groups_with_a_flat_total_names_both_groups(played):
    reports, _ = played
    report = reports["ecommerce-store-remapped"]
    remap = report.nights[1]
    shifts = [a for a in remap.alarms if a.check == "total_channel_revenue"]
    assert shifts, [(a.check, a.asset) for a in remap.alarms]
    assert "a shift between groups" in shifts[0].summary
    assert "lost CHANNEL=app" in shifts[0].summary and "gained CHANNEL=web" in shifts[0].summary
    assert report.nights[0].alarms == []


def test_a_new_fault_under_an_open_incident_opens_its_own_linked_to_it(played):
    reports, score = played
    report = reports["ecommerce-duplicate-load-under-open-incident"]
    (earlier,) = report.before[0].incidents
    assert earlier.classification == "reference_data_change"
    night = report.nights[0]
    (new,) = [i for i in night.incidents if not i.continued]
    assert new.classification == "duplication" and new.related_to == [earlier.incident_id]
    # The deleted row's loss is still there: tonight's repeat continues its incident, not the new one.
    assert [i.incident_id for i in night.incidents if i.continued] == [earlier.incident_id]


def test_a_stall_on_its_second_night_continues_its_incident_and_resolves_when_caught_up(played):
    reports, _ = played
    first, second, caught_up = reports["ecommerce-replication-stalled-two-nights"].nights[1:]
    (incident,) = first.incidents
    assert [(i.incident_id, i.continued) for i in second.incidents] == [(incident.incident_id, True)]
    assert incident.incident_id in caught_up.resolved
    # The one-night stall resolves on the night replication caught up.
    stall = reports["ecommerce-replication-stalled"].nights
    assert stall[1].incidents[0].incident_id in stall[2].resolved


def test_the_lifecycle_nights_score_as_expected(played):
    _, score = played
    dw = score["total"][DW]
    assert dw["lifecycle_scored"] == 2 and dw["lifecycle_correct"] == 2


def test_the_skipped_night_starts_no_run(played):
    reports, _ = played
    skipped = reports["ecommerce-scheduler-skip"].nights[1]
    assert (skipped.run_id, skipped.run_status) == (None, "skipped")


def test_dw_dagster_finds_more_faults_than_the_elementary_default_on_the_same_nights(played):
    _, score = played
    dw, base = score["total"][DW], score["total"][BASELINE]
    assert dw["table_nights"] == base["table_nights"] > 0
    assert dw["recall"] > base["recall"]
