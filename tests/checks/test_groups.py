"""Group-level checks of a recorded total: shifts between groups with a flat total, a group lost, a loss
to new groups, NULL-valued groups; and per-group reconciliation."""

from __future__ import annotations

import random
import re
from datetime import date, timedelta

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.groups import judge_groups, null_groups_problem
from dw_dagster.checks.history import Recorded
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import Reconciliation, RecordedTotal
from dw_dagster.checks.recorded_totals import reconcile, value_columns
from dw_dagster.checks.total_value import TotalValue

DAY = date(2025, 5, 28)
SHARES = {"CHANNEL=web": 0.45, "CHANNEL=app": 0.2, "CHANNEL=retail": 0.2, "CHANNEL=marketplace": 0.15}
TOTAL = RecordedTotal.model_validate(
    {
        "name": "channel_revenue",
        "owner": "analytics",
        "asset": "mart/mart_channel_revenue",
        "sql": "SELECT 1 AS VALUE",
        "group_keys": ["CHANNEL"],
        "hurts": "down",
        "baseline": {"weeks": 6, "min_relative_change": 0.1},
    }
)


def _history(seed: int = 1) -> dict[date, Recorded]:
    rng, out = random.Random(seed), {}
    for k in range(1, 50):
        d = DAY - timedelta(days=k)
        groups = {g: 100_000 * s * (1 + rng.gauss(0, 0.03)) for g, s in SHARES.items()}
        out[d] = Recorded(business_date=d, value=sum(groups.values()), groups=groups)
    return out


def _judge(
    groups: dict[str, float | None], own: dict[date, Recorded] | None = None, spec: RecordedTotal = TOTAL
):
    own = own or _history()
    value = sum(v for v in groups.values() if v is not None)
    total = judge({d: r.value for d, r in own.items()}, DAY, value, spec.baseline, spec.hurts)
    return total, judge_groups(spec, DAY, value, groups, own, total, calendar=BusinessCalendar(),
                               excluded_days=set(), rebases={})  # fmt: skip


def test_a_remap_between_groups_with_a_flat_total_names_both_groups():
    groups = {g: 100_000 * s for g, s in SHARES.items()}
    groups["CHANNEL=web"] += groups["CHANNEL=app"]
    groups["CHANNEL=app"] = 0.0
    total, verdict = _judge(groups)
    assert total.severity is None
    assert verdict.problem is not None and "a shift between groups" in verdict.problem
    assert re.search(r"lost CHANNEL=app \(-\d\d,\d{3}, share \d\d\.\d% -> 0\.0%\)", verdict.problem)
    assert re.search(r"gained CHANNEL=web \(\+\d\d,\d{3}, share 4\d\.\d% -> 65\.0%\)", verdict.problem)


def test_ordinary_nights_and_small_moves_raise_nothing():
    _, verdict = _judge({g: 100_000 * s * 1.01 for g, s in SHARES.items()})
    assert verdict.problem is None and verdict.moves == []
    groups = {g: 100_000 * s for g, s in SHARES.items()}
    groups["CHANNEL=web"] += 1_500  # under 10% of each group's own level (the minimum change)
    groups["CHANNEL=app"] -= 1_500
    assert _judge(groups)[1].problem is None


def test_a_loss_to_a_group_new_tonight_is_noted_not_raised():
    groups = {g: 100_000 * s for g, s in SHARES.items()}
    groups["CHANNEL=retail"] -= 15_000
    groups["CHANNEL=social"] = 15_000
    _, verdict = _judge(groups)
    assert verdict.problem is None and "moved to groups new tonight: CHANNEL=social" in verdict.note


def test_a_loss_to_a_null_group_is_a_shift_not_a_new_key():
    # A lookup behind a LEFT join lost the row of retail's stores: their revenue now groups under no channel.
    groups = {g: 100_000 * s for g, s in SHARES.items()}
    groups["CHANNEL=retail"] -= 15_000
    groups["CHANNEL=None"] = 15_000
    total, verdict = _judge(groups)
    assert total.severity is None
    assert verdict.problem is not None and "a shift between groups" in verdict.problem
    assert "lost CHANNEL=retail" in verdict.problem and "gained CHANNEL=None (+15,000" in verdict.problem
    # Under 1% of the total without a group, beside a group's loss: no shift, however new the NULL group (the
    # loss is the retail group's alone).
    small = {g: 100_000 * s for g, s in SHARES.items()}
    small["CHANNEL=retail"] -= 5_000
    small["CHANNEL=None"] = 500
    alone = _judge(small)[1].problem or ""
    assert "a shift between groups" not in alone and "CHANNEL=None" not in alone
    # A NULL in one column of a key of several is a NULL key too.
    spec = TOTAL.model_copy(update={"group_keys": ["CHANNEL", "REGION"]})
    two = {f"{g}, REGION=N": v for g, v in groups.items() if g != "CHANNEL=None"}
    two["CHANNEL=web, REGION IS NULL"] = 15_000
    own = {d: r.model_copy(update={"groups": {f"{g}, REGION=N": v for g, v in r.groups.items()}})
           for d, r in _history().items()}  # fmt: skip
    assert "a shift between groups" in (_judge(two, own, spec)[1].problem or "")


