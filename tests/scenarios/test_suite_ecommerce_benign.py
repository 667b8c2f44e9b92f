"""The public suite's e-commerce benign scenarios: month-end, weekend, a new storefront mapped, growth."""

from __future__ import annotations

import pytest
from suite_play import TIMEOUT, play

from dw_local.scenarios.score import BASELINE, DW

pytestmark = [pytest.mark.world, pytest.mark.timeout(TIMEOUT)]


@pytest.fixture(scope="module")
def played():
    return play("ecommerce", benign=True)


def test_benign_nights_raise_nothing(played):
    reports, _ = played
    for name in ("ecommerce-benign-month-end-weekend", "ecommerce-benign-new-storefront-mapped"):
        for night in reports[name].nights:
            assert night.run_status == "completed" and night.alarms == [], (name, night.night, night.alarms)


def test_steady_growth_raises_nothing_but_the_month_end_saturday_volume(played):
    reports, _ = played
    for night in reports["ecommerce-benign-steady-growth"].nights:
        assert night.run_status == "completed"
        month_end_saturday = night.business_date.weekday() == 5 and night.business_date.day >= 30
        others = [
            a
            for a in night.alarms
            if not (month_end_saturday and (a.asset, a.check) == ("sales/fct_sales", "volume"))
        ]
        assert others == [], (night.night, others)


def test_steady_growth_raises_no_alarm_at_all(played):
    reports, _ = played
    for night in reports["ecommerce-benign-steady-growth"].nights:
        assert night.alarms == [], (night.night, night.alarms)


def test_no_more_false_alarms_than_the_elementary_default(played):
    _, score = played
    dw, base = score["total"][DW], score["total"][BASELINE]
    assert dw["faults"] == base["faults"] == 0
    assert dw["false_alarms"] <= base["false_alarms"]


def test_a_sensitive_new_column_is_a_warn_finding_for_the_governance_owners_on_its_night(played):
    reports, _ = played
    added, unsensitive = reports["ecommerce-benign-sensitive-column-added"].nights
    assert added.run_status == unsensitive.run_status == "completed"
    (alarm,) = [a for a in added.alarms if a.check == "sensitive_column"]
    assert (alarm.asset, alarm.severity) == ("raw_shop/order_lines", "WARN")
    # Recognised by its sampled values (its name says nothing), with where it reaches.
    assert "BUYER_CONTACT looks like email data" in alarm.summary and "sampled values" in alarm.summary
    assert "-> stage/stg_order_lines.BUYER_CONTACT" in alarm.summary
    assert [a for a in added.alarms if a.severity != "WARN"] == []
    (incident,) = [i for i in added.incidents if "raw_shop/order_lines" in i.assets]
    assert incident.owners == ["data-platform"]  # the context file's governance owners
    # A new column that is not sensitive (and the known one) raise nothing.
    assert unsensitive.alarms == []
