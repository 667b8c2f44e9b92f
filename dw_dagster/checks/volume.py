"""Volume: tonight's row count of each monitored table against a same-weekday robust baseline, judged with
the calendar, the small-count rule and accepted levels (``judge.py``); small keyed tables name the rows
that appeared or went, and the new keys that explain a bigger table's new level (``keys.py``).

Row counts come from the cheapest source. In ``metadata`` mode (production): the row count the Coalesce
run reported for the node (carried on the materialization the run sensor recorded), else
``INFORMATION_SCHEMA.TABLES`` (one part of the night's statement per schema); never a scan of a table. A
view has no row count there (ROW_COUNT is NULL for views,
https://docs.snowflake.com/en/sql-reference/info-schema/tables): a node the Coalesce metadata says is a
view is counted with ``COUNT(*)`` (which runs the view's query), and a table the metadata reading finds to
be a view after all is reported as not measured, saying so, never passed. In ``count`` mode: ``COUNT(*)``
per table, where the metadata cannot be trusted. Either way the counts are parts of the checks run's one
measurement statement (``measure.py``), with the small keyed tables' keys.
"""

import fnmatch
from collections.abc import Hashable, Mapping, Sequence
from datetime import date

import dagster as dg
from sqlglot import exp

from dw_dagster.checks.history import Reading, Rebase, Recorded, volume_series
from dw_dagster.checks.judge import Judgement, deviation, judge, judgement_metadata
from dw_dagster.checks.keys import (
    KEYS_LOOKBACK_DAYS,
    KeyChange,
    key_change,
    keys_part,
    keys_reading,
    new_key_candidates,
    rows_series,
    rows_with_keys,
    unique_column,
)
from dw_dagster.checks.levels import LazyLineage
from dw_dagster.checks.measure import Binds, Part, quoted_table
from dw_dagster.checks.metrics import Bounds, MetricsFile
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.coalesce.metadata import CoalesceMetadataSet
from dw_dagster.sql import table_parts

VOLUME_CHECK = "volume"
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


def _is_view(spec: dg.AssetSpec) -> bool:
    """A node materialized as a view (``coalesce/materialization``): no row count in the metadata."""
    return CoalesceMetadataSet.extract(spec.metadata).materialization == "view"


def _from_run_results(
    instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey], run: CheckRun
) -> dict[dg.AssetKey, float]:
    """The row count the Coalesce run reported for each node whose latest materialization is that run's: the
    latest materializations of all ``keys`` in one read of the asset records (one query, not one a node)."""
    if run.coalesce_run_id is None or not keys:
        return {}
    found: dict[dg.AssetKey, float] = {}
    for record in instance.get_asset_records(list(keys)):
        event = record.asset_entry.last_materialization
        mat = event.asset_materialization if event else None
        if mat is None:
            continue
        built_by = mat.metadata.get(COALESCE_RUN_ID_METADATA)
        rows = mat.metadata.get("dagster/row_count")
        if built_by is not None and rows is not None and str(built_by.value) == run.coalesce_run_id:
            found[record.asset_entry.asset_key] = float(rows.value)
    return found


def _bounds_problem(count: float, bounds: Bounds | None) -> str | None:
    if bounds is None:
        return None
    if bounds.min is not None and count < bounds.min:
        return f"{count:,.0f} rows, below the minimum of {bounds.min:,.0f}"
    if bounds.max is not None and count > bounds.max:
        return f"{count:,.0f} rows, above the maximum of {bounds.max:,.0f}"
    return None


def volume_specs(metrics: MetricsFile, monitored: Sequence[dg.AssetKey]) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            name=VOLUME_CHECK,
            asset=key,
            description=f"Row count against a same-weekday robust baseline ({metrics.volume.row_counts} mode)",
        )
        for key in monitored
    ]