def test_a_key_in_its_first_nights_is_still_new_and_once_learned_a_shift_to_it_is_raised():
    """A key that opened on an incident's night (excluded from the baselines) and takes share the next
    night is a key still arriving; weeks later, a move to it is judged like any group's."""
    own = _history()
    for k in (1, 2):
        d = DAY - timedelta(days=k)
        g = {
            **own[d].groups,
            "CHANNEL=retail": own[d].groups["CHANNEL=retail"] - 15_000,
            "CHANNEL=social": 15_000,
        }
        own[d] = Recorded(business_date=d, value=sum(g.values()), groups=g, flagged=k == 2)
    groups = {g: 100_000 * s for g, s in SHARES.items()}
    groups["CHANNEL=retail"] -= 15_000
    groups["CHANNEL=social"] = 15_000
    value = sum(groups.values())
    total = judge({d: r.value for d, r in own.items()}, DAY, value, TOTAL.baseline, TOTAL.hurts)
    verdict = judge_groups(TOTAL, DAY, value, groups, own, total, calendar=BusinessCalendar(),
                           excluded_days={DAY - timedelta(days=2)}, rebases={})  # fmt: skip
    assert verdict.problem is None and "CHANNEL=social" in verdict.note
    # Social established for seven weeks; tonight retail loses to it again: a shift between groups.
    learned = _history()
    for d, r in learned.items():
        learned[d] = Recorded(
            business_date=d, value=r.value + 15_000, groups={**r.groups, "CHANNEL=social": 15_000}
        )
    shifted = {**{g: 100_000 * s for g, s in SHARES.items()}, "CHANNEL=social": 30_000}
    shifted["CHANNEL=retail"] -= 15_000
    _, verdict = _judge(shifted, learned)
    assert verdict.problem is not None and "gained CHANNEL=social" in verdict.problem


def test_a_group_that_went_with_nothing_gained_is_a_finding():
    groups = {g: 100_000 * s for g, s in SHARES.items() if g != "CHANNEL=retail"}
    total, verdict = _judge(groups)
    # The total fell 20%: that is the total's finding, and the groups name where.
    assert total.severity == "ERROR" and verdict.moves[0].group == "CHANNEL=retail"
    assert verdict.moves[0].status == "went"
    # A group that lost a third while the total held within its minimum change (10%).
    smaller = {g: 100_000 * s for g, s in SHARES.items()}
    smaller["CHANNEL=marketplace"] = 10_000.0
    total, verdict = _judge(smaller)
    assert total.severity is None
    # Alone, beyond what its share of the total does (3% noise): its values or rows changed, a finding.
    assert "CHANNEL=marketplace" in verdict.problem and "fell alone" in verdict.problem
    # A group whose share swings by a third on ordinary nights: the same fall is its noise, noted.
    rng = random.Random(4)
    noisy = {}
    for d, r in _history().items():
        groups = {
            **r.groups,
            "CHANNEL=marketplace": r.groups["CHANNEL=marketplace"] * rng.uniform(0.55, 1.45),
        }
        noisy[d] = Recorded(business_date=d, value=sum(groups.values()), groups=groups)
    total, verdict = _judge(smaller, noisy)
    assert verdict.problem is None
    smaller["CHANNEL=marketplace"] = 0.0
    smaller["CHANNEL=web"] += 2_500  # each under 10% of its own level: no gain
    smaller["CHANNEL=app"] += 1_500
    smaller["CHANNEL=retail"] += 1_500
    total, verdict = _judge(smaller)
    assert (
        total.severity is None
        and "CHANNEL=marketplace" in verdict.problem
        and "went to nothing" in verdict.problem
    )


def test_null_valued_groups_are_named_never_zero():
    problem = null_groups_problem(
        "shop_revenue",
        {"STORE_ID=1": 10.0, "STORE_ID=7": None},
        {"STORE_ID=7": 150},
        ["QUANTITY", "UNIT_PRICE"],
    )
    assert problem.startswith("shop_revenue: 150 rows with no QUANTITY or UNIT_PRICE (STORE_ID=7)")
    assert "not counted as zero" in problem
    assert null_groups_problem("t", {"A=1": 1.0}, {}, []) is None
    assert "A=2 with no VALUE" in null_groups_problem("t", {"A=2": None}, {}, [])


