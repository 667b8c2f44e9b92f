"""The nightly cost job, its asset ``dw/cost`` and the sensor that starts it once a night has work.

One run attributes one business night (``cost/night.py``): it reads the night's attributed queries (``history.py``), sums them
per spender, records each node's credits in the ops schema's ``METRIC_HISTORY`` (series ``cost:<asset>``,
the credits per statement as its groups), judges each node against its own nights (``jump.py``) and opens
a finding for the node's owners on a jump, then materializes ``dw/cost`` with the night's credits as
float metadata, so that the asset's Plots tab shows each spender night by night.

The sensor reads only the Dagster instance: a night is due once the views' latency has passed since it
ended and the run sensor reported at least one Coalesce node built that night. An idle night (nothing
ran) starts nothing and touches no warehouse. Nights run one at a time, oldest first: each is judged
against the nights before it, which the previous run recorded.
"""

# No ``from __future__ import annotations``: Dagster reads the op's config class from its annotation.
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

import dagster as dg

from dw_dagster.app.reporting import record_finding
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.cost.jump import CostJumpConfig
from dw_dagster.cost.night import (
    COST_JOB,
    COST_KEY,
    attribute_night,
    cost_metadata,
    latency_from_env,
    nights_due,
    node_assets,
)
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.internals import get_current_datetime
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

cost_spec = dg.AssetSpec(
    key=COST_KEY,
    description="Snowflake credits per Coalesce Job, node and run and per dw-dagster check and diagnosis, "
    "one materialization per business night (docs/cost.md).",
    group_name="dw_operations",
    kinds={"snowflake"},
)


class CostNight(dg.Config):
    night: str
    """The business date to attribute, YYYY-MM-DD."""
    backfill_nights: int = 0
    """Also record this many nights before it (the sensor's first run backfills the baseline's lookback)."""


NIGHT_TAG = "dw/cost_night"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
IN_FLIGHT_CEILING = timedelta(hours=6)
"""A cost run in flight longer than this (a worker lost without run monitoring) no longer holds the next
nights back."""


def in_flight(instance: dg.DagsterInstance, now: datetime) -> dg.DagsterRun | None:
    """A cost run not yet ended, started (or queued) within the ceiling."""
    for record in instance.get_run_records(dg.RunsFilter(job_name=COST_JOB, statuses=IN_FLIGHT), limit=5):
        since = record.start_time or record.create_timestamp.timestamp()
        if now.timestamp() - since < IN_FLIGHT_CEILING.total_seconds():
            return record.dagster_run
    return None


def succeeded(instance: dg.DagsterInstance) -> bool:
    """Whether a cost run ever succeeded here (and so recorded a baseline)."""
    runs = dg.RunsFilter(job_name=COST_JOB, statuses=[dg.DagsterRunStatus.SUCCESS])
    return bool(instance.get_run_records(runs, limit=1))


def build_cost_definitions(
    specs: Sequence[dg.AssetSpec],
    metrics: MetricsFile,
    ops: OpsSchema,
    resources: Mapping[str, Any] | None = None,
) -> dg.Definitions:
    """The cost job, the ``dw/cost`` asset it materializes and the sensor that starts it; ``resources`` are
    bound to the job (see ``build_incident_definitions``)."""
    assets_by_node = node_assets(specs)

    @dg.op(name="attribute_costs", description="Attribute one business night's Snowflake credits.")
    def attribute_costs(context: dg.OpExecutionContext, config: CostNight, snowflake: WarehouseResource):
        try:
            night = date.fromisoformat(config.night)
        except ValueError as e:
            raise dg.Failure(f"config night: expected YYYY-MM-DD, got {config.night!r}") from e
        attribution, jumps, findings = attribute_night(
            snowflake,
            ops,
            metrics,
            assets_by_node,
            night,
            backfill_nights=config.backfill_nights,
            run_id=context.run_id,
        )
        store = IncidentStore(snowflake, ops, run_id=context.run_id)
        incidents = [record_finding(context, store, f).incident.incident_id for f in findings]
        metadata = cost_metadata(attribution, jumps, assets_by_node)
        metadata["night"] = night.isoformat()
        if incidents:
            metadata["incidents"] = ", ".join(incidents)
        context.log_event(dg.AssetMaterialization(asset_key=COST_KEY, metadata=metadata))
        context.log.info(
            f"{night}: {attribution.total_credits:.4f} credits over {attribution.queries} queries"
        )

    @dg.job(
        name=COST_JOB,
        description="Attribute one night's Snowflake credits (docs/cost.md).",
        resource_defs=dict(resources or {}),
    )
    def cost_attribution():
        attribute_costs()

    node_keys = [dg.AssetKey.from_user_string(k) for k in assets_by_node.values()]
    latency = latency_from_env()

    @dg.sensor(
        name="cost_attribution_sensor",
        job=cost_attribution,
        minimum_interval_seconds=900,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts the cost job for each night on which Coalesce built something, once Snowflake's "
        "account usage views have caught up (DW_COST_LATENCY_HOURS, 8 by default), one night at a time, oldest "
        "first. Reads only Dagster's instance.",
    )
    def cost_attribution_sensor(context: dg.SensorEvaluationContext):
        def had_work(start: datetime, end: datetime) -> bool:
            return any(
                context.instance.fetch_materializations(
                    dg.AssetRecordsFilter(
                        asset_key=key, after_timestamp=start.timestamp(), before_timestamp=end.timestamp()
                    ),
                    limit=1,
                ).records
                for key in node_keys
            )

        # Dagster's clock, as its schedules read it (a deployment's wall clock).
        now = get_current_datetime()
        # A night is judged against the nights before it, which the run before it records (a first run's
        # backfill of the lookback takes minutes): a later night waits until that run has ended, or else it
        # is judged against a level of weeks ago.
        busy = in_flight(context.instance, now)
        if busy is not None:
            return dg.SkipReason(
                f"cost run {busy.run_id} ({busy.tags.get(NIGHT_TAG, '?')}) has not ended: the next night is "
                "judged against it"
            )
        last = date.fromisoformat(context.cursor) if context.cursor else None
        due = nights_due(last, now, latency, metrics.business_day, had_work)
        if due:
            night = due[0]
            context.update_cursor(night.isoformat())
            # Until a cost run has succeeded, the night also records the baseline's lookback from the
            # views' year (a first run that failed leaves no baseline behind).
            backfill = 0 if succeeded(context.instance) else CostJumpConfig().lookback_days
            return dg.RunRequest(
                run_key=f"cost:{night.isoformat()}",
                run_config=dg.RunConfig(
                    ops={"attribute_costs": CostNight(night=night.isoformat(), backfill_nights=backfill)}
                ),
                tags={NIGHT_TAG: night.isoformat()},
            )
        latest = metrics.business_day.of(now - latency) - timedelta(days=1)
        if last is None or latest > last:
            context.update_cursor(latest.isoformat())
        return dg.SkipReason(f"no night with work after {last or latest} is complete yet")

    return dg.Definitions(assets=[cost_spec], jobs=[cost_attribution], sensors=[cost_attribution_sensor])
