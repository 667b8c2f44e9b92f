"""What night a checks run is about: from the tags the Coalesce run sensor sets, or from the clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

import dagster as dg

from dw_dagster import tags
from dw_dagster.checks.metrics import BusinessDay


@dataclass(frozen=True)
class CheckRun:
    business_date: date
    dagster_run_id: str
    coalesce_run_id: str | None
    coalesce_job: str | None

    def tag_fields(self, check: str, asset: str | None = None) -> dict[str, str | None]:
        """Fields for the Snowflake query tag of every query this check sends."""
        return {"check": check, "asset": asset, "dagster_run_id": self.dagster_run_id}


def check_run(context: dg.AssetCheckExecutionContext, business_day: BusinessDay) -> CheckRun:
    run_tags = context.run.tags
    raw = run_tags.get(tags.BUSINESS_DATE)
    if raw:
        try:
            day = date.fromisoformat(raw)
        except ValueError as e:
            raise dg.Failure(f"run tag {tags.BUSINESS_DATE}: expected YYYY-MM-DD, got {raw!r}") from e
    else:
        # A check launched by hand judges the business day that is current now.
        day = business_day.of(datetime.now(UTC))
    return CheckRun(
        business_date=day,
        dagster_run_id=context.run.run_id,
        coalesce_run_id=run_tags.get(tags.COALESCE_RUN_ID),
        coalesce_job=run_tags.get(tags.COALESCE_JOB),
    )
