"""Freshness: a ``FreshnessPolicy`` from each Coalesce job's schedule, and an input-freshness check.

A fresh build of stale input is the green job that built an old number: the input-freshness check compares
the input's latest load (e.g. ``_LOADED_AT`` of the replicated RAW table) with what the built table
holds and with when it was built. Both maxima come from one query; Snowflake answers MAX of a column from
micro-partition metadata, without a scan.
"""

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import dagster as dg

from dw_dagster.checks.metrics import InputFreshness, JobSchedule, MetricsFile
from dw_dagster.checks.reporting import report_failure
from dw_dagster.checks.run_context import check_run
from dw_dagster.coalesce.sql import quote_identifier, table_parts, table_reference
from dw_dagster.context.specs import key_from_path
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

INPUT_FRESHNESS_CHECK = "input_freshness"
_DAILY = re.compile(r"^(\d{1,2})\s+(\d{1,2})\s+(\*\s+\*\s+\S+)$")


def freshness_policy_for(schedule: JobSchedule) -> dg.FreshnessPolicy:
    """The build must land within ``grace_minutes`` of each scheduled start."""
    grace = timedelta(minutes=schedule.grace_minutes)
    m = _DAILY.match(schedule.cron.strip())
    if m and grace < timedelta(days=1):
        start = timedelta(hours=int(m[2]), minutes=int(m[1]))
        deadline = (start + grace) % timedelta(days=1)
        hours, rest = divmod(int(deadline.total_seconds()), 3600)
        return dg.FreshnessPolicy.cron(
            deadline_cron=f"{rest // 60} {hours} {m[3]}",
            lower_bound_delta=grace,
            timezone=schedule.timezone,
        )
    # Any other cron: a window of a day plus the grace, which still catches a skipped night.
    return dg.FreshnessPolicy.time_window(fail_window=timedelta(days=1) + grace)


def apply_freshness_policies(metrics: MetricsFile, specs: Sequence[dg.AssetSpec]) -> list[dg.AssetSpec]:
    schedules = metrics.freshness.schedules
    out = []
    for spec in specs:
        jobs = spec.metadata.get("coalesce/jobs")
        names = [j["name"] for j in jobs.data] if jobs is not None else []  # type: ignore[union-attr]
        scheduled = [schedules[n] for n in names if n in schedules]
        out.append(
            spec.replace_attributes(freshness_policy=freshness_policy_for(scheduled[0]))
            if scheduled
            else spec
        )
    return out


def _table_of(specs_by_path: Mapping[str, dg.AssetSpec], path: str) -> tuple[str, str, str]:
    parts = table_parts(specs_by_path[path].metadata.get("dagster/table_name"))
    if parts is None:
        raise dg.DagsterInvariantViolationError(f"freshness.inputs: {path} has no Snowflake table name")
    return parts


def _utc(v: datetime | None) -> datetime | None:
    # TIMESTAMP_NTZ load stamps are UTC by convention (the replication writes UTC).
    return None if v is None else (v if v.tzinfo else v.replace(tzinfo=UTC))


def _built_at(instance: dg.DagsterInstance, key: dg.AssetKey) -> datetime | None:
    event = instance.get_latest_materialization_event(key)
    mat = event.asset_materialization if event else None
    stamp = mat.metadata.get("dagster/last_updated_timestamp") if mat else None
    if stamp is not None:
        return datetime.fromtimestamp(float(stamp.value), tz=UTC)
    return datetime.fromtimestamp(event.timestamp, tz=UTC) if event else None


def build_input_freshness_checks(
    metrics: MetricsFile, specs: Sequence[dg.AssetSpec], cause_scopes: Mapping[str, str], database: str
) -> list[dg.AssetChecksDefinition]:
    rules = metrics.freshness.inputs
    if not rules:
        return []
    specs_by_path = {s.key.to_user_string(): s for s in specs}
    missing = sorted({p for r in rules for p in (r.asset, r.input) if p not in specs_by_path})
    if missing:
        raise dg.DagsterInvariantViolationError(f"freshness.inputs: no such assets {missing}")
    ops = OpsSchema(database, metrics.ops_schema)
    by_asset: dict[dg.AssetKey, InputFreshness] = {key_from_path(r.asset): r for r in rules}

    @dg.multi_asset_check(
        specs=[
            dg.AssetCheckSpec(
                name=INPUT_FRESHNESS_CHECK,
                asset=key_from_path(r.asset),
                additional_deps=[key_from_path(r.input)],
                description=f"Holds {r.input}'s latest load, and that load was at most "
                f"{r.max_input_age_hours:g} h old when the table was built",
            )
            for r in rules
        ],
        can_subset=True,
        name="input_freshness_checks",
    )
    def input_freshness_checks(context, snowflake: WarehouseResource):
        warehouse = snowflake
        run = check_run(context, metrics.business_day)
        for check_key in context.selected_asset_check_keys:
            rule = by_asset[check_key.asset_key]
            table = table_reference(*_table_of(specs_by_path, rule.asset))
            source = table_reference(*_table_of(specs_by_path, rule.input))
            with warehouse.tagged_connection(
                "check.input_freshness", **run.tag_fields(INPUT_FRESHNESS_CHECK, rule.asset)
            ) as conn:
                cur = conn.cursor()
                cur.execute(
                    f"SELECT (SELECT MAX({quote_identifier(rule.column)}) FROM {table}),"
                    f" (SELECT MAX({quote_identifier(rule.input_column)}) FROM {source})"
                )
                held, latest = (_utc(v) for v in cur.fetchone())
            built = _built_at(context.instance, check_key.asset_key) or datetime.now(UTC)
            problems = []
            if latest is None:
                problems.append(f"{rule.input} has no loads at all")
            else:
                age = built - latest
                if age > timedelta(hours=rule.max_input_age_hours):
                    problems.append(
                        f"built on stale input: {rule.input}'s latest load was {age.total_seconds() / 3600:.1f} h "
                        f"old when {rule.asset} was built (allowed {rule.max_input_age_hours:g} h)"
                    )
                if held is None or latest - held > timedelta(minutes=rule.max_lag_minutes):
                    problems.append(
                        f"{rule.asset} holds loads up to {held}, but {rule.input} has loads up to {latest}"
                    )
            metadata = {
                "input_latest_load": str(latest),
                "table_latest_load": str(held),
                "built_at": built.isoformat(),
            }
            if latest is not None:
                metadata["input_age_hours"] = dg.MetadataValue.float(
                    float((built - latest).total_seconds() / 3600)
                )
            if problems:
                summary = "; ".join(problems)
                report_failure(
                    context, warehouse=warehouse, ops=ops, run=run, check=INPUT_FRESHNESS_CHECK, asset=rule.asset,
                    summary=summary, evidence=metadata, cause_scope=cause_scopes.get(rule.asset, f"asset:{rule.asset}"),
                )  # fmt: skip
            yield dg.AssetCheckResult(
                check_name=INPUT_FRESHNESS_CHECK,
                asset_key=check_key.asset_key,
                passed=not problems,
                severity=dg.AssetCheckSeverity.ERROR,
                description="; ".join(problems) or None,
                metadata=metadata,
            )

    return [input_freshness_checks]