def test_value_columns_come_from_the_sql():
    sql = 'SELECT "STORE_ID", SUM("QUANTITY" * "UNIT_PRICE") AS "VALUE", COUNT(*) AS ROWS FROM T GROUP BY 1'
    assert value_columns(sql) == ["QUANTITY", "UNIT_PRICE"]
    assert value_columns("SELECT nonsense((") == []


def test_reconciliation_is_per_group():
    rule = Reconciliation(total="source", tolerance_pct=0.1)
    hist_t, hist_s = {}, {}
    for k in range(1, 8):
        d = DAY - timedelta(days=k)
        g = {"STORE_ID=1": 600.0, "STORE_ID=2": 400.0}
        hist_t[d] = Recorded(business_date=d, value=1000.0, groups=g)
        hist_s[d] = Recorded(business_date=d, value=1000.0, groups=g)
    source = TotalValue(value=1000.0, groups={"STORE_ID=1": 600.0, "STORE_ID=2": 400.0})
    # The target moved 100 from store 2 to store 1: the total gap is unchanged.
    target = TotalValue(value=1000.0, groups={"STORE_ID=1": 700.0, "STORE_ID=2": 300.0})
    rec = reconcile(DAY, target, source, hist_t, hist_s, rule)
    assert rec.gap_change == 0 and not rec.passed
    assert {g.group for g in rec.groups} == {"STORE_ID=1", "STORE_ID=2"}
    # A NULL source group is not a gap of zero: it is left to its own finding.
    nulls = TotalValue(value=600.0, groups={"STORE_ID=1": 600.0, "STORE_ID=2": None})
    assert all(g.group != "STORE_ID=2" for g in reconcile(DAY, source, nulls, hist_t, hist_s, rule).groups)
    # A source summed as one value is reconciled in total only: its groups are not zeros.
    whole = TotalValue(value=1000.0, groups={})
    rec = reconcile(DAY, target, whole, hist_t, hist_s, rule)
    assert rec.passed and rec.groups == []
    assert not reconcile(
        DAY, TotalValue(value=900.0, groups=target.groups), whole, hist_t, hist_s, rule
    ).passed


US = BusinessCalendar.model_validate({"holidays": [{"country": "US", "direction": "down"}]})


def _holiday_history(seed: int = 3) -> dict[date, Recorded]:
    """Channels that all dip to 30% on a public holiday; on Memorial Day and Juneteenth the app channel dipped to
    60% only and the web to 22%: each group's few past holidays are its noise as much as the holiday."""
    rng, out, d = random.Random(seed), {}, date(2025, 3, 3)
    while d < date(2025, 7, 4):
        dip = dict.fromkeys(SHARES, 0.3 if US.holiday(d) else 1.0)
        if d in (date(2025, 5, 26), date(2025, 6, 19)):
            dip.update({"CHANNEL=app": 0.6, "CHANNEL=web": 0.22})
        groups = {g: 100_000 * s * dip[g] * (1 + rng.gauss(0, 0.05)) for g, s in SHARES.items()}
        out[d] = Recorded(business_date=d, value=sum(groups.values()), groups=groups)
        d += timedelta(days=1)
    return out


def test_on_a_holiday_a_groups_thin_record_of_holidays_makes_no_shift():
    own, day = _holiday_history(), date(2025, 7, 4)  # Independence Day, a Friday

    def judged(groups: dict[str, float]):
        value = sum(groups.values())
        total = judge(
            {d: r.value for d, r in own.items()}, day, value, TOTAL.baseline, TOTAL.hurts, calendar=US
        )
        verdict = judge_groups(
            TOTAL, day, value, groups, own, total, calendar=US, excluded_days=set(), rebases={}
        )
        return total, verdict

    # Every channel dips alike tonight: against its own past holidays, the app 'lost' half and the web 'gained'
    # a third, but no channel's share of the day moved.
    expected = judge(
        {d: r.value for d, r in own.items()}, day, 1.0, TOTAL.baseline, calendar=US
    ).result.expected
    alike = {g: expected * s for g, s in SHARES.items()}
    total, verdict = judged(alike)
    assert total.calendar_day is not None and total.severity is None
    assert verdict.problem is None, verdict.problem
    # A remap on the holiday moves the shares themselves: still a shift.
    remapped = dict(alike)
    remapped["CHANNEL=web"] += remapped["CHANNEL=retail"]
    remapped["CHANNEL=retail"] = 0.0
    assert "a shift between groups" in (judged(remapped)[1].problem or "")
