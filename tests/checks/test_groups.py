"""Group-level checks of a recorded total: shifts between groups with a flat total, a group lost, a loss
to new groups, NULL-valued groups; and per-group reconciliation."""

from __future__ import annotations

import math
import random
import re
from datetime import date, timedelta

import test_group_rows

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.groups import _nothing_is_usual, judge_groups, null_groups_problem
from dw_dagster.checks.history import Reading, Recorded, group_rows_series
from dw_dagster.checks.judge import judge
from dw_dagster.checks.metrics import Reconciliation, RecordedTotal
from dw_dagster.checks.recorded_totals import evaluate_total, reconcile, value_columns
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
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
    # The total moved within its range (-8.8%): said so, not that it held.
    assert "stayed within its usual range (-" in verdict.problem and "held (" not in verdict.problem
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


def _evaluated(total: RecordedTotal, day: date, own, rows_past, tonight: TotalValue):
    """The total's check tonight, as the checks run evaluates it."""
    night = Night(
        context=None, run=CheckRun(day, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}), levels={},
        incident_days=set(), past={total.name: own, group_rows_series(total.name): rows_past},
        reporter=lambda finding: None, shares={total.asset: 2},
    )  # fmt: skip
    night.record(total.name, Reading(value=tonight.value, groups=tonight.groups))
    return evaluate_total(night, total, {total.name: tonight})


def test_a_null_valued_group_the_history_holds_is_judged_against_it_and_a_new_one_is_a_finding():
    # Channel revenue (no ROWS): a gift-card channel whose revenue the price lookup never fills, every night.
    own = {
        d: r.model_copy(update={"groups": {**r.groups, "CHANNEL=giftcard": None}})
        for d, r in _history().items()
    }
    groups: dict[str, float | None] = {g: 100_000 * s for g, s in SHARES.items()}
    usual = _evaluated(
        TOTAL, DAY, own, {}, TotalValue(value=100_000, groups={**groups, "CHANNEL=giftcard": None})
    )
    assert usual.passed, usual.description
    assert "CHANNEL=giftcard with no value on 28 of the last 28" in usual.metadata["null_groups_note"].value
    # A channel with no value tonight that the history never had: a lookup that stopped matching.
    new = TotalValue(value=100_000, groups={**groups, "CHANNEL=giftcard": None, "CHANNEL=kiosk": None})
    raised = _evaluated(TOTAL, DAY, own, {}, new)
    assert not raised.passed and "CHANNEL=kiosk with no VALUE" in raised.description
    assert "giftcard" not in raised.description
    # Parcels by depot (ROWS): a handful of scans a night have no depot and no weight (a NULL key and value).
    total, shares, count, sigma, start, day, weekend, _ = test_group_rows.CASES["parcels"]
    rows, values, rng = test_group_rows._history(shares, count, sigma, start, day, weekend, 5)
    for d in rows:
        n = float(rng.randint(3, 9))
        rows[d] = rows[d].model_copy(update={"groups": {**rows[d].groups, "DEPOT=None": n}})
        values[d] = values[d].model_copy(update={"groups": {**values[d].groups, "DEPOT=None": None}})
    r, v = test_group_rows._day(rng, shares, count, sigma)

    def tonight(n: int) -> TotalValue:
        return TotalValue(
            value=sum(v.values()), groups={**v, "DEPOT=None": None}, rows={**r, "DEPOT=None": n}
        )

    quiet = _evaluated(total, day, values, rows, tonight(7))
    assert quiet.passed, quiet.description
    assert "7 rows tonight, within its record" in quiet.metadata["null_groups_note"].value
    # Tiny in the history, large tonight: 150 scans with no depot is a finding.
    grown = _evaluated(total, day, values, rows, tonight(150))
    assert not grown.passed and "150 rows with no VALUE (DEPOT=None)" in grown.description
    # Absent from the history: a finding whatever its size.
    fresh = _evaluated(
        total, day, test_group_rows._history(shares, count, sigma, start, day, weekend, 5)[1], {}, tonight(4)
    )
    assert not fresh.passed and "4 rows with no VALUE (DEPOT=None)" in fresh.description


