"""The public suite's e-commerce scenarios: a world written only as files, seeded once and cached, each
scenario played on a fresh copy through the real machinery."""

from __future__ import annotations

import pytest

from conftest import WORLD_CACHE
from dw_local.scenarios.runner import run_scenario
from dw_local.scenarios.score import BASELINE, DW, score_reports
from dw_local.scenarios.suite import SUITE_DIR, scenario_files

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def played():
    reports = {r.name: r for r in (run_scenario(p, WORLD_CACHE) for p in scenario_files(SUITE_DIR / "ecommerce"))}
    return reports, score_reports(list(reports.values()))


def _incident(reports, name, night=1):
    (incident,) = reports[name].nights[night].incidents
    return incident


def test_the_reference_night_on_another_world(played):
    reports, _ = played
    incident = _incident(reports, "ecommerce-new-storefront-unmapped")
    assert (incident.classification, incident.cause_keys[0]) == ("value_loss", "STORE_ID=7")
    assert incident.gap["gap_units"] == pytest.approx(incident.gap["dropped_units"]) and incident.gap["gap_units"] > 0
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


def test_benign_nights_raise_nothing(played):
    reports, _ = played
    for name in ("ecommerce-benign-month-end-weekend", "ecommerce-benign-new-storefront-mapped"):
        for night in reports[name].nights:
            assert night.run_status == "completed" and night.alarms == [], (name, night.night, night.alarms)


def test_steady_growth_keeps_revenue_reconciled(played):
    reports, _ = played
    # Growth on top of month-end can push a same-weekday row count past its bound (benchmarks/README.md);
    # the revenue totals, reconciled and baselined, stay quiet.
    for night in reports["ecommerce-benign-steady-growth"].nights:
        assert not [a for a in night.alarms if a.check.startswith("total_")], night.alarms


def test_the_skipped_night_starts_no_run(played):
    reports, _ = played
    skipped = reports["ecommerce-scheduler-skip"].nights[1]
    assert (skipped.run_id, skipped.run_status) == (None, "skipped")


def test_dw_dagster_beats_the_elementary_default_on_the_same_nights(played):
    _, score = played
    dw, base = score["total"][DW], score["total"][BASELINE]
    assert dw["table_nights"] == base["table_nights"] > 0
    assert dw["recall"] > base["recall"]
    assert dw["false_alarms"] <= base["false_alarms"]
