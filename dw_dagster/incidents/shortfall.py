"""Which groups of a total hold tonight's shortfall, ranked by how much of it each explains, and the groups
whose value is NULL: the keys a diagnosis names come from the evidence that explains the gap, not from the
first finding's wording.

- :func:`group_shortfalls`: each group tonight against the last good night, at the day's common level (the
  median ratio of the groups, so a Saturday compared with a Wednesday is not a loss everywhere): the groups
  that lost what the others did not, largest first.
- :func:`null_value_diagnosis`: a total whose group's VALUE is NULL tonight (a column the source stopped
  filling, a lookup that found nothing) while that group's last good value explains most of the total's
  fall: value loss on that group's key, with the rows and columns the check named.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from statistics import median

from dw_dagster.checks.history import Recorded
from dw_dagster.incidents.evidence import (
    HISTORY_DAYS,
    DiagnosisContext,
    feeders,
    last_good_night,
    measure_columns,
)
from dw_dagster.incidents.structure import sources_upstream
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.records.keys import split_label

EXPLAINS = 0.5
"""Keys are named until they explain this share of the shortfall (and at most ``MAX_KEYS``)."""
MAX_KEYS = 5


def _key(group: str, units: float, change: str) -> KeyGap:
    column, value = split_label(group)
    return KeyGap(column=column, value=value, rows=0, units=units, change=change)


def group_shortfalls(tonight: Recorded, before: Recorded) -> list[tuple[str, float]]:
    """(group, units short) of the groups that lost beyond the day's common level, largest first, until
    they explain half the shortfall (a group gone counts all it had)."""
    common = [
        tonight.groups[g] / v
        for g, v in before.groups.items()
        if v and v > 0 and tonight.groups.get(g) is not None and g in tonight.groups
    ]
    level = median(common) if common else 1.0
    level = min(level, 1.0) if (tonight.value or 0) < (before.value or 0) else level
    short = {
        g: level * v - (tonight.groups.get(g) or 0.0)
        for g, v in before.groups.items()
        if v is not None and v > 0
    }
    lost = sorted(((g, u) for g, u in short.items() if u > 0), key=lambda gu: -gu[1])
    total = sum(u for _, u in lost)
    out: list[tuple[str, float]] = []
    covered = 0.0
    for g, u in lost:
        if out and (covered >= EXPLAINS * total or len(out) >= MAX_KEYS):
            break
        out.append((g, u))
        covered += u
    return out


def shortfall_keys(tonight: Recorded, before: Recorded) -> list[KeyGap]:
    """The groups that hold a fall, as keys, with what each lost."""
    return [
        _key(g, -u, f"{g} lost {u:,.0f} units against the last good night ({before.business_date})")
        for g, u in group_shortfalls(tonight, before)
    ]


def null_value_diagnosis(
    incident: Incident, findings: Sequence[Finding], ctx: DiagnosisContext
) -> Diagnosis | None:
    """Value loss on the groups whose VALUE is NULL tonight, when their last good value explains most of the
    total's fall (ranked by how much each explains); None when no finding names NULL groups, or they
    explain little of it."""
    for finding in findings:
        named = finding.evidence.get("null_groups") or {}
        for name, groups in named.items():
            total = next((t for t in ctx.metrics.totals if t.name == name), None)
            if total is None or not groups:
                continue
            day = finding.business_date
            history = ctx.history.metric_history(name, day + timedelta(days=1), HISTORY_DAYS)
            tonight, before = history.get(day), last_good_night(ctx, history, day)
            if tonight is None or before is None or not before.value:
                continue
            units = sorted(((g, before.groups.get(g) or 0.0) for g in groups), key=lambda gu: -gu[1])
            fall = (before.value or 0.0) - (tonight.value or 0.0)
            lost = sum(u for _, u in units)
            if lost <= 0 or (fall > 0 and lost < EXPLAINS * fall):
                continue
            what = " or ".join(measure_columns(total)) or "VALUE"
            keys = [
                _key(g, -u, f"its {what} is NULL tonight: {u:,.0f} units on the last good night")
                for g, u in units[:MAX_KEYS]
            ]
            sources = sources_upstream(ctx.graph, total.asset) if total.asset in ctx.graph else []
            source = sources[0] if sources else total.asset
            return Diagnosis(
                incident_id=incident.incident_id,
                classification=CauseClass.VALUE_LOSS,
                cause=(
                    f"{name}: {', '.join(k.label for k in keys)} has no value tonight (NULL, not zero), where "
                    f"the last good night ({before.business_date}) had {lost:,.0f} units: "
                    f"{100 * lost / (before.value or 1):.0f}% of {name}. The rows arrived; the values did not."
                ),
                evidence={
                    "total": name,
                    "value": tonight.value or 0.0,
                    "last_good_value": before.value,
                    "null_units": lost,
                    "fall_units": fall,
                },
                keys=keys,
                upstream_change=f"{what} arrives empty for {', '.join(k.label for k in keys)}",
                cause_asset=total.asset,
                path=ctx.graph.path(source, total.asset)
                if source in ctx.graph and source != total.asset
                else [total.asset],
                owners=ctx.graph.owners_on(feeders(ctx, source)),
            )
    return None
