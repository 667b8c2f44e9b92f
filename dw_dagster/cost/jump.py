"""A node's cost judged against its own nights, with the same robust rules as the volume and metric checks
(``checks/baseline.py``, ``checks/judge.py``): log space, earlier flagged nights left out, a threshold read
from the series' own one-step errors, a minimum relative change, and only a rise hurts.

The baseline is **week over week**: tonight's change from the same weekday a week before, against the usual
weekly change of the last four weeks. A node's cost follows what it reads and writes, and a table that
accumulates rows grows a little every night; against a level of weeks ago such a trend scores as a jump
(a smooth series has almost no spread), while its change from a week ago is its usual change. A weekday
rhythm cancels out the same way. What is judged is a step: a node whose cost doubles, or one of its
statements that grows while the others hold. A week's night missing (flagged, or not run) is bridged by the
week before; a longer gap in the record gives no judgement rather than a comparison with an old level.

Credits are not counts: the small-count rule is off, and a jump must also be at least
``min_relative_change`` (25% by default) so that the ordinary wobble of a warehouse never pages anyone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import date
from statistics import median

from pydantic import BaseModel, Field

from dw_dagster.checks.baseline import BaselineConfig, BaselineMethod, BaselineStatus, Direction, score
from dw_dagster.checks.judge import Judgement, judge
from dw_dagster.records.incidents import GrownStatement, credits_text


def default_cost_baseline() -> BaselineConfig:
    return BaselineConfig(
        method=BaselineMethod.WEEK_OVER_WEEK, small_below=0, min_relative_change=0.25, calendar=False
    )


class CostJumpConfig(BaseModel):
    baseline: BaselineConfig = Field(default_factory=default_cost_baseline)
    min_credits: float = Field(
        default=0.0, ge=0, description="A node cheaper than this tonight is not judged (noise of tiny nodes)."
    )
    lookback_days: int = Field(
        default=70,
        ge=14,
        le=400,
        description="How many nights of history to read: the baseline's weeks and the one-step errors its "
        "threshold is read from.",
    )


class CostJump(BaseModel):
    series: str
    night: date
    credits: float
    judgement: Judgement
    grown: list[GrownStatement]

    @property
    def is_jump(self) -> bool:
        return self.judgement.severity is not None

    def summary(self, label: str) -> str:
        r = self.judgement.result
        expected = f"an expected {credits_text(r.expected)}" if r.expected is not None else "no baseline"
        change = (
            f" ({100 * (r.relative_change or 0):+.0f}%, robust z {r.robust_z or 0:+.1f})"
            if r.expected
            else ""
        )
        return f"{label} cost {credits_text(self.credits)} credits on {self.night.isoformat()} against {expected}{change}"


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
    past = {d: s for d, s in history_stages.items() if d < night and d not in excluded_days}
    return CostJump(
        series=series,
        night=night,
        credits=credits,
        judgement=judgement,
        grown=grown_statements(stages, past, night, config.baseline),
    )


def grown_statements(
    tonight: Mapping[str, float],
    past: Mapping[date, Mapping[str, float]],
    night: date,
    baseline: BaselineConfig,
    n: int = 3,
) -> list[GrownStatement]:
    """The statements whose credits rose most tonight against what their own nights expected of them (the
    node's baseline, each statement its own series), largest rise first: those that rose by the baseline's
    minimum relative change (a statement that grew while the others held), else the largest rises. A
    statement with too short a record for the baseline is compared with its median night; one never seen
    before is new."""
    rises = []
    for stage, credits in tonight.items():
        own = {d: s[stage] for d, s in past.items() if stage in s}
        expected = None
        if own:
            r = score(own, night, credits, baseline, Direction.UP)
            usable = r.status is not BaselineStatus.INSUFFICIENT and r.expected is not None
            expected = r.expected if usable else median(own.values())
        rise = credits - (expected or 0.0)
        if rise > 0:
            rises.append((rise, GrownStatement(stage=stage, credits=credits, expected=expected)))
    rises.sort(key=lambda x: (-x[0], x[1].stage))
    material = [g for rise, g in rises if not g.expected or rise >= baseline.min_relative_change * g.expected]
    return (material or [g for _, g in rises])[:n]
