"""Volume: tonight's row count of each monitored table against a same-weekday robust baseline.

Row counts come from the cheapest source. In ``metadata`` mode (production): the row count the Coalesce
run reported for the node (carried on the materialization the run sensor recorded), else
``INFORMATION_SCHEMA.TABLES`` with one query per schema; never a scan. In ``count`` mode: ``COUNT(*)`` per
table, for warehouses whose metadata is unreliable (the local server's ROW_COUNT is an estimate).
"""

import fnmatch
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import timedelta

import dagster as dg

from dw_dagster.checks.baseline import BaselineStatus, score
from dw_dagster.checks.history import HistoryStore
from dw_dagster.checks.metrics import Bounds, MetricsFile
from dw_dagster.checks.reporting import report_failure
from dw_dagster.checks.run_context import CheckRun, check_run
from dw_dagster.coalesce.sql import quote_identifier, table_parts, table_reference
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

VOLUME_CHECK = "volume"
HISTORY_DAYS = 120
# Metadata the run sensor puts on each materialization: which Coalesce run built it, and its row count.
COALESCE_RUN_ID_METADATA = "coalesce/run_id"


def _table(spec: dg.AssetSpec) -> tuple[str, str, str] | None:
    return table_parts(spec.metadata.get("dagster/table_name"))


def monitored_specs(metrics: MetricsFile, specs: Sequence[dg.AssetSpec]) -> list[dg.AssetSpec]:
    return [
        s
        for s in specs
        if _table(s) and any(fnmatch.fnmatchcase(s.key.to_user_string(), g) for g in metrics.volume.assets)
    ]


def _from_run_results(instance: dg.DagsterInstance, key: dg.AssetKey, run: CheckRun) -> float | None:
    """The row count the Coalesce run reported for this node, if the latest materialization is that run's."""
    if run.coalesce_run_id is None:
        return None
    event = instance.get_latest_materialization_event(key)
    mat = event.asset_materialization if event else None
    if mat is None:
        return None
    built_by = mat.metadata.get(COALESCE_RUN_ID_METADATA)
    rows = mat.metadata.get("dagster/row_count")
    if built_by is None or rows is None or str(built_by.value) != run.coalesce_run_id:
        return None
    return float(rows.value)


def _bounds_problem(count: float, bounds: Bounds | None) -> str | None:
    if bounds is None:
        return None
    if bounds.min is not None and count < bounds.min:
        return f"{count:,.0f} rows, below the minimum of {bounds.min:,.0f}"
    if bounds.max is not None and count > bounds.max:
        return f"{count:,.0f} rows, above the maximum of {bounds.max:,.0f}"
    return None


