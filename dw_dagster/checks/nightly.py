"""Every check of the metrics file in one subsettable step, ``nightly_checks``: a checks run sends three
statements to the warehouse however many checks, tables and nights of history it judges.

1. One read of what it judges against: the accepted levels, the incident days, the fixed incidents and the
   history of every series it judges (``HistorySession.night_context``).
2. One measurement: every input-freshness maximum, recorded total, row count and small table's keys, as
   parts of one statement (``measure.py``); a part that fails is that check's failure only.
3. One write of tonight's readings, the nights its failures flag included (``HistorySession.record_night``).

A bad night adds its findings (``reporting.py``); a night after a verified fix records the levels it
re-based (``levels.py``); a table whose growth new upstream keys may explain counts their rows. The checks
are judged in the order the former steps ran, input freshness, recorded totals (the reconciled first), then
volume, so on a bad night the same finding opens (and titles) its incident. Each check keeps its own name,
asset, description and metadata; a check that could not be measured is errored, never passed, and named
with its table in the step's failure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta

import dagster as dg

from dw_dagster.checks.freshness import INPUT_FRESHNESS_CHECK, InputFreshnessChecks, input_freshness_specs
from dw_dagster.checks.history import HistoryStore, NightContext, total_series, volume_series
from dw_dagster.checks.levels import LazyLineage, remediation_levels
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.recorded_totals import HISTORY_DAYS, TableResolver, Totals, check_name, total_specs
from dw_dagster.checks.run_context import check_run
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.volume import VOLUME_CHECK, Volumes, monitored_specs, volume_specs
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

NIGHTLY_CHECKS = "nightly_checks"


def build_nightly_checks(
    metrics: MetricsFile,
    specs: Sequence[dg.AssetSpec],
    resolve_table: TableResolver,
    cause_scopes: Mapping[str, str],
    database: str,
    executable: Collection[dg.AssetKey] = frozenset(),
) -> list[dg.AssetChecksDefinition]:
    """``cause_scopes`` maps an asset key path to what groups its findings into one incident (the Coalesce
    job that builds it). ``executable``: the assets a Dagster run can materialize (see :func:`_checks_op`)."""
    monitored = {s.key: s for s in monitored_specs(metrics, specs)}
    check_specs = [
        *input_freshness_specs(metrics, specs),
        *total_specs(metrics),
        *volume_specs(metrics, list(monitored)),
    ]
    if not check_specs:
        return []
    ops = OpsSchema(database, metrics.ops_schema)
    lineage = LazyLineage(specs)
    total_checks = {check_name(t) for t in metrics.totals}
    monitored_paths = {k.to_user_string() for k in monitored}

    def series_of(asset: str) -> list[str]:
        """The series kept for an asset, which a verified fix of it re-bases."""
        totals = [total_series(t.name) for t in metrics.totals if t.asset == asset]
        return totals + ([volume_series(asset)] if asset in monitored_paths else [])

    @_checks_op(check_specs, executable)
    def nightly_checks(context, snowflake: WarehouseResource):
        warehouse = snowflake
        run = check_run(context, metrics.business_day)
        selected = context.selected_asset_check_keys
        freshness = InputFreshnessChecks(
            metrics, specs, [k.asset_key for k in selected if k.name == INPUT_FRESHNESS_CHECK]
        )
        totals = Totals(metrics, resolve_table, [k.name for k in selected if k.name in total_checks])
        volumes = Volumes(
            metrics, monitored, [k.asset_key for k in selected if k.name == VOLUME_CHECK], lineage
        )
        day = run.business_date
        since = day - timedelta(days=HISTORY_DAYS)
        series = {
            **dict.fromkeys(totals.needed, since),
            **{s: day - timedelta(days=n) for s, n in volumes.series(HISTORY_DAYS).items()},
        }
        store = HistoryStore(warehouse, ops, check=NIGHTLY_CHECKS, dagster_run_id=run.dagster_run_id)
        with store.session("check.history") as history:
            read = history.night_context(since, day, series) if series else NightContext({}, set(), [])
            fixed = remediation_levels(history, read.fixed, day, series_of, lineage.downstream)
            night = Night(
                context=context, run=run, warehouse=warehouse, ops=ops, history=history, cause_scopes=cause_scopes,
                calendar=metrics.calendar, levels=read.with_levels(fixed, since), incident_days=read.incident_days,
                past=read.past,
            )  # fmt: skip
            binds = Binds()
            parts = [
                *freshness.parts(),
                *totals.parts(),
                *volumes.parts(context.instance, run, read.past, binds),
            ]
            with warehouse.tagged_connection("check.measure", **run.tag_fields(NIGHTLY_CHECKS)) as conn:
                cur = conn.cursor()
                measured = measure(cur, parts, binds)
                totals.take(measured, cur)
                # The keys of a table small tonight and not last night: the only statement that may follow.
                volumes.take_keys(measure(cur, volumes.take(measured), binds))
            results, errors = freshness.evaluate(night, measured)
            results += totals.evaluate(night)
            errors += [f"{check}: {why}" for check, why in totals.unfinished().items()]
            judged, unmeasured = volumes.evaluate(night)
            results += judged
            errors += unmeasured
            night.write()
        yield from results
        if errors:
            # Results not yielded are marked as failed executions: errored, never passed.
            raise dg.Failure(
                "checks could not be evaluated: " + "; ".join(errors),
                metadata={"errors": dg.MetadataValue.json(errors)},
            )

    return [nightly_checks]


def _checks_op(check_specs: Sequence[dg.AssetCheckSpec], executable: Collection[dg.AssetKey]):
    """What ``@dg.multi_asset_check(specs=check_specs, can_subset=True)`` builds, with an input only on the
    checked assets a Dagster run can materialize, so that a run materializing them checks them after.

    The decorator gives the op an input per checked asset, and Dagster's job build scans every check key of
    the op for each input (``build_node_deps``): quadratic, 1.3 s for 2,000 checks, paid by the code server
    at each checks run's job subset and execution plan (benchmarks/README.md, "2026-12-04 (tick)"). The
    Coalesce assets are external: an input on one orders nothing. The checks' lineage is their specs'."""
    deps = {k for s in check_specs for k in (s.asset_key, *(d.asset_key for d in s.additional_deps))}
    inputs = {k.to_python_identifier(): k for k in sorted(k for k in deps if k in executable)}

    def build(fn) -> dg.AssetChecksDefinition:
        op = dg.op(
            name=NIGHTLY_CHECKS,
            description="The metrics file's checks: one read of their history, one measurement, one write",
            ins={name: dg.In(dg.Nothing) for name in inputs},
            out={s.get_python_identifier(): dg.Out(None, is_required=False) for s in check_specs},
        )(fn)
        return dg.AssetChecksDefinition.create(
            keys_by_input_name=inputs,
            node_def=op,
            check_specs_by_output_name={s.get_python_identifier(): s for s in check_specs},
            can_subset=True,
        )

    return build