def _noisy(shares: dict[str, float], day: date, common: float, seed: int) -> dict[date, Recorded]:
    """Groups that move together by a common factor of spread ``common`` every night (the day's business),
    each with 3% of its own noise: the total moves by more than its minimum change on ordinary nights."""
    rng, out = random.Random(seed), {}
    for k in range(1, 64):
        d = day - timedelta(days=k)
        level = math.exp(rng.gauss(0, common))
        groups = {g: 100_000 * s * level * (1 + rng.gauss(0, 0.03)) for g, s in shares.items()}
        out[d] = Recorded(business_date=d, value=sum(groups.values()), groups=groups)
    return out


def test_a_remap_under_a_noisy_total_within_its_band_is_a_shift():
    depots = TOTAL.model_copy(
        update={"name": "parcels", "group_keys": ["DEPOT"],
                "baseline": TOTAL.baseline.model_copy(update={"min_relative_change": 0.05})}
    )  # fmt: skip
    cases = [
        # Channel revenue up 12% tonight (its ordinary nights move 8%): the app channel remapped to the web.
        (TOTAL, SHARES, 0.08, 1.12, "CHANNEL=app", "CHANNEL=web", 1.0),
        # Parcels down 9% (ordinary nights move 6%; minimum change 5%): 60% of Toulouse's parcels under Lyon.
        (depots, {"DEPOT=LYS": 0.3, "DEPOT=MRS": 0.25, "DEPOT=TLS": 0.25, "DEPOT=NTE": 0.2}, 0.06, 0.91,
         "DEPOT=TLS", "DEPOT=LYS", 0.6),
    ]  # fmt: skip
    for spec, shares, common, level, lost, gained, moved in cases:
        for seed in range(3):
            own = _noisy(shares, DAY, common, seed)
            history = {d: r.value for d, r in own.items()}
            expected = judge(history, DAY, 1.0, spec.baseline).result.expected
            groups = {g: expected * s * level for g, s in shares.items()}
            ordinary = sum(groups.values())
            total = judge(history, DAY, ordinary, spec.baseline, spec.hurts)
            # Beyond the minimum change, within the total's own band: the groups are judged.
            assert abs(total.result.relative_change) > spec.baseline.min_relative_change
            assert total.severity is None
            quiet = judge_groups(spec, DAY, ordinary, groups, own, total, calendar=BusinessCalendar(),
                                 excluded_days=set(), rebases={})  # fmt: skip
            assert quiet.problem is None
            groups[gained] += moved * groups[lost]
            groups[lost] *= 1 - moved
            verdict = judge_groups(spec, DAY, ordinary, groups, own, total, calendar=BusinessCalendar(),
                                   excluded_days=set(), rebases={})  # fmt: skip
            assert verdict.problem and "a shift between groups" in verdict.problem, (spec.name, seed, verdict)
            assert f"lost {lost}" in verdict.problem and f"gained {gained}" in verdict.problem


def _sparse_total(name: str, key: str, rows: bool) -> RecordedTotal:
    counted = ', COUNT(*) AS "ROWS"' if rows else ""
    return RecordedTotal.model_validate(
        {"name": name, "owner": "ops", "asset": f"core/{name}", "group_keys": [key], "hurts": "both",
         "sql": f'SELECT "{key}", SUM("AMOUNT") AS "VALUE"{counted} FROM t GROUP BY 1',
         "baseline": {"weeks": 6, "min_relative_change": 0.3}}
    )  # fmt: skip


def _sparse_history(
    day: date, seed: int, calendar: BusinessCalendar, draw
) -> tuple[dict, dict, random.Random]:
    """Nine weeks of rows and values by group; ``draw(d, closed, rng)`` gives a night's rows (or values)."""
    rng, rows, values = random.Random(seed), {}, {}
    for k in range(1, 64):
        d = day - timedelta(days=k)
        r = draw(d, not calendar.is_business_day(d), rng)
        v = {g: n * 40 * rng.lognormvariate(0, 0.3) for g, n in r.items()}
        rows[d] = Recorded(business_date=d, value=sum(r.values()), groups=r)
        values[d] = Recorded(business_date=d, value=sum(v.values()), groups=v)
    return rows, values, rng


def _refunds(d: date, closed: bool, rng: random.Random) -> dict[str, float]:
    """Refunds by store, a few a day on weekends: one store has two to four then (never none in nine weeks),
    another a steady dozen every day."""
    return {
        "STORE=harbour": float(rng.randint(10, 16) if closed else rng.randint(50, 70)),
        "STORE=station": float(rng.randint(10, 16) if closed else rng.randint(40, 60)),
        "STORE=kiosk": float(rng.randint(2, 4) if closed else rng.randint(6, 11)),
        "STORE=outlet": float(rng.randint(10, 14)),
    }


