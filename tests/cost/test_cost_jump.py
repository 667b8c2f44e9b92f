"""The cost-jump judgement: on the ecommerce scenario world's project and metrics files (each night's queries
are those the local simulator sends for the world's nodes, with credits from the local credit model; no
world is seeded), and on series of known shapes: a trend is no jump, a step is."""

from __future__ import annotations

import math
from datetime import UTC, date, timedelta
from pathlib import Path

import pytest

from dw_dagster.checks import load_metrics_file
from dw_dagster.cost.attribution import by_night
from dw_dagster.cost.history import QueryCost
from dw_dagster.cost.jump import CostJumpConfig, judge_cost
from dw_dagster.cost.night import night_window
from dw_local.account_usage import statement_credits
from dw_local.coalesce_sim.project import load_project
from dw_local.coalesce_sim.runner import coalesce_query_tag, render_node

WORLD = Path(__file__).resolve().parents[2] / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce"
FIRST = date(2025, 5, 5)
NIGHTS = 42


def _nights(scale_tonight: dict[str, float]):
    """Six weeks of nightly runs; each node's rows wobble by a few percent night by night, and on the
    last night the nodes in ``scale_tonight`` scan that many times their usual rows in their insert."""
    project = load_project(WORLD / "project.yaml")
    metrics = load_metrics_file(WORLD / "metrics.yaml")
    env = project.file.environments[0]
    job = project.file.jobs[0].name
    costs = []
    for n in range(NIGHTS):
        night = FIRST + timedelta(days=n)
        start, _ = night_window(metrics.business_day, night)
        at = start + timedelta(hours=1)
        for position, node in enumerate(_built(project)):
            usual = 20_000 * (position + 1) * (1 + 0.03 * ((n * 7 + position) % 5 - 2))
            for statement in render_node(node, env):
                rows = usual if statement.kind == "insert" else usual / 4
                if n == NIGHTS - 1 and statement.kind == "insert":
                    rows *= scale_tonight.get(node.name, 1.0)
                tag = coalesce_query_tag(job, str(1000 + n), "refresh", node, statement)
                costs.append(
                    QueryCost(
                        query_id=f"q-{n}-{node.name}-{statement.name}",
                        query_tag=tag,
                        warehouse="WH",
                        user="COALESCE",
                        start_time=at,
                        end_time=at + timedelta(seconds=1),
                        credits=statement_credits(int(rows), int(rows) if statement.kind == "insert" else 0),
                    )
                )
                at += timedelta(seconds=2)
    return project, metrics, by_night(costs, lambda c: metrics.business_day.of(c.start_time.astimezone(UTC)))


def _built(project):
    # What the Job builds: every node but the sources, which land outside Coalesce.
    return [n for n in project.file.nodes if n.nodeType != "Source"]


def _judge_last_night(nights):
    tonight = max(nights)
    verdicts = {}
    for spend in nights[tonight].nodes:
        history = {d: s.credits for d, a in nights.items() for s in a.nodes if s.spender == spend.spender}
        stages = {d: s.by_stage for d, a in nights.items() for s in a.nodes if s.spender == spend.spender}
        verdicts[spend.node] = judge_cost(
            spend.spender, tonight, spend.credits, spend.by_stage, history, stages, CostJumpConfig()
        )
    return verdicts


