"""Diagnosis on a world of another shape (tests/incidents/worlds/meters): readings tagged with a firmware
version, joined to a meter register through a join whose condition also filters on the meter's status, a
second lookup for the region, and totals grouped by region, never by the join's key. Each fault is played
for real on the source tables, one night each."""

from __future__ import annotations

import pytest
from nights import METERS, Nights, SignFlip

from dw_dagster.records.incidents import CauseClass

pytestmark = [pytest.mark.world, pytest.mark.timeout(600)]

DELETED = {"kind": "reference_row_deleted", "table": "METERS", "where": {"METER_ID": 1007}}
RETIRED = {"kind": "reference_row_remapped", "table": "METERS", "where": {"METER_ID": 1003}, "set": {"STATUS": "RETIRED"}}  # fmt: skip


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    n = Nights(METERS, tmp_path_factory.mktemp("meters"))
    out = {}
    try:
        for name, events in {
            "deleted": [DELETED],
            "retired": [RETIRED],
            "unit": [{"kind": "unit_change", "table": "READINGS", "column": "KWH", "factor": 3.7,
                      "where": {"FIRMWARE": "v3"}}],
            "sign": [SignFlip(table="READINGS", column="KWH", where={"FIRMWARE": "v2"})],
            "stalled": [{"kind": "replication_stalled"}],
            "duplicated": [{"kind": "duplicate_load", "table": "READINGS", "fraction": 0.5}],
            "null": [{"kind": "null_join_key", "table": "READINGS", "column": "METER_ID", "fraction": 0.1}],
        }.items():  # fmt: skip
            (out[name],) = n.play(*events)
            n.resolve()
            for event in events:
                if isinstance(event, dict) and event["kind"].startswith("reference_row"):
                    n.repair(event)
        yield n, out
    finally:
        n.close()


def test_a_deleted_reference_row_of_a_key_no_total_groups_by(nights):
    _, out = nights
    d = out["deleted"].diagnosis
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
    assert out["deleted"].labels == ["METER_ID=1007"]
    assert "deleted from" in d.keys[0].change and "REF_GRID" in d.keys[0].change
    assert d.evidence["dropped_units"] == pytest.approx(d.evidence["gap_units"])
    assert "team:metering" in d.owners


def test_a_reference_row_the_join_condition_now_excludes(nights):
    _, out = nights
    d = out["retired"].diagnosis
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE
    assert out["retired"].labels == ["METER_ID=1003"]
    assert "excluded by the join's condition" in d.keys[0].change and "STATUS" in d.keys[0].change


def test_a_unit_change_on_one_firmware_version_is_named_by_it_with_its_measured_factor(nights):
    _, out = nights
    d = out["unit"].diagnosis
    assert d.classification is CauseClass.UNIT_CHANGE
    assert out["unit"].labels == ["FIRMWARE=v3"], "the subset is a source column, not a group key"
    assert d.keys[0].factor == pytest.approx(3.7, rel=0.1), "any factor, measured from the data"
    assert d.evidence["measure"] == "KWH"


def test_a_sign_flip_on_one_firmware_version(nights):
    _, out = nights
    d = out["sign"].diagnosis
    assert d.classification is CauseClass.SIGN_CHANGE, d.cause
    assert out["sign"].labels == ["FIRMWARE=v2"]
    assert d.keys[0].factor == pytest.approx(-1, rel=0.1)


def test_the_stopped_source_is_named_with_how_long(nights):
    _, out = nights
    d = out["stalled"].diagnosis
    assert d.classification is CauseClass.STALE_INPUT
    assert d.evidence["stale_tables"] == "raw_meter/readings", "the reference tables are read and not stale"
    assert d.evidence["input_age_hours"] > 24
    assert "head_end/readings_export" in d.path and d.owners == ["team:data-platform"]


def test_a_duplicate_load_that_fails_the_unique_test_is_duplication(nights):
    _, out = nights
    found = out["duplicated"]
    assert found.outcome.diagnoses, "the failed job was diagnosed"
    d = found.diagnosis
    assert d.classification is CauseClass.DUPLICATION, d.cause
    assert "READING_ID: Unique" in d.cause and d.evidence["duplicates_in"] == "raw_meter/readings"
    assert d.evidence["duplicate_rows"] > 100 and "_LOADED_AT" in d.evidence["duplicate_load"]


def test_null_keys_are_named_column_is_null(nights):
    _, out = nights
    d = out["null"].diagnosis
    assert d.classification is CauseClass.VALUE_LOSS
    assert out["null"].labels == ["METER_ID IS NULL"]
    assert d.keys[0].value is None


def test_every_diagnosis_lists_its_queries_within_the_budget(nights):
    from dw_dagster.incidents.audit import QUERY_BUDGET

    _, out = nights
    for name, found in out.items():
        queries = found.diagnosis.queries
        assert 0 < len(queries) <= QUERY_BUDGET, name
        assert all(q.purpose and q.sql and q.error is None for q in queries), name
    purposes = [q.purpose for q in out["deleted"].diagnosis.queries]
    assert any("drops" in p for p in purposes) and any("first appear" in p for p in purposes)
