"""Every check of the metrics file in one subsettable step, ``nightly_checks``: a checks run sends three
statements to the warehouse however many checks, tables and nights of history it judges.

1. One read of what it judges against: the accepted levels, the incident days, the fixed incidents and the
   history of every series it judges (``HistorySession.night_context``).
2. One measurement: every input-freshness maximum, recorded total, row count, small table's keys and
   keyed table's rows and distinct business keys (``business_keys.py``), as parts of one statement
   (``measure.py``); a part that fails is that check's failure only.
3. One write of tonight's readings, the nights its failures flag included (``HistorySession.record_night``).

A bad night adds its findings (through the reporter the step hands in); a night after a verified fix records the levels it
re-based (``levels.py``); a table whose growth new upstream keys may explain counts their rows. The checks
are judged in the order the former steps ran, input freshness, recorded totals (the reconciled first), then
volume, then the business keys, so on a bad night the same finding opens (and titles) its incident. Each
check keeps its own name, asset, description and metadata; a check that could not be measured is errored,
never passed, and named with its table in the step's failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

import dagster as dg

from dw_dagster.checks.attributes import carried_attributes, carried_keys
from dw_dagster.checks.business_keys import BUSINESS_KEY_CHECK, BusinessKeys, business_key_specs, keyed
from dw_dagster.checks.freshness import INPUT_FRESHNESS_CHECK, InputFreshnessChecks, input_freshness_specs
from dw_dagster.checks.history import HistoryStore, NightContext, total_series, volume_series
from dw_dagster.checks.implied import implied_reconciliations, implied_row_reconciliations
from dw_dagster.checks.levels import LazyLineage, remediation_levels
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.recorded_totals import (
    HISTORY_DAYS,
    TableResolver,
    Totals,
    check_name,
    total_specs,
    value_columns,
)
from dw_dagster.checks.repointed import reference_key
from dw_dagster.checks.row_values import RowBases, row_bases
from dw_dagster.checks.run_context import check_run
from dw_dagster.checks.signs import numeric_columns, summed_columns
from dw_dagster.checks.tonight import Night, Reporter
from dw_dagster.checks.volume import VOLUME_CHECK, Volumes, monitored_specs, volume_specs
from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

NIGHTLY_CHECKS = "nightly_checks"


class NightlyChecks:
    """The metrics file's checks over ``specs``. ``cause_scopes`` maps an asset key path to what groups its
    findings into one incident (the Coalesce job that builds it)."""

    def __init__(
        self,
        metrics: MetricsFile,
        specs: Sequence[dg.AssetSpec],
        resolve_table: TableResolver,
        cause_scopes: Mapping[str, str],
        database: str,
    ):
        self.metrics = metrics
        self.specs = specs
        self.resolve_table = resolve_table
        self.cause_scopes = cause_scopes
        self.monitored = {s.key: s for s in monitored_specs(metrics, specs)}
        # The monitored tables whose node declares a business key: checked for keys that repeat.
        self.keyed = keyed(list(self.monitored.values()))
        self.check_specs = [
            *input_freshness_specs(metrics, specs),
            *total_specs(metrics),
            *volume_specs(metrics, list(self.monitored)),
            *business_key_specs(self.keyed),
        ]
        self.ops = OpsSchema(database, metrics.ops_schema)
        self.lineage = LazyLineage(specs)
        self._total_checks = {check_name(t) for t in metrics.totals}
        self._monitored_paths = {k.to_user_string() for k in self.monitored}
        self._attributes: dict[str, list[str]] | None = None
        self._bases: dict[str, RowBases] = {}
        self._keys: dict[str, set[str]] = {}
        self._references: dict[str, dict[str, list[str]]] = {}
        self._signed: dict[str, list[str]] = {}
        self._implied: dict[str, tuple[str, ...]] = {}
        self._implied_rows: dict[str, tuple[str, ...]] = {}
        # The series judged on each table share its false-alarm rate (BaselineConfig.false_alarm_rate).
        self.shares: dict[str, int] = {p: 1 for p in self._monitored_paths}
        for t in metrics.totals:
            self.shares[t.asset] = self.shares.get(t.asset, 0) + 1

    def attributes(self) -> dict[str, list[str]]:
        """Each total -> the dimension attributes its table carries from a reference table (found once, from
        the column lineage: ``attributes.py``)."""
        if self._attributes is None:
            graph = self.lineage.graph()
            self._attributes = {}
            measured: dict[str, list[str]] = {}
            # A table's join keys, found once for all its totals (each parses the joins of every node above it).
            keys_of: dict[str, set[str]] = {}
            for t in self.metrics.totals:
                try:
                    resolved = resolve_refs(t.sql, self.resolve_table)
                    measures = value_columns(resolved)
                except ValueError:
                    continue  # a ref the resolver does not know: the total's own check says so
                measured[t.name] = measures
                if t.asset not in keys_of:
                    keys_of[t.asset] = carried_keys(graph, t.asset)
                self._attributes[t.name] = carried_attributes(graph, t, measures, keys_of[t.asset])
                self._keys[t.name] = keys_of[t.asset] & set(self._attributes[t.name])
                # The numeric columns VALUE sums, whose signs each subset keeps (signs.py).
                self._signed[t.name] = numeric_columns(graph, t.asset, summed_columns(resolved))
                # Each text attribute's reference key, where the table carries it (repointed.py).
                self._references[t.name] = {
                    c: key
                    for c in self._attributes[t.name]
                    if c not in self._keys[t.name] and (key := reference_key(graph, t.asset, c))
                }
                self._bases[t.name] = row_bases(graph, t, measures, self.metrics.totals)
            # And the reconciliations the column lineage implies between them (implied.py).
            self._implied = implied_reconciliations(graph, self.metrics.totals, measured)
            self._implied_rows = implied_row_reconciliations(
                graph, self.metrics.totals, measured, self._implied
            )
        return self._attributes

    def series_of(self, asset: str) -> list[str]:
        """The series kept for an asset, which a verified fix of it re-bases."""
        totals = [total_series(t.name) for t in self.metrics.totals if t.asset == asset]
        return totals + ([volume_series(asset)] if asset in self._monitored_paths else [])

    def evaluate(
        self, context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource, reporter: Reporter
    ) -> tuple[list[dg.AssetCheckResult], list[str]]:
        """Tonight's results of the checks ``context`` selects, and the checks that could not be evaluated
        (each named with why); ``reporter`` records each failing check's finding."""
        metrics, lineage = self.metrics, self.lineage
        run = check_run(context, metrics.business_day)
        selected = context.selected_asset_check_keys
        freshness = InputFreshnessChecks(
            metrics, self.specs, [k.asset_key for k in selected if k.name == INPUT_FRESHNESS_CHECK]
        )
        totals = Totals(
            metrics,
            self.resolve_table,
            [k.name for k in selected if k.name in self._total_checks],
            self.attributes(),
            self._bases,  # found with the attributes, above
            self._implied,
            self._keys,
            self._implied_rows,
            self._references,
            self._signed,
        )
        volumes = Volumes(
            metrics, self.monitored, [k.asset_key for k in selected if k.name == VOLUME_CHECK], lineage
        )
        keys = BusinessKeys(self.keyed, [k.asset_key for k in selected if k.name == BUSINESS_KEY_CHECK])
        day = run.business_date
        since = day - timedelta(days=HISTORY_DAYS)
        series = {
            **dict.fromkeys(totals.series(), since),
            **{
                s: day - timedelta(days=n)
                for s, n in {**volumes.series(HISTORY_DAYS), **freshness.series(), **keys.series()}.items()
            },
        }
        store = HistoryStore(warehouse, self.ops, check=NIGHTLY_CHECKS, dagster_run_id=run.dagster_run_id)
        with store.session("check.history") as history:
            read = history.night_context(since, day, series) if series else NightContext({}, set(), [])
            fixed = remediation_levels(history, read.fixed, day, self.series_of, lineage.downstream)
            night = Night(
                context=context,
                run=run,
                warehouse=warehouse,
                ops=self.ops,
                history=history,
                cause_scopes=self.cause_scopes,
                calendar=metrics.calendar,
                levels=read.with_levels(fixed, since),
                incident_days=read.incident_days,
                past=read.past,
                reporter=reporter,
                shares=self.shares,
            )
            binds = Binds()
            parts = [
                *freshness.parts(),
                *totals.parts(),
                *volumes.parts(context.instance, run, read.past, binds),
                *keys.parts(),
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
            judged, unmeasured = keys.evaluate(night, measured)
            results += judged
            errors += unmeasured
            night.write()
        return results, errors
