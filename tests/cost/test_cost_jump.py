"""The cost-jump judgement on a second shape: the ecommerce scenario world's project and metrics files.

Each night's queries are those the local simulator sends for the world's nodes (its statements and its
Coalesce query tags), with credits from the local credit model; no world is seeded.
"""

from __future__ import annotations

from datetime import UTC, date, timedelta
from pathlib import Path

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
    assert jump.grown[0].usual and jump.grown[0].credits > 2 * jump.grown[0].usual
    assert "credits on" in jump.summary(grown)


def test_an_ordinary_wobble_and_a_cheaper_night_raise_nothing():
    project, _, _ = _nights({})
    names = [n.name for n in _built(project)]
    _, _, nights = _nights({names[0]: 1.1, names[-1]: 0.3})
    verdicts = _judge_last_night(nights)
    assert verdicts and not [name for name, v in verdicts.items() if v.is_jump]