def _rows_in_metadata(database: str, schema: str, names: Sequence[str], binds: Binds) -> exp.Select:
    """``INFORMATION_SCHEMA.TABLES``' row count of tables of one schema, and their type: no scan."""
    return (
        exp.select(exp.column("TABLE_NAME"), exp.column("ROW_COUNT"), exp.column("TABLE_TYPE"))
        .from_(
            exp.table_("TABLES", db="INFORMATION_SCHEMA", catalog=exp.to_identifier(database, quoted=True))
        )
        .where(
            exp.column("TABLE_SCHEMA").eq(binds(schema)),
            exp.column("TABLE_NAME").isin(*(binds(n) for n in names)),
        )
    )


class Volumes:
    """The volume checks of one checks run: the row counts and small tables' keys to measure, and their
    judgement."""

    def __init__(
        self,
        metrics: MetricsFile,
        monitored: Mapping[dg.AssetKey, dg.AssetSpec],
        selected: Sequence[dg.AssetKey],
        lineage: LazyLineage,
    ):
        self.metrics = metrics
        self.config = metrics.volume
        self.monitored = monitored
        self.keys = [k for k in monitored if k in set(selected)]
        self.lineage = lineage
        self.keyed = {k: unique_column(monitored[k]) for k in self.keys}
        self.counts: dict[dg.AssetKey, tuple[float | None, str]] = {}
        """Each table's row count tonight (None: none could be read) and where it came from."""
        self.keys_read: dict[dg.AssetKey, list[tuple] | Exception] = {}

    def series(self, days: int) -> dict[str, int]:
        """The series these checks judge against -> how many nights back."""
        out = {volume_series(k.to_user_string()): days for k in self.keys}
        out.update({rows_series(k.to_user_string()): KEYS_LOOKBACK_DAYS for k in self.keys if self.keyed[k]})
        return out

    def _table(self, key: dg.AssetKey) -> tuple[str, str, str]:
        return _table(self.monitored[key])  # type: ignore[return-value]

    def _counted(self, key: dg.AssetKey, binds: Binds) -> exp.Select:
        """The query of a table's row count in this mode (a view's is always ``COUNT(*)``)."""
        if self._from_metadata(key):
            db, schema, name = self._table(key)
            return _rows_in_metadata(db, schema, [name], binds).select("ROW_COUNT", append=False)
        return exp.select(exp.Count(this=exp.Star())).from_(quoted_table(*self._table(key)))

    def _from_metadata(self, key: dg.AssetKey) -> bool:
        return self.config.row_counts == "metadata" and not _is_view(self.monitored[key])

    def _small(self, count: float | None) -> bool:
        return count is not None and count < self.config.baseline.small_below

    def parts(
        self,
        instance: dg.DagsterInstance,
        run: CheckRun,
        past: Mapping[str, Mapping[date, Recorded]],
        binds: Binds,
    ) -> list[Part]:
        """The row counts tonight does not know yet, and the keys of the small keyed tables: those the
        Coalesce run's count says are small, and those that were small last night, read only if they still
        are (by the count of the same source), so a table that grew is never read whole."""
        parts: list[Part] = []
        if self.config.row_counts == "metadata":
            for key, rows in _from_run_results(instance, self.keys, run).items():
                self.counts[key] = (rows, "coalesce_run_results")
            by_schema: dict[tuple[str, str], list[str]] = {}
            for key in self.keys:
                if key not in self.counts and self._from_metadata(key):
                    db, schema, name = self._table(key)
                    by_schema.setdefault((db, schema), []).append(name)
            parts += [
                Part(
                    ("metadata", db, schema), _rows_in_metadata(db, schema, names, binds), shape="table_rows"
                )
                for (db, schema), names in by_schema.items()
            ]
        parts += [
            Part(("count", k), self._counted(k, binds), shape="count")
            for k in self.keys
            if k not in self.counts and not self._from_metadata(k)
        ]
        for key, column in self.keyed.items():
            if column is None:
                continue
            if key in self.counts:
                if self._small(self.counts[key][0]):
                    parts.append(keys_part(key, self._table(key), column))
                continue
            recorded = past.get(volume_series(key.to_user_string()), {})
            if recorded and self._small(recorded[max(recorded)].value):
                still_small = self._counted(key, binds).subquery() < binds(self.config.baseline.small_below)
                parts.append(keys_part(key, self._table(key), column, only_if=still_small))
        return parts

    def take(self, measured: Mapping[Hashable, list[tuple] | Exception]) -> list[Part]:
        """Tonight's counts and keys from the night's statement; returns the keys still to read: of the
        tables small tonight that were not last night."""
        for (kind, *where), rows in measured.items():
            failed = f" ({type(rows).__name__}: {rows})" if isinstance(rows, Exception) else ""
            if kind == "metadata":
                found = {} if failed else {r[0]: (r[1], r[2]) for r in rows}  # type: ignore[union-attr]
                for key in self.keys:
                    db, schema, name = self._table(key)
                    if key not in self.counts and (db, schema) == tuple(where):
                        n, kind_of = found.get(name, (None, None))
                        source = "information_schema" + failed
                        if n is None and "VIEW" in str(kind_of or "").upper():
                            # Not counted: nothing told the checks it is a view (the node says "table").
                            source += f": a {kind_of}, which has no ROW_COUNT there"
                        self.counts[key] = (None if n is None else float(n), source)
            elif kind == "count":
                source = "count" if self.config.row_counts == "count" else "count (a view)"
                self.counts[where[0]] = (None, source + failed) if failed else (float(rows[0][0]), source)  # type: ignore[index]
        self.take_keys(measured)
        return [
            keys_part(k, self._table(k), column)
            for k, column in self.keyed.items()
            if column and k not in self.keys_read and self._small(self.counts[k][0])
        ]

    def take_keys(self, measured: Mapping[Hashable, list[tuple] | Exception]) -> None:
        for (kind, *where), rows in measured.items():
            # Keys read while the table was small tonight; a table that grew is not judged by its keys.
            if kind == "keys" and self._small(self.counts[where[0]][0]):
                self.keys_read[where[0]] = rows

    def evaluate(self, night: Night) -> tuple[list[dg.AssetCheckResult], list[str]]:
        """Each measured table judged (its count and keys recorded), and why the others could not be."""
        errors, measured = [], {}
        for key in self.keys:
            count, source = self.counts[key]
            if count is None:
                # The table is missing, or the metadata has no row count for it.
                table = self.monitored[key].metadata["dagster/table_name"]
                errors.append(f"volume of {key.to_user_string()}: no row count for {table} from {source}")
                continue
            measured[key] = (count, source)
            night.record(volume_series(key.to_user_string()), Reading(value=count, source=source))
        changes: dict[str, KeyChange] = {}
        for key, rows in self.keys_read.items():
            path = key.to_user_string()
            if isinstance(rows, Exception):
                # The keys only name the change; the count is judged anyway.
                night.context.log.warning(f"{path}: could not read its keys ({type(rows).__name__}: {rows})")
                continue
            column = self.keyed[key]
            raw, reading = keys_reading(column, rows)  # type: ignore[arg-type]
            night.record(rows_series(path), reading)
            changes[path] = key_change(column, raw, night.past[rows_series(path)])  # type: ignore[arg-type]
        results = [
            self._judge(night, self.monitored[k], count, source, changes)
            for k, (count, source) in measured.items()
        ]
        return results, errors

    def _judge(
        self, night: Night, spec: dg.AssetSpec, count: float, source: str, changes: Mapping[str, KeyChange]
    ) -> dg.AssetCheckResult:
        config, path = self.config, spec.key.to_user_string()
        past = night.past[volume_series(path)]
        levels = night.levels.get(volume_series(path), [])
        values = {d: r.value for d, r in past.items() if r.value is not None}
        excluded = night.excluded(past)

        def judged(rebases: Sequence[Rebase]) -> Judgement:
            return judge(
                values,
                night.day,
                count,
                config.baseline,
                calendar=self.metrics.calendar,
                excluded_days=excluded,
                rebases=rebases,
                share=night.share(path),
            )

        verdict = judged(levels)
        if verdict.severity == "ERROR" and verdict.result.direction == "up":
            explained = self._explained_by_new_keys(night, spec, count, values, excluded, levels, changes)
            if explained is not None:
                night.history.record_rebase(explained)
                verdict = judged([*levels, explained])
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
            night.flag(volume_series(path))
            summary = f"volume of {path}: " + "; ".join(problems)
            night.report(
                VOLUME_CHECK,
                path,
                summary,
                {
                    "row_count": count,
                    "rows_changed": named,
                    "baseline": verdict.result.model_dump(mode="json"),
                },
            )
            return dg.AssetCheckResult(
                check_name=VOLUME_CHECK,
                asset_key=key,
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description=summary,
                metadata=metadata,
            )
        if severity == "WARN":
            # A deviation the calendar explains: shown, never an incident, and the night trains its like days.
            return dg.AssetCheckResult(
                check_name=VOLUME_CHECK,
                asset_key=key,
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"volume of {path}: " + "; ".join(problems),
                metadata=metadata,
            )
        if verdict.insufficient and path not in config.bounds:
            return dg.AssetCheckResult(
                check_name=VOLUME_CHECK,
                asset_key=key,
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                metadata=metadata,
                description=f"insufficient baseline: {verdict.result.points} same-weekday nights, "
                f"{config.baseline.min_points} needed",
            )
        return dg.AssetCheckResult(
            check_name=VOLUME_CHECK,
            asset_key=key,
            passed=True,
            metadata=metadata,
            description=verdict.describe() or None,
        )

    def _explained_by_new_keys(
        self, night: Night, spec: dg.AssetSpec, count: float, values, excluded, levels, changes
    ) -> Rebase | None:
        """The growth is the rows of keys that appeared tonight in a small table upstream (a new key, mapped
        the same day), counted by the column that carries that table's key here: then it is the table's new
        level."""
        path = spec.key.to_user_string()
        candidates = new_key_candidates(self.lineage.graph(), path, changes)
        if not candidates:
            return None
        by_column: dict[str, dict[str, object]] = {}
        for _, change, column in candidates:
            by_column.setdefault(column, {}).update(change.appeared)
        rows, parts = 0, []
        try:
            with night.warehouse.tagged_connection(
                "check.volume.new_keys", **night.run.tag_fields(VOLUME_CHECK, path)
            ) as conn:
                for column, appeared in by_column.items():
                    n = rows_with_keys(conn.cursor(), _table(spec), column, list(appeared.values()))  # type: ignore[arg-type]
                    rows += n
                    where = [(a, ch.column) for a, ch, c in candidates if c == column]
                    # Named by the column counted when the key is called otherwise here.
                    by = "" if all(k == column for _, k in where) else f" (as {column} here)"
                    parts.append(
                        f"{', '.join(appeared)} new in {', '.join(a for a, _ in where)} tonight: {n:,} rows{by}"
                    )
        except Exception as e:  # noqa: BLE001 - no explanation then: the anomaly stands as measured
            night.context.log.warning(
                f"{path}: could not count the rows of tonight's new keys ({type(e).__name__}: {e})"
            )
            return None
        rest = judge(
            values,
            night.day,
            count - rows,
            self.config.baseline,
            calendar=self.metrics.calendar,
            excluded_days=excluded,
            rebases=levels,
            share=night.share(path),
        )
        if rows == 0 or rest.severity == "ERROR":
            return None
        return Rebase(
            series=volume_series(path), from_date=night.day, kind="explained", reason="; ".join(parts)
        )