def build_volume_checks(
    metrics: MetricsFile, specs: Sequence[dg.AssetSpec], cause_scopes: Mapping[str, str], database: str
) -> list[dg.AssetChecksDefinition]:
    monitored = {s.key: s for s in monitored_specs(metrics, specs)}
    if not monitored:
        return []
    ops = OpsSchema(database, metrics.ops_schema)
    config = metrics.volume

    @dg.multi_asset_check(
        specs=[
            dg.AssetCheckSpec(
                name=VOLUME_CHECK,
                asset=key,
                description=f"Row count against a same-weekday robust baseline ({config.row_counts} mode)",
            )
            for key in monitored
        ],
        can_subset=True,
        name="volume_checks",
    )
    def volume_checks(context, snowflake: WarehouseResource):
        warehouse = snowflake
        run = check_run(context, metrics.business_day)
        keys = [k.asset_key for k in context.selected_asset_check_keys]
        counts: dict[dg.AssetKey, tuple[float | None, str]] = {}
        if config.row_counts == "metadata":
            for key in keys:
                rows = _from_run_results(context.instance, key, run)
                if rows is not None:
                    counts[key] = (rows, "coalesce_run_results")
            by_schema: dict[tuple[str, str], list[dg.AssetKey]] = defaultdict(list)
            for key in keys:
                if key not in counts:
                    db, schema, _ = _table(monitored[key])  # type: ignore[misc]
                    by_schema[(db, schema)].append(key)
            for (db, schema), schema_keys in by_schema.items():
                tag = run.tag_fields(VOLUME_CHECK, ",".join(k.to_user_string() for k in schema_keys))
                with warehouse.tagged_connection("check.volume.metadata", **tag) as conn:
                    cur = conn.cursor()
                    cur.execute(
                        f"SELECT TABLE_NAME, ROW_COUNT FROM {quote_identifier(db)}.INFORMATION_SCHEMA.TABLES"
                        " WHERE TABLE_SCHEMA = %s",
                        (schema,),
                    )
                    found = {r[0]: r[1] for r in cur.fetchall()}
                for key in schema_keys:
                    name = _table(monitored[key])[2]  # type: ignore[index]
                    counts[key] = (
                        float(found[name]) if found.get(name) is not None else None,
                        "information_schema",
                    )
        else:
            for key in keys:
                db, schema, name = _table(monitored[key])  # type: ignore[misc]
                tag = run.tag_fields(VOLUME_CHECK, key.to_user_string())
                try:
                    with warehouse.tagged_connection("check.volume.count", **tag) as conn:
                        cur = conn.cursor()
                        cur.execute(f"SELECT COUNT(*) FROM {table_reference(db, schema, name)}")
                        counts[key] = (float(cur.fetchone()[0]), "count")
                except Exception as e:  # noqa: BLE001 - reported as errored below, never as passed
                    counts[key] = (None, f"count ({type(e).__name__}: {e})")

        store = HistoryStore(warehouse, ops, check=VOLUME_CHECK, dagster_run_id=run.dagster_run_id)
        results = []
        errors = []
        with store.session("check.volume.history") as history:
            for key in keys:
                path = key.to_user_string()
                count, source = counts[key]
                if count is None:
                    # The table is missing, or the metadata has no row count for it.
                    errors.append(
                        f"{path}: no row count for {monitored[key].metadata['dagster/table_name']} from {source}"
                    )
                    continue
                history.record_volume(path, run.business_date, count, source)
                past = history.volume_history(path, run.business_date, HISTORY_DAYS)
                base = score(
                    {d: r.value for d, r in past.items() if r.value is not None},
                    run.business_date,
                    count,
                    config.baseline,
                    excluded_days={d for d, r in past.items() if r.flagged}
                    | history.incident_days(run.business_date - timedelta(days=HISTORY_DAYS)),
                )
                metadata = {
                    "row_count": dg.MetadataValue.int(int(count)),
                    "row_count_source": source,
                    "baseline_status": base.status.value,
                    "baseline_points": base.points,
                }
                if base.expected is not None:
                    metadata["baseline_expected"] = dg.MetadataValue.float(float(base.expected))
                    metadata["baseline_robust_z"] = dg.MetadataValue.float(float(base.robust_z or 0))
                problems = [p for p in [_bounds_problem(count, config.bounds.get(path))] if p]
                if base.status is BaselineStatus.ANOMALY:
                    problems.append(
                        f"{count:,.0f} rows against an expected {base.expected:,.0f} on this weekday "
                        f"({100 * (base.relative_change or 0):+.1f}%, robust z {base.robust_z:+.1f})"
                    )
                if problems:
                    history.flag_volume(path, run.business_date)
                    summary = f"volume of {path}: " + "; ".join(problems)
                    report_failure(
                        context, warehouse=warehouse, ops=ops, run=run, check=VOLUME_CHECK, asset=path,
                        summary=summary, evidence={"row_count": count, "baseline": base.model_dump(mode="json")},
                        cause_scope=cause_scopes.get(path, f"asset:{path}"),
                    )  # fmt: skip
                    results.append(
                        dg.AssetCheckResult(
                            check_name=VOLUME_CHECK,
                            asset_key=key,
                            passed=False,
                            severity=dg.AssetCheckSeverity.ERROR,
                            description=summary,
                            metadata=metadata,
                        )  # fmt: skip
                    )
                elif base.status is BaselineStatus.INSUFFICIENT and path not in config.bounds:
                    results.append(
                        dg.AssetCheckResult(
                            check_name=VOLUME_CHECK,
                            asset_key=key,
                            passed=False,
                            severity=dg.AssetCheckSeverity.WARN,
                            metadata=metadata,
                            description=f"insufficient baseline: {base.points} same-weekday nights, "
                            f"{config.baseline.min_points} needed",
                        )  # fmt: skip
                    )
                else:
                    results.append(
                        dg.AssetCheckResult(
                            check_name=VOLUME_CHECK, asset_key=key, passed=True, metadata=metadata
                        )
                    )
        yield from results
        if errors:
            # Results not yielded are marked as failed executions: errored, never passed.
            raise dg.Failure("volume could not be measured: " + "; ".join(errors))

    return [volume_checks]
