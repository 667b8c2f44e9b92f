"""A recorded group that moved by a factor is a unit change only when no other group took the opposite:
units that moved between groups (a reference row pointed at another group) are a shift. Pure, over
recorded totals of two shapes (three agencies; four regions at a weekend's lower level)."""

from __future__ import annotations

from datetime import date

import pytest

from dw_dagster.checks.history import Recorded
from dw_dagster.incidents.drilldown import drill_groups

D0, D1 = date(2025, 12, 19), date(2025, 12, 20)


def _r(day, groups):
    return Recorded(business_date=day, value=sum(groups.values()), groups=groups)


def test_units_that_moved_to_another_group_are_not_a_unit_change():
    before = _r(D0, {"AGENCY=N": 20_000, "AGENCY=F": 4_000, "AGENCY=C": 2_000})
    # Half of F's units (one advertiser) now count under C; the rest held.
    tonight = _r(D1, {"AGENCY=N": 20_100, "AGENCY=F": 2_000, "AGENCY=C": 3_950})
    assert drill_groups(tonight, before, True, "billing/mart") is None


def test_a_shift_at_a_lower_level_of_the_day_is_still_a_shift():
    before = _r(D0, {"REGION=N": 5_000, "REGION=S": 5_000, "REGION=E": 4_000, "REGION=W": 1_500})
    level = 0.8  # a weekend night: every group lower, West's meters now counted in the South
    tonight = _r(D1, {"REGION=N": 5_000 * level, "REGION=S": (5_000 + 1_500) * level, "REGION=E": 4_000 * level,
                      "REGION=W": 0.3 * 1_500 * level})  # fmt: skip
    assert drill_groups(tonight, before, True, "usage/mart") is None


@pytest.mark.parametrize("factor", [100, 0.27, 3.7])
def test_a_group_scaled_while_the_others_held_is_a_unit_change(factor):
    before = _r(D0, {"REGION=N": 5_000, "REGION=S": 5_000, "REGION=E": 4_000, "REGION=W": 1_500})
    tonight = _r(D1, {**before.groups, "REGION=W": 1_500 * factor})
    moved = drill_groups(tonight, before, True, "usage/mart")
    assert moved is not None and (moved.column, moved.value) == ("REGION", "W")
    assert moved.factor == pytest.approx(factor)


@pytest.mark.parametrize(
    "before_groups,null_group",
    [
        ({"REGION=N": 5_000, "REGION=S": 5_000, "REGION=E": 4_000, "REGION=W": 1_500}, "REGION=W"),
        ({"AGENCY=N": 20_000, "AGENCY=F": 4_000, "AGENCY=C": 2_000}, "AGENCY=C"),
    ],
)
def test_a_group_null_tonight_is_not_a_unit_change_and_does_not_fail(before_groups, null_group):
    """A group valued before and NULL tonight lost its values; the others (one scaled) are still judged."""
    before = _r(D0, before_groups)
    tonight = Recorded(business_date=D1, value=None, groups={**before_groups, null_group: None})
    assert drill_groups(tonight, before, True, "usage/mart") is None
    scaled = next(g for g in before_groups if g != null_group)
    tonight.groups[scaled] = before_groups[scaled] * 3.7
    moved = drill_groups(tonight, before, True, "usage/mart")
    assert moved is not None and moved.factor == pytest.approx(3.7)
