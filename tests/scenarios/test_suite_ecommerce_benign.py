"""The public suite's e-commerce benign scenarios: month-end, weekend, a new storefront mapped, growth."""

from __future__ import annotations

import pytest

from dw_local.scenarios.score import BASELINE, DW
from suite_play import TIMEOUT, play

pytestmark = [pytest.mark.world, pytest.mark.timeout(TIMEOUT)]


@pytest.fixture(scope="module")
def played():
    return play("ecommerce", benign=True)


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


def test_no_more_false_alarms_than_the_elementary_default(played):
    _, score = played
    dw, base = score["total"][DW], score["total"][BASELINE]
    assert dw["faults"] == base["faults"] == 0
    assert dw["false_alarms"] <= base["false_alarms"]