def test_a_node_whose_cost_triples_is_a_jump_with_the_statement_that_grew():
    project, _, nights = _nights({})
    env = project.file.environments[0]
    table_nodes = [n for n in _built(project) if any(s.kind == "insert" for s in render_node(n, env))]
    grown = table_nodes[len(table_nodes) // 2].name
    _, _, nights = _nights({grown: 3.0})
    assert len(nights) == NIGHTS
    verdicts = _judge_last_night(nights)
    jumped = {name for name, v in verdicts.items() if v.is_jump}
    assert jumped == {grown}
    jump = verdicts[grown]
    assert jump.judgement.result.relative_change > 0.5
    assert jump.grown[0].stage == "Insert Data"
    assert jump.grown[0].expected and jump.grown[0].credits > 2 * jump.grown[0].expected
    assert "credits on" in jump.summary(grown)


def test_an_ordinary_wobble_and_a_cheaper_night_raise_nothing():
    project, _, _ = _nights({})
    names = [n.name for n in _built(project)]
    _, _, nights = _nights({names[0]: 1.1, names[-1]: 0.3})
    verdicts = _judge_last_night(nights)
    assert verdicts and not [name for name, v in verdicts.items() if v.is_jump]


SUNDAY = date(2025, 6, 15)


def _series(level, nights: int = 71) -> dict[date, float]:
    """``nights`` nights ending on SUNDAY; ``level(i, day)`` is night i's credits (0: the oldest)."""
    days = [SUNDAY - timedelta(days=nights - 1 - i) for i in range(nights)]
    return {d: level(i, d) for i, d in enumerate(days)}


def _wobble(i: int) -> float:
    """A deterministic wobble of a few percent, as a warehouse's credits have."""
    return 1 + 0.04 * math.sin(2.3 * i) + 0.02 * math.cos(5.1 * i)


def _weekday_rhythm(d: date) -> float:
    return 0.6 if d.weekday() >= 5 else 1.0  # less to load on weekends


# STG_DEMAND of the README walkthrough: a staging node that reads the whole demand history, which grows
# ~0.9% a night (1.94 credits on 06-05, 2.10 on 06-14, 2.12, 2.13...).
ACCUMULATING = _series(lambda i, d: 1.0 * 1.009**i)
GROWING_WEEKLY = _series(lambda i, d: 1.0 * 1.015**i * _weekday_rhythm(d) * _wobble(i))


def _judge(series: dict[date, float], tonight: float | None = None, stages=None, recorded=None):
    """SUNDAY judged as the cost job does, against the nights ``recorded`` (default: all before it)."""
    credits = series[SUNDAY] if tonight is None else tonight
    history = {d: v for d, v in series.items() if d < SUNDAY and (recorded is None or d in recorded)}
    split = stages or (lambda v: {"Insert Data": v})
    return judge_cost(
        "cost:stage/stg_demand",
        SUNDAY,
        credits,
        split(credits),
        history,
        {d: split(v) for d, v in history.items()},
        CostJumpConfig(),
    )


@pytest.mark.parametrize(
    "series, recorded",
    [
        (ACCUMULATING, None),
        (GROWING_WEEKLY, None),
        # What the walkthrough's cost run judged 2025-06-15 against: the first run's backfill, still being
        # recorded, had reached 2025-05-17 (a level of four weeks before and more).
        (ACCUMULATING, {d for d in ACCUMULATING if d <= date(2025, 5, 17)}),
    ],
    ids=["accumulating table", "growth with a weekday rhythm", "half-recorded backfill"],
)
def test_a_cost_that_follows_its_trend_is_no_jump(series, recorded):
    jump = _judge(series, recorded=recorded)
    assert not jump.is_jump, jump.summary("STG_DEMAND")
    r = jump.judgement.result
    if recorded is None:
        # Expected from its own trend (tonight's wobble aside), not from a level of weeks ago.
        assert r.expected == pytest.approx(series[SUNDAY], rel=0.1)
    else:
        # No night of the last two weeks to measure a change from: no judgement, never an old level.
        assert jump.judgement.insufficient


@pytest.mark.parametrize("series", [ACCUMULATING, GROWING_WEEKLY], ids=["accumulating", "weekday rhythm"])
def test_a_node_whose_cost_doubles_on_its_trend_is_a_jump(series):
    jump = _judge(series, tonight=2 * series[SUNDAY])
    assert jump.is_jump
    r = jump.judgement.result
    assert r.expected == pytest.approx(series[SUNDAY], rel=0.1)
    assert r.relative_change == pytest.approx(1.0, abs=0.2)


def test_a_statement_that_grows_while_the_others_hold_is_named_against_its_own_trend():
    """Insert Data triples (a join that fans out) on a growing node whose tests hold: the jump names
    Insert Data, against what its trend expected tonight, and not the tests."""

    def stages(credits: float) -> dict[str, float]:
        return {"Insert Data": credits, "Test: unique ORDER_ID": 0.3}

    jump = _judge(ACCUMULATING, stages=stages)
    assert not jump.is_jump
    grown_tonight = 3 * ACCUMULATING[SUNDAY]
    history = {d: v for d, v in ACCUMULATING.items() if d < SUNDAY}
    jump = judge_cost(
        "cost:stage/stg_demand",
        SUNDAY,
        grown_tonight + 0.3,
        stages(grown_tonight),
        {d: v + 0.3 for d, v in history.items()},
        {d: stages(v) for d, v in history.items()},
        CostJumpConfig(),
    )
    assert jump.is_jump
    assert [g.stage for g in jump.grown] == ["Insert Data"]
    assert jump.grown[0].expected == pytest.approx(ACCUMULATING[SUNDAY], rel=0.02)
    assert jump.grown[0].describe() == "Insert Data: 5.62 credits against an expected 1.87 (+201%)"
