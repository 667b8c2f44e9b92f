"""Volume: tonight's row count of each monitored table against a same-weekday robust baseline, judged with
the calendar, the small-count rule and accepted levels (``judge.py``); small keyed tables name the rows
that appeared or went, and the new keys that explain a bigger table's new level (``keys.py``).

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

from dw_dagster.checks.history import HistoryStore, Rebase, volume_series
from dw_dagster.checks.judge import deviation, judge, judgement_metadata
from dw_dagster.checks.keys import (
    KeyChange,
    new_key_candidates,
    read_keys,
    record_keys,
    rows_with_keys,
    table_columns,
    unique_column,
)
from dw_dagster.checks.levels import LazyLineage, remediation_levels
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


def _count_rows(
    cur, tables: Mapping[dg.AssetKey, tuple[str, str, str]]
) -> dict[dg.AssetKey, tuple[float | None, str]]:
    """``COUNT(*)`` of every table in one statement. When it fails (a table is missing), each table is
    counted alone, so the failure is that table's only: its count is None with the error as its source."""
    keys = list(tables)
    parts = [f"SELECT %s AS ASSET_KEY, COUNT(*) AS N FROM {table_reference(*tables[k])}" for k in keys]
    try:
        cur.execute("\nUNION ALL\n".join(parts), tuple(k.to_user_string() for k in keys))
    except Exception as e:  # noqa: BLE001 - reported as errored by the caller, never as passed
        if len(keys) == 1:
            return {keys[0]: (None, f"count ({type(e).__name__}: {e})")}
        return {k: v for key in keys for k, v in _count_rows(cur, {key: tables[key]}).items()}
    found = {r[0]: float(r[1]) for r in cur.fetchall()}
    return {k: (found.get(k.to_user_string()), "count") for k in keys}


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
    monitored_paths = {k.to_user_string() for k in monitored}
    keyed = {k: unique_column(s) for k, s in monitored.items()}
    lineage = LazyLineage(specs)

    def _record_small_keys(context, warehouse, history, run, measured) -> dict[str, KeyChange]:
        """Tonight's keys of every small keyed table (a cheap read of a small table); names, not a verdict,
        so a failed read is logged and the count is still judged."""
        small = [
            k
            for k, (count, _) in measured.items()
            if keyed[k] is not None and count < config.baseline.small_below
        ]
        if not small:
            return {}
        keys = {}
        tag = run.tag_fields(VOLUME_CHECK, ",".join(k.to_user_string() for k in small))
        with warehouse.tagged_connection("check.volume.keys", **tag) as conn:
            for key in small:
                path = key.to_user_string()
                try:
                    keys[path] = (keyed[key], read_keys(conn.cursor(), _table(monitored[key]), keyed[key]))  # type: ignore[arg-type]
                except Exception as e:  # noqa: BLE001 - the keys only name the change; the count is judged anyway
                    context.log.warning(f"{path}: could not read its keys ({type(e).__name__}: {e})")
        return record_keys(history, keys, run.business_date, (run.dagster_run_id, run.coalesce_run_id))

    def _judge_volume(
        context, warehouse, ops, run, history, spec, count, source, changes, levels, incident_days, past
    ):
        path = spec.key.to_user_string()
        values = {d: r.value for d, r in past.items() if r.value is not None}
        excluded = {d for d, r in past.items() if r.flagged} | incident_days
        verdict = judge(
            values, run.business_date, count, config.baseline, calendar=metrics.calendar,
            excluded_days=excluded, rebases=levels,
        )  # fmt: skip
        if verdict.severity == "ERROR" and verdict.result.direction == "up":
            explained = _explained_by_new_keys(
                context, warehouse, run, spec, count, values, excluded, levels, changes
            )
            if explained is not None:
                history.record_rebase(explained)
                verdict = judge(
                    values, run.business_date, count, config.baseline, calendar=metrics.calendar,
                    excluded_days=excluded, rebases=[*levels, explained],
                )  # fmt: skip
        metadata = {
            "row_count": dg.MetadataValue.int(int(count)),
            "row_count_source": source,
            **judgement_metadata(verdict),
        }
        named = changes[path].describe() if path in changes else ""
        if named:
            metadata["rows_changed"] = named
        problems = [p for p in [_bounds_problem(count, config.bounds.get(path))] if p]
        severity = "ERROR" if problems else verdict.severity
        if verdict.severity is not None:
            found = deviation(verdict, "rows")
            problems.append(
                found
                + (f"; {named}" if named else "")
                + (f" ({verdict.describe()})" if verdict.notes else "")
            )
        key = spec.key
        if severity == "ERROR":
            history.flag_volume(path, run.business_date)
            summary = f"volume of {path}: " + "; ".join(problems)
            report_failure(
                context, warehouse=warehouse, ops=ops, run=run, check=VOLUME_CHECK, asset=path, summary=summary,
                evidence={"row_count": count, "rows_changed": named, "baseline": verdict.result.model_dump(mode="json")},
                cause_scope=cause_scopes.get(path, f"asset:{path}"),
            )  # fmt: skip
            return dg.AssetCheckResult(check_name=VOLUME_CHECK, asset_key=key, passed=False,
                                       severity=dg.AssetCheckSeverity.ERROR, description=summary, metadata=metadata)  # fmt: skip
        if severity == "WARN":
            # A deviation the calendar explains: shown, never an incident, and the night trains its like days.
            return dg.AssetCheckResult(check_name=VOLUME_CHECK, asset_key=key, passed=False,
                                       severity=dg.AssetCheckSeverity.WARN,
                                       description=f"volume of {path}: " + "; ".join(problems), metadata=metadata)  # fmt: skip
        if verdict.insufficient and path not in config.bounds:
            return dg.AssetCheckResult(
                check_name=VOLUME_CHECK, asset_key=key, passed=False, severity=dg.AssetCheckSeverity.WARN,
                metadata=metadata,
                description=f"insufficient baseline: {verdict.result.points} same-weekday nights, "
                f"{config.baseline.min_points} needed",
            )  # fmt: skip
        return dg.AssetCheckResult(check_name=VOLUME_CHECK, asset_key=key, passed=True, metadata=metadata,
                                   description=verdict.describe() or None)  # fmt: skip

    def _explained_by_new_keys(
        context, warehouse, run, spec, count, values, excluded, levels, changes
    ) -> Rebase | None:
        """The growth is the rows of keys that appeared tonight in a small table upstream (a new key, mapped
        the same day): then it is the table's new level."""
        path = spec.key.to_user_string()
        columns = {c.name for c in table_columns(spec)}
        candidates = new_key_candidates(sorted(lineage.upstream(path)), changes, sorted(columns))
        if not candidates:
            return None
        by_column: dict[str, dict[str, object]] = {}
        for _, change in candidates:
            by_column.setdefault(change.column, {}).update(change.appeared)
        rows, parts = 0, []
        try:
            with warehouse.tagged_connection(
                "check.volume.new_keys", **run.tag_fields(VOLUME_CHECK, path)
            ) as conn:
                for column, appeared in by_column.items():
                    n = rows_with_keys(conn.cursor(), _table(spec), column, list(appeared.values()))  # type: ignore[arg-type]
                    rows += n
                    where = ", ".join(a for a, c in candidates if c.column == column)
                    parts.append(f"{', '.join(appeared)} new in {where} tonight: {n:,} rows")
        except Exception as e:  # noqa: BLE001 - no explanation then: the anomaly stands as measured
            context.log.warning(
                f"{path}: could not count the rows of tonight's new keys ({type(e).__name__}: {e})"
            )
            return None
        rest = judge(values, run.business_date, count - rows, config.baseline, calendar=metrics.calendar,
                     excluded_days=excluded, rebases=levels)  # fmt: skip
        if rows == 0 or rest.severity == "ERROR":
            return None
        return Rebase(
            series=volume_series(path), from_date=run.business_date, kind="explained", reason="; ".join(parts)
        )

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
            tag = run.tag_fields(VOLUME_CHECK, ",".join(k.to_user_string() for k in keys))
            with warehouse.tagged_connection("check.volume.count", **tag) as conn:
                counts.update(_count_rows(conn.cursor(), {k: _table(monitored[k]) for k in keys}))  # type: ignore[misc]

        store = HistoryStore(warehouse, ops, check=VOLUME_CHECK, dagster_run_id=run.dagster_run_id)
        results, errors = [], []
        with store.session("check.volume.history") as history:
            measured: dict[dg.AssetKey, tuple[float, str]] = {}
            for key in keys:
                count, source = counts[key]
                if count is None:
                    # The table is missing, or the metadata has no row count for it.
                    errors.append(
                        f"{key.to_user_string()}: no row count for {monitored[key].metadata['dagster/table_name']} "
                        f"from {source}"
                    )
                    continue
                measured[key] = (count, source)
            history.record_volumes(run.business_date, {k.to_user_string(): m for k, m in measured.items()})
            changes = _record_small_keys(context, warehouse, history, run, measured)
            since = run.business_date - timedelta(days=HISTORY_DAYS)
            night = history.night_context(since, run.business_date)
            fixed = remediation_levels(
                history, night.fixed, run.business_date,
                lambda a: [volume_series(a)] if a in monitored_paths else [], lineage.downstream,
            )  # fmt: skip
            levels, incident_days = night.with_levels(fixed, since), night.incident_days
            pasts = history.volume_histories(
                [k.to_user_string() for k in measured], run.business_date, HISTORY_DAYS
            )
            for key, (count, source) in measured.items():
                results.append(
                    _judge_volume(
                        context, warehouse, ops, run, history, monitored[key], count, source, changes,
                        levels.get(volume_series(key.to_user_string()), []), incident_days,
                        pasts[key.to_user_string()],
                    )
                )  # fmt: skip
        yield from results
        if errors:
            # Results not yielded are marked as failed executions: errored, never passed.
            raise dg.Failure("volume could not be measured: " + "; ".join(errors))

    return [volume_checks]
