"""The Elementary baseline: what Elementary 0.25.1 (the dbt package elementary-data/dbt-data-reliability at
0.25.1, commit ccb0de34) raises on the same nights with its defaults, configured as a team with the same
metrics file would configure it, scored in the same run as dw-dagster (``docs/scenarios.md``, "The
baseline"). Line references below are to that package.

**The monitors** (what the metrics file asks for, as Elementary tests):

- ``volume_anomalies`` on each table the metrics file watches for volume: its row count, the series
  ``volume:<asset>`` dw-dagster records each night;
- ``column_anomalies: [sum]`` on each recorded total: the total, the series ``<total>``;
- the same with ``dimensions:`` the total's group keys (``column_anomalies`` takes ``dimensions``,
  ``macros/edr/tests/test_column_anomalies.sql:21``): each group's sum, from the groups recorded each night.
  Elementary's ``dimension_anomalies`` counts rows per group instead; no night records a group's rows, so
  the group keys are monitored on the sum, the number the metrics file records for them;
- ``column_anomalies: [null_percent]`` on each column the pipeline joins on (the left side of every join),
  traced back to the source table the metrics file watches for freshness, with that rule's column as
  ``timestamp_column``: daily buckets read from the source itself, which keeps every day's rows;
- dbt source freshness on each freshness input (``loaded_at_field`` its column, ``error_after`` its
  ``max_input_age_hours``), whose errors Elementary alerts on (``disable_source_freshness_alerts: false``,
  ``macros/edr/system/system_utils/get_config_var.sql:123``);
- ``schema_changes`` on every source and every watched table: columns added, removed or retyped since the
  previous run.

Elementary runs with the job: a night with no Coalesce run runs none of it, and a table the night did not
build (a failed node, or downstream of one) is not tested, as ``dbt build`` skips the tests of a model that
did not build. Its alerts on failed runs and failed tests themselves are not modelled.

**The anomaly score** (``macros/edr/data_monitoring/anomaly_detection/get_anomaly_scores_query.sql``):
``(metric_value - training_avg) / training_stddev``, the average and the sample standard deviation
(``stddev``, ``macros/edr/data_monitoring/monitors/column_numeric_monitors.sql:49``) over the training
window's points **up to and including the scored one** (``rows between unbounded preceding and current
row``, lines 237-241); no score with one point (line 266), 0 when the deviation is 0 (line 267). A point is
anomalous when ``|z| > anomaly_sensitivity``, both directions by default
(``macros/edr/tests/test_utils/get_anomaly_query.sql:176-201``; only freshness anomaly metrics are judged on
the late side, and the freshness monitored here is dbt's source freshness, a fixed threshold).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from statistics import mean, stdev
from typing import Any

from dw_dagster.checks.history import volume_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.joins import JoinParseError
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.joins import parse_joins
from dw_dagster.sql import quote_identifier
from dw_dagster.warehouse.ops import OpsSchema

NAME = "Elementary 0.25.1 defaults"

DAYS_BACK = 14
"""``days_back`` (``get_config_var.sql:115``): the window reaches back to the start of the day 14 days before
the run (``get_buckets_configuration.sql:13-24``) and keeps points with ``bucket_end`` after it
(``get_anomaly_scores_query.sql:133``). A test without a timestamp column records one point per run at the
run's time, so a run every night trains on 15: the run 14 days ago ran after that midnight."""
ANOMALY_SENSITIVITY = 3.0
"""``anomaly_sensitivity`` (``get_config_var.sql:116``)."""
BACKFILL_DAYS = 2
"""``backfill_days`` (``get_config_var.sql:117``), the default detection period: a point is flagged only if
its ``bucket_end`` is after the latest one's minus 2 days (``get_anomaly_query.sql:136``), so each run scores
the previous night's point again, on the window as it stands tonight; and the test failing again alerts
again: ``edr monitor`` suppresses repeats for ``alert_suppression_interval`` hours, 0 by default (elementary
0.25, ``elementary/monitor/data_monitoring/alerts/data_monitoring_alerts.py:112``)."""
MIN_POINTS = 2
"""``min_training_set_size`` (7, ``get_config_var.sql:144``) has not been applied since commit 279d49ec
("remove min_training_set_size", 2023): any training set of more than one point is scored."""