def _chargebacks(d: date, closed: bool, rng: random.Random) -> dict[str, float]:
    """Chargebacks by card scheme, every day: one scheme's disputes come on business days, and on one weekend
    night in three there is none; another's come every day alike."""
    k = (DAY - d).days
    return {
        "SCHEME=visa": 225 * (0.4 if closed else 1) * rng.lognormvariate(0, 0.2),
        "SCHEME=mastercard": 150 * (0.4 if closed else 1) * rng.lognormvariate(0, 0.2),
        "SCHEME=discover": 37.5 * rng.lognormvariate(0, 0.2),
        "SCHEME=amex": 0.0
        if closed and k % 3 == 0
        else 22.5 * (0.3 if closed else 1) * rng.lognormvariate(0, 0.4),
    }


def test_a_group_of_a_sparse_table_gone_on_a_quiet_night_is_noted_and_a_steady_one_gone_is_a_finding():
    """A group going to nothing is a finding only where its own record makes nothing tonight improbable: a
    store with a few refunds on a Sunday (rows counted: none is a Poisson chance of its expected few), a card
    scheme with no chargebacks on one weekend night in three (no rows: its own weekends say so); a store or
    a scheme present every night, with rows enough, gone is still found."""
    NO_HOLIDAYS = BusinessCalendar.model_validate({"holidays": []})
    sunday = date(2026, 3, 15)
    for shape, key, gone, steady, draw, with_rows in (
        ("refunds", "STORE", "STORE=kiosk", "STORE=outlet", _refunds, True),
        ("chargebacks", "SCHEME", "SCHEME=amex", "SCHEME=discover", _chargebacks, False),
    ):
        total, noted = _sparse_total(shape, key, with_rows), 0
        for seed in range(4):
            rows, values, rng = _sparse_history(sunday, seed, NO_HOLIDAYS, draw)
            tonight = draw(sunday, True, rng)
            for g in (gone, steady):
                r = {**tonight, g: 0.0}
                v = {x: n * 40 for x, n in r.items()}
                value = TotalValue(
                    value=sum(v.values()),
                    groups=v,
                    rows={x: int(n) for x, n in r.items()} if with_rows else {},
                )
                night = Night(
                    context=None, run=CheckRun(sunday, "test-run", None, None), warehouse=None, ops=None,
                    history=None, cause_scopes={}, calendar=NO_HOLIDAYS, levels={}, incident_days=set(),
                    past={total.name: values, **({group_rows_series(total.name): rows} if with_rows else {})},
                    reporter=lambda finding: None, shares={total.asset: 2},
                )  # fmt: skip
                night.record(total.name, Reading(value=value.value, groups=value.groups))
                result = evaluate_total(night, total, {total.name: value})
                if g == gone:
                    assert result.passed, (shape, seed, result.description)
                    note = result.metadata.get("groups_note")
                    noted += (
                        note is not None
                        and f"went to nothing as on its own nights like tonight: {gone}" in note.text
                    )
                else:
                    assert not result.passed and f"{steady} (" in result.description, (shape, seed)
                    assert "went to nothing" in result.description
        # The record said so (on the other seeds the group's own spread held it anyway). A scheme with none
        # on one weekend night in three is judged on its own weekends' record (judge.of_tonights_kind),
        # which holds its nights at none: no move to rule on (``test_nothing_on_its_like_nights_is_usual``).
        assert noted >= (2 if with_rows else 0), shape


def test_nothing_on_its_like_nights_is_usual():
    # The chargebacks' scheme with none on one weekend night in three, no rows counted: its weekends say so,
    # while on a business day it never had none.
    NO_HOLIDAYS = BusinessCalendar.model_validate({"holidays": []})
    sunday, monday = date(2026, 3, 15), date(2026, 3, 16)
    total = _sparse_total("chargebacks", "SCHEME", False)
    _, values, _ = _sparse_history(sunday, 0, NO_HOLIDAYS, _chargebacks)
    since = min(values)
    usual = _nothing_is_usual(total, "SCHEME=amex", sunday, values, None, since, NO_HOLIDAYS, set(), 0.005)
    assert usual is not None and "SCHEME=amex had nothing on" in usual and "weekends and holidays" in usual
    assert (
        _nothing_is_usual(total, "SCHEME=amex", monday, values, None, since, NO_HOLIDAYS, set(), 0.005)
        is None
    )
