"""A node's cost judged against its own baseline, with the same robust rules as the volume and metric
checks (``checks/baseline.py``, ``checks/judge.py``): same weekday over the last weeks, median and MAD in
log space, earlier flagged nights left out, a minimum relative change, and only a rise hurts.

Credits are not counts: the small-count rule is off, and a jump must also be at least
``min_relative_change`` (25% by default) so that the ordinary wobble of a warehouse never pages anyone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import date
from statistics import median

from pydantic import BaseModel, Field

from dw_dagster.checks.baseline import BaselineConfig, Direction
from dw_dagster.checks.judge import Judgement, judge


def default_cost_baseline() -> BaselineConfig:
    return BaselineConfig(small_below=0, min_relative_change=0.25, calendar=False)


class CostJumpConfig(BaseModel):
    baseline: BaselineConfig = Field(default_factory=default_cost_baseline)
    min_credits: float = Field(
        default=0.0, ge=0, description="A node cheaper than this tonight is not judged (noise of tiny nodes)."
    )
    lookback_days: int = Field(default=70, ge=14, le=400, description="How many nights of history to read.")


class GrownQuery(BaseModel):
    """A statement of the node whose credits grew most against its usual night."""

    stage: str
    credits: float
    usual: float | None

    def describe(self) -> str:
        if not self.usual:
            return f"{self.stage}: {self.credits:.4f} credits (new)"
        return f"{self.stage}: {self.credits:.4f} credits against a usual {self.usual:.4f} ({self.credits / self.usual - 1:+.0%})"


class CostJump(BaseModel):
    series: str
    night: date
    credits: float
    judgement: Judgement
    grown: list[GrownQuery]

    @property
    def is_jump(self) -> bool:
        return self.judgement.severity is not None

    def summary(self, label: str) -> str:
        r = self.judgement.result
        expected = f"an expected {r.expected:.4f}" if r.expected is not None else "no baseline"
        change = (
            f" ({100 * (r.relative_change or 0):+.0f}%, robust z {r.robust_z or 0:+.1f})"
            if r.expected
            else ""
        )
        return (
            f"{label} cost {self.credits:.4f} credits on {self.night.isoformat()} against {expected}{change}"
        )


def judge_cost(
    series: str,
    night: date,
    credits: float,
    stages: Mapping[str, float],
    history: Mapping[date, float | None],
    history_stages: Mapping[date, Mapping[str, float]],
    config: CostJumpConfig,
    excluded_days: Collection[date] = (),
) -> CostJump:
    """Tonight's credits of one node against its own nights; ``history_stages`` are the credits per
    statement of those nights, to name the statements that grew."""
    judgement = judge(history, night, credits, config.baseline, Direction.UP, excluded_days=excluded_days)
    return CostJump(
        series=series,
        night=night,
        credits=credits,
        judgement=judgement,
        grown=grown_queries(
            stages, [s for d, s in history_stages.items() if d < night and d not in excluded_days]
        ),
    )


def grown_queries(
    tonight: Mapping[str, float], past: Sequence[Mapping[str, float]], n: int = 3
) -> list[GrownQuery]:
    """The statements whose credits rose most tonight against their median night, largest rise first."""
    grown = []
    for stage, credits in tonight.items():
        values = [p[stage] for p in past if stage in p]
        usual = median(values) if values else None
        rise = credits - (usual or 0.0)
        if rise > 0:
            grown.append((rise, GrownQuery(stage=stage, credits=credits, usual=usual)))
    return [g for _, g in sorted(grown, key=lambda x: (-x[0], x[1].stage))[:n]]