@dataclass(frozen=True)
class BaselineAlarm:
    monitor: str
    """The Elementary test: ``volume_anomalies``, ``column_anomalies(sum)``, ``column_anomalies(sum) by KEYS``,
    ``column_anomalies(null_percent)``, ``source_freshness`` or ``schema_changes``."""
    series: str
    asset: str
    value: float | None
    recorded_at: datetime
    mean: float | None = None
    stddev: float | None = None
    z: float | None = None
    rescored: bool = False
    """The previous night's point, scored again in tonight's detection period: a repeat, not tonight's news."""
    detail: str = ""


def z_score(values: Sequence[float], value: float) -> tuple[float, float, float] | None:
    """(training_avg, training_stddev, z) of ``value`` with the points before it in its window ``values``:
    the scored value is in its own training set; None with one point."""
    window = [*values, value]
    if len(window) < MIN_POINTS:
        return None
    centre, spread = mean(window), stdev(window)
    return centre, spread, (0.0 if spread == 0 else (value - centre) / spread)


def detection_scores(
    points: Sequence[tuple[date, float]], tonight: date
) -> list[tuple[date, float, Any, bool]]:
    """Each point of the detection period (the last ``BACKFILL_DAYS`` days of ``points``, the window's scored
    points) with its score on the points up to it, and whether it is an earlier point than ``tonight``'s."""
    ordered = sorted(points)
    if not ordered:
        return []
    last = ordered[-1][0]
    return [
        (day, value, z_score([v for _, v in ordered[:i]], value), day != tonight)
        for i, (day, value) in enumerate(ordered)
        if day > last - timedelta(days=BACKFILL_DAYS)
    ]


def run_window(day: date) -> date:
    """The first business date a test without a timestamp column trains on, for tonight's run of ``day``."""
    return day - timedelta(days=DAYS_BACK)


def bucket_window(detection_end: datetime) -> tuple[datetime, datetime]:
    """[first bucket's start, last complete bucket's end) of daily buckets for a run at ``detection_end``
    (naive UTC): from the start of the day ``DAYS_BACK`` days before; only buckets ended by the run count."""
    end = detection_end.replace(hour=0, minute=0, second=0, microsecond=0)
    return end - timedelta(days=DAYS_BACK), end


def anomalous(score: tuple[float, float, float] | None) -> bool:
    """Both directions (``anomaly_direction: both``)."""
    return score is not None and abs(score[2]) > ANOMALY_SENSITIVITY


