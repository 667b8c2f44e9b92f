"""Credits summed per spender: each Coalesce Job, node and run, each dw-dagster check and the diagnosis."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import date

from pydantic import BaseModel, Field

from dw_dagster.cost.history import QueryCost
from dw_dagster.cost.tags import QueryOrigin, SpenderKind, parse_query_tag


class Spend(BaseModel):
    """What one spender cost over a window (or one business night)."""

    spender: str
    kind: SpenderKind
    credits: float = 0.0
    queries: int = 0
    job: str | None = None
    node: str | None = None
    node_id: str | None = None
    location: str | None = None
    runs: list[str] = Field(default_factory=list)
    by_stage: dict[str, float] = Field(default_factory=dict)
    """Credits per statement (a Coalesce stage such as ``Insert Data``, or dw-dagster's purpose)."""
    top_query_ids: list[str] = Field(default_factory=list)
    """The most expensive queries, costliest first (at most five)."""


class Attribution(BaseModel):
    """A window's attributed queries, summed per node, per Job, per run and per dw-dagster spender."""

    nodes: list[Spend]
    jobs: list[Spend]
    runs: list[Spend]
    dw_dagster: list[Spend]
    other: list[Spend]
    total_credits: float
    queries: int

    def top(self, n: int = 10) -> list[Spend]:
        """The top spenders across nodes, dw-dagster and untagged queries (Jobs and runs sum the nodes)."""
        return sorted([*self.nodes, *self.dw_dagster, *self.other], key=lambda s: -s.credits)[:n]


def attribute(costs: Iterable[QueryCost]) -> Attribution:
    tagged = [(c, parse_query_tag(c.query_tag)) for c in costs]
    nodes: dict[str, Spend] = {}
    jobs: dict[str, Spend] = {}
    runs: dict[str, Spend] = {}
    dw: dict[str, Spend] = {}
    other: dict[str, Spend] = {}
    expensive: dict[int, list[QueryCost]] = defaultdict(list)
    for cost, origin in tagged:
        if origin.kind == "coalesce":
            # A run's statements outside any node (its schemas) count for its Job and run, not as a node.
            in_node = bool(origin.node or origin.node_id)
            node = _add(nodes if in_node else other, origin.spender, origin, cost, node=in_node)
            expensive[id(node)].append(cost)
            if origin.job:
                _add(jobs, f"job {origin.job}", origin, cost, node=False)
            if origin.run_id:
                _add(runs, f"run {origin.run_id} of job {origin.job or '?'}", origin, cost, node=False)
        else:
            spend = _add(dw if origin.kind == "dw-dagster" else other, origin.spender, origin, cost)
            expensive[id(spend)].append(cost)
    for spend in [*nodes.values(), *dw.values(), *other.values()]:
        queries = sorted(expensive[id(spend)], key=lambda c: (-c.credits, c.query_id))
        spend.top_query_ids = [c.query_id for c in queries[:5]]

    def ordered(spends: dict[str, Spend]) -> list[Spend]:
        return sorted(spends.values(), key=lambda s: (-s.credits, s.spender))

    return Attribution(
        nodes=ordered(nodes),
        jobs=ordered(jobs),
        runs=ordered(runs),
        dw_dagster=ordered(dw),
        other=ordered(other),
        total_credits=sum(c.credits for c, _ in tagged),
        queries=len(tagged),
    )


def by_night(costs: Iterable[QueryCost], night_of: Callable[[QueryCost], date]) -> dict[date, Attribution]:
    """One attribution per business night (``night_of`` maps a query to its business date)."""
    nights: dict[date, list[QueryCost]] = defaultdict(list)
    for cost in costs:
        nights[night_of(cost)].append(cost)
    return {night: attribute(nights[night]) for night in sorted(nights)}


def _add(
    spends: dict[str, Spend], key: str, origin: QueryOrigin, cost: QueryCost, node: bool = True
) -> Spend:
    spend = spends.get(key)
    if spend is None:
        spend = spends[key] = Spend(
            spender=key,
            kind=origin.kind,
            job=origin.job,
            node=origin.node if node else None,
            node_id=origin.node_id if node else None,
            location=origin.location if node else None,
        )
    spend.credits += cost.credits
    spend.queries += 1
    if origin.run_id and origin.run_id not in spend.runs:
        spend.runs.append(origin.run_id)
    stage = origin.stage or "query"
    spend.by_stage[stage] = spend.by_stage.get(stage, 0.0) + cost.credits
    return spend
