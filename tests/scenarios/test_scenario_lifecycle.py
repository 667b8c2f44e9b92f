"""The scenario format's lifecycle fields (``before``, ``expect.joins``, ``expect.max_severity``), their errors,
and how the scorer counts them; and ``scenario score`` saying why a root cause was wrong. No world is played."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from dw_dagster.config import DwConfigError
from dw_local.scenarios.model import load_scenario
from dw_local.scenarios.observe import Alarm, IncidentReport
from dw_local.scenarios.runner import NightReport, ScenarioReport
from dw_local.scenarios.score import DW, format_score, score_night, score_reports
from dw_local.scenarios.suite import SUITE_DIR, scenario_files

ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce" / "world.yaml"
AT = datetime(2026, 1, 1, tzinfo=UTC)
DELETED = "{kind: reference_row_deleted, table: STORE_MAP, where: {STORE_ID: 3}}"
DUPLICATED = "{kind: duplicate_load, table: ORDER_LINES}"


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: x\nworld: {ECOMMERCE}\n{text}")
    return path


def test_before_nights_are_played_first_and_night_numbers_count_from_night_0(tmp_path):
    s = load_scenario(
        _scenario(
            tmp_path,
            f"before: [{{events: [{DELETED}]}}]\n"
            f"nights: [{{events: [{DUPLICATED}], expect: {{class: [duplication], joins: false}}}}]\n",
        )
    )
    assert len(s.before) == 1 and s.night_index(0) == s.world.history_nights + 1
    assert s.night_index(-1) == s.world.history_nights
    assert s.file.nights[0].expect.joins is False


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "nights: [{}, {expect: {joins: true}}]\n",
            "nights.1.expect.joins: the night expects no incident: expected joins only on a night with a fault",
        ),
        (
            f"nights: [{{events: [{DUPLICATED}], expect: {{class: [duplication], joins: true}}}}]\n",
            "nights.0.expect.joins: true, but no earlier night (nor `before`) played a fault",
        ),
        (
            f"nights: [{{events: [{DUPLICATED}], expect: {{class: [duplication], max_severity: WARN}}}}]\n",
            "nights.0.expect.max_severity: the night expects an incident",
        ),
        (
            "nights: [{expect: {max_severity: ERROR}}]\n",
            "nights.0.expect.max_severity: Input should be 'WARN'",
        ),
        (
            f"before: [{{events: [{DELETED}], expect: {{class: [reference_data_change]}}}}]\nnights: [{{}}]\n",
            "before.0.expect: Extra inputs are not permitted",
        ),
        ("before: [{events: [{kind: meteor_strike}]}]\nnights: [{}]\n", "before.0.events.0 (meteor_strike)"),
    ],
)
def test_a_bad_lifecycle_field_names_the_file_the_field_and_what_was_expected(tmp_path, text, fragment):
    path = _scenario(tmp_path, text)
    with pytest.raises(DwConfigError) as e:
        load_scenario(path)
    assert str(path) in str(e.value) and fragment in str(e.value)


def test_joins_true_may_continue_a_fault_of_an_earlier_scored_night(tmp_path):
    stalled = "{kind: replication_stalled}"
    s = load_scenario(
        _scenario(
            tmp_path,
            f"nights: [{{events: [{stalled}], expect: {{class: [stale_input]}}}},"
            f" {{events: [{stalled}], expect: {{class: [stale_input], joins: true}}}}]\n",
        )
    )
    assert s.file.nights[1].expect.joins is True


def test_the_public_suite_has_a_new_fault_under_an_open_incident_on_both_worlds():
    scenarios = [load_scenario(p) for p in scenario_files(SUITE_DIR)]
    under = {
        s.world.name for s in scenarios if s.before and any(n.expect.joins is False for n in s.file.nights)
    }
    continuing = {s.world.name for s in scenarios if any(n.expect.joins for n in s.file.nights)}
    assert under == {"distributor", "ecommerce"}
    assert continuing == {"distributor", "ecommerce", "billpay"}


def _night(**changes) -> NightReport:
    base = dict(
        night=1, business_date=date(2025, 6, 16), events=["x"], fault=True, expects_incident=True,
        expected_classes=["duplication"], expected_keys=[], related=["inv/fct", "mart/m"], run_id=1,
        run_status="completed", run_ended_at=AT, monitored=["inv/fct", "mart/m", "inv/dim"],
    )  # fmt: skip
    return NightReport(**{**base, **changes})


def _incident(klass: str, keys: list[str], continued: bool = False, assets=("inv/fct",), iid="INC-1"):
    return IncidentReport(iid, "t", klass, "c", keys, {}, [], 0, [], 1.0, list(assets), continued=continued)


def test_max_severity_counts_only_what_exceeds_it_and_reports_warns_apart():
    alarms = [
        Alarm("inv/dim", "volume", "s", AT, "WARN", "the verified fix P-1"),
        Alarm("mart/x", "volume", "s", AT),
    ]
    benign = _night(fault=False, expects_incident=False, related=[], alarms=alarms, max_severity="WARN")
    dw, _, detail = score_night(benign)
    assert (dw.false_alarms, dw.warnings) == (1, 1) and detail["dw_warnings"] == 1
    # Without it, a WARN finding on an unrelated table is a false alarm like any other.
    dw, _, _ = score_night(_night(fault=False, expects_incident=False, related=[], alarms=alarms))
    assert (dw.false_alarms, dw.warnings) == (2, 0)


def test_joins_is_scored_on_the_continued_incident_or_on_a_new_one():
    alarm = [Alarm("inv/fct", "total", "s", AT)]
    joined = _night(expected_joins=True, expected_classes=["stale_input"], alarms=alarm,
                    incidents=[_incident("stale_input", [], continued=True)])  # fmt: skip
    dw, _, detail = score_night(joined)
    assert (dw.lifecycle_correct, dw.correct, detail["lifecycle"]) == (1, 1, "correct")
    # A continuing fault alerted as a new incident: the lifecycle is wrong, and so is the root cause.
    split = _night(expected_joins=True, expected_classes=["stale_input"], alarms=alarm,
                   incidents=[_incident("stale_input", [])])  # fmt: skip
    dw, _, detail = score_night(split)
    assert (dw.lifecycle_correct, dw.correct) == (0, 0)
    assert detail["lifecycle"] == "wrong: expected to continue an open incident, got 1 new and 0 continued"
    # Tonight's new fault swallowed by the open incident: no new incident, the fault undiagnosed.
    swallowed = _night(expected_joins=False, alarms=alarm,
                       incidents=[_incident("reference_data_change", ["STORE_ID=3"], continued=True)])  # fmt: skip
    dw, _, detail = score_night(swallowed)
    assert (dw.lifecycle_correct, dw.correct) == (0, 0)
    assert detail["root_cause_got"] == [
        {
            "incident": "INC-1",
            "class": "reference_data_change",
            "keys": ["STORE_ID=3"],
            "continued": True,
            "related": True,
        }
    ]


def test_score_says_why_each_root_cause_was_wrong():
    wrong = _night(expected_classes=["value_loss"], expected_keys=["STORE_ID=7"], alarms=[Alarm("inv/fct", "t", "s", AT)],
                   incidents=[_incident("volume_loss", [], iid="INC-A"),
                              _incident("value_loss", ["STORE_ID=7"], assets=("other/t",), iid="INC-B")])  # fmt: skip
    missed = _night(night=2, alarms=[], incidents=[])
    score = score_reports([ScenarioReport("s-1", "p", "w", 6, [wrong, missed])])
    assert score["total"][DW]["root_cause_correct"] == 0
    text = format_score(score)
    assert "Wrong root causes (what was expected, what the diagnosis said):" in text
    assert (
        "- s-1, night 1: expected value_loss on STORE_ID=7; got INC-A: volume_loss with no keys; "
        "INC-B: value_loss on STORE_ID=7, on unrelated tables" in text
    )
    assert "- s-1, night 2: expected duplication; got no incident opened" in text