def schema_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What ``schema_changes`` reports between two snapshots of a table (column -> type)."""
    out = [f"column {c} added" for c in after if c not in before]
    out += [f"column {c} removed" for c in before if c not in after]
    out += [
        f"column {c} type changed {before[c]} -> {after[c]}"
        for c in after
        if c in before and before[c] != after[c]
    ]
    return out


class ElementaryBaseline:
    """The Elementary tests a team with ``metrics`` would run on the pipeline ``graph`` describes, and what
    they raise each night. It keeps the schemas of the previous run (``snapshot``) as Elementary does."""

    def __init__(
        self, metrics: MetricsFile, ops: OpsSchema, graph: LineageGraph, volume_assets: Iterable[str]
    ):
        self.metrics, self.ops, self.graph = metrics, ops, graph
        self.volumes = {volume_series(a): a for a in volume_assets}
        self.totals = {t.name: t for t in metrics.totals}
        self.inputs: dict[str, tuple[str, float]] = {}
        """Input asset -> (its freshness column, the tightest max_input_age_hours on it)."""
        for rule in metrics.freshness.inputs:
            column, hours = self.inputs.get(rule.input, (rule.input_column, rule.max_input_age_hours))
            self.inputs[rule.input] = (column, min(hours, rule.max_input_age_hours))
        self.join_keys = _join_keys(graph, self.inputs)
        sources = [k for k in graph.assets if graph.info(k).node_type == "Source"]
        watched = {*sources, *self.volumes.values(), *(t.asset for t in metrics.totals)}
        self.tables = {
            k: graph.info(k).table_name for k in sorted(watched) if k in graph and graph.info(k).table_name
        }
        self.schemas: dict[str, dict[str, str]] | None = None

    def snapshot(self, cur: Any) -> None:
        """Records the schemas as they stand: the previous run's, for the next ``alarms``."""
        self.schemas = self._schemas(cur)

    def alarms(
        self, cur: Any, day: date, detection_end: datetime, ran_at: datetime, untested: set[str]
    ) -> list[BaselineAlarm]:
        """What the night's run of the tests raises: business date ``day``, run at ``detection_end``;
        ``untested``: tables not built tonight. An alarm read from a recorded point carries the time it was
        recorded; the others are stamped at ``ran_at`` (the job's end) plus the time their tests took."""
        started = time.monotonic()
        end = detection_end.astimezone(UTC).replace(tzinfo=None)
        found = self._null_rate_alarms(cur, end, ran_at)
        found += self._freshness_alarms(cur, end, ran_at)
        found += self._schema_alarms(cur, ran_at, untested)
        stamp = ran_at + timedelta(seconds=time.monotonic() - started)
        return self._metric_alarms(cur, day, untested) + [replace(a, recorded_at=stamp) for a in found]

    # -- the series dw-dagster records: volume, sums, sums by group --------------------------------

    def _metric_alarms(self, cur: Any, day: date, untested: set[str]) -> list[BaselineAlarm]:
        names = [*self.totals, *self.volumes]
        if not names:
            return []
        cur.execute(
            f"SELECT METRIC, BUSINESS_DATE, VALUE, GROUPS, RECORDED_AT FROM {self.ops.table('METRIC_HISTORY')}"
            f" WHERE METRIC IN ({', '.join(['%s'] * len(names))}) AND BUSINESS_DATE BETWEEN %s AND %s",
            (*names, run_window(day), day),
        )
        series: dict[tuple[str, str, str], dict[date, tuple[float | None, datetime]]] = {}
        for metric, d, value, groups, at in cur.fetchall():
            d = d.date() if isinstance(d, datetime) else d
            if metric in self.volumes:
                series.setdefault(("volume_anomalies", metric, self.volumes[metric]), {})[d] = (value, at)
                continue
            total = self.totals[metric]
            series.setdefault(("column_anomalies(sum)", metric, total.asset), {})[d] = (value, at)
            by = f"column_anomalies(sum) by {', '.join(total.group_keys)}"
            for label, v in json.loads(groups or "{}").items():
                series.setdefault((by, f"{metric}|{label}", total.asset), {})[d] = (v, at)
        out = []
        for (monitor, name, asset), points in series.items():
            # The test ran tonight if the table was built; a NULL metric is not scored.
            if day not in points or asset in untested:
                continue
            scored = [(d, float(v)) for d, (v, _) in points.items() if v is not None]
            for d, value, score, rescored in detection_scores(scored, day):
                if anomalous(score):
                    out.append(
                        BaselineAlarm(monitor, name, asset, value, points[d][1], *score, rescored=rescored)
                    )
        return out

    # -- null rate of the join keys, daily buckets read from the source ---------------------------

    def _null_rate_alarms(self, cur: Any, end: datetime, ran_at: datetime) -> list[BaselineAlarm]:
        first, last = bucket_window(end)
        out = []
        for asset, columns in self.join_keys.items():
            stamp = self.inputs[asset][0]
            nulls = ", ".join(
                f"SUM(CASE WHEN {quote_identifier(c)} IS NULL THEN 1 ELSE 0 END)" for c in columns
            )
            cur.execute(
                f"SELECT CAST({quote_identifier(stamp)} AS DATE), COUNT(*), {nulls} FROM {_table(self.tables, asset, self.graph)}"
                f" WHERE {quote_identifier(stamp)} >= %s AND {quote_identifier(stamp)} < %s"
                f" GROUP BY CAST({quote_identifier(stamp)} AS DATE)",
                (first, last),
            )
            rows = cur.fetchall()
            for i, column in enumerate(columns):
                points = [(_day(r[0]), 100.0 * float(r[2 + i]) / r[1]) for r in rows if r[1]]
                for d, value, score, rescored in detection_scores(points, last.date() - timedelta(days=1)):
                    if anomalous(score):
                        out.append(
                            BaselineAlarm("column_anomalies(null_percent)", f"{asset}.{column}", asset, value,
                                          ran_at, *score, rescored=rescored, detail=f"bucket {d}")
                        )  # fmt: skip
        return out

    # -- source freshness ------------------------------------------------------------------------

    def _freshness_alarms(self, cur: Any, end: datetime, ran_at: datetime) -> list[BaselineAlarm]:
        if not self.inputs:
            return []
        parts = [
            f"SELECT %s, MAX({quote_identifier(column)}) FROM {_table(self.tables, asset, self.graph)}"
            for asset, (column, _) in self.inputs.items()
        ]
        cur.execute(" UNION ALL ".join(parts), tuple(self.inputs))
        out = []
        for asset, latest in cur.fetchall():
            column, hours = self.inputs[asset]
            latest = (
                latest.astimezone(UTC).replace(tzinfo=None) if getattr(latest, "tzinfo", None) else latest
            )
            age = None if latest is None else (end - latest).total_seconds() / 3600
            if age is None or age > hours:
                shown = "no rows" if age is None else f"{age:.1f} h old"
                out.append(
                    BaselineAlarm("source_freshness", f"{asset}.{column}", asset, age, ran_at,
                                  detail=f"{shown} (error_after {hours:g} h)")
                )  # fmt: skip
        return out

    # -- schema changes --------------------------------------------------------------------------

    def _schemas(self, cur: Any) -> dict[str, dict[str, str]]:
        by_db: dict[str, set[str]] = {}
        for table in self.tables.values():
            db, schema, _ = table.split(".")
            by_db.setdefault(db, set()).add(schema)
        found: dict[str, dict[str, str]] = {}
        for db, schemas in by_db.items():
            cur.execute(
                f"SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE FROM {quote_identifier(db)}.INFORMATION_SCHEMA.COLUMNS"
                f" WHERE TABLE_SCHEMA IN ({', '.join(['%s'] * len(schemas))}) ORDER BY ORDINAL_POSITION",
                tuple(sorted(schemas)),
            )
            for schema, name, column, data_type in cur.fetchall():
                found.setdefault(f"{db}.{schema}.{name}", {})[column] = str(data_type)
        return {asset: found.get(table, {}) for asset, table in self.tables.items()}

    def _schema_alarms(self, cur: Any, ran_at: datetime, untested: set[str]) -> list[BaselineAlarm]:
        now = self._schemas(cur)
        before, self.schemas = self.schemas, now
        if before is None:  # Elementary's first run records the snapshot and reports nothing
            return []
        out = []
        for asset, columns in now.items():
            changes = schema_changes(before.get(asset, {}), columns)
            if changes and asset not in untested:
                out.append(
                    BaselineAlarm(
                        "schema_changes", asset, asset, len(changes), ran_at, detail="; ".join(changes)
                    )
                )
        return out


def _day(value: Any) -> date:
    return value.date() if isinstance(value, datetime) else value


def _table(tables: dict[str, str], asset: str, graph: LineageGraph) -> str:
    name = tables.get(asset) or graph.info(asset).table_name
    return ".".join(quote_identifier(p) for p in name.split("."))


def _join_keys(graph: LineageGraph, inputs: dict[str, tuple[str, float]]) -> dict[str, list[str]]:
    """Input asset -> the columns of it that a join's left side reads, through column lineage."""
    out: dict[str, list[str]] = {}
    for key in graph.assets:
        text = graph.info(key).join
        if not text:
            continue
        try:
            joins = parse_joins(
                text, lambda loc, name: f"{quote_identifier(loc)}.{quote_identifier(name)}", key
            )
        except JoinParseError:
            continue  # a join text no parser reads: no key to monitor, as a team would list none
        for join in joins:
            left = "/".join(re.findall(r'"((?:[^"]|"")*)"', join.left_table)).lower()
            for column, _ in join.on:
                for asset in inputs:
                    traced = graph.trace_column((left, column), asset) if left in graph else None
                    if traced and traced[1] not in out.setdefault(asset, []):
                        out[asset].append(traced[1])
    return {a: cs for a, cs in out.items() if cs}
