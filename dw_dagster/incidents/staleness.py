"""Stale input, per source table: which table stopped receiving rows, and how long before the build.

Every Source table upstream of the asset is read once, reference tables included, in one statement: for
each of its time columns, the latest value and on how many distinct days it was loaded. A table loaded on
several days (replicated, appended) whose latest row is older than the allowed input age stopped; a table
loaded once (a hand-kept map, a catalogue loaded at set-up) is not stale for being old, unless a freshness
rule of the metrics file names it. Time columns are read as UTC, as replication stamps are; a column in
local time shifts an age by the zone's offset, which is far inside a day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dw_dagster.coalesce.sql import quote_identifier
from dw_dagster.incidents.evidence import DiagnosisContext, replication_of
from dw_dagster.incidents.structure import sources_upstream, table, time_columns

LIVE_DAYS = 3
"""A table loaded on at least this many distinct days of the last ``LIVE_WINDOW_DAYS`` before the build is
fed continuously (not a one-off load, not a map edited now and then)."""
LIVE_WINDOW_DAYS = 14
DEFAULT_MAX_AGE_HOURS = 26.0


@dataclass
class SourceAge:
    asset: str
    column: str
    latest: datetime | None
    load_days: int
    age_hours: float | None
    stale: bool

    @property
    def shown(self) -> str:
        if self.latest is None:
            return f"{self.asset} has no rows"
        return f"{self.asset} (latest {self.column} {self.latest:%Y-%m-%d %H:%M}, {self.age_hours:.1f} h before the build)"


def _utc(v: object) -> datetime | None:
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if hasattr(v, "year") and hasattr(v, "month"):
        return datetime(v.year, v.month, v.day, tzinfo=UTC)  # type: ignore[attr-defined]
    return None


def source_ages(ctx: DiagnosisContext, asset: str, built_at: datetime) -> list[SourceAge]:
    """The age of every Source table upstream of ``asset`` at ``built_at`` (one statement)."""
    parts, meta, params = [], [], []
    since = built_at - timedelta(days=LIVE_WINDOW_DAYS)
    rules = {r.input: r for r in ctx.metrics.freshness.inputs}
    for key in sources_upstream(ctx.graph, asset):
        tbl = table(ctx.graph, key)
        columns = [rules[key].input_column] if key in rules else time_columns(ctx.graph, key)
        for c in columns:
            q = quote_identifier(c)
            parts.append(
                f"SELECT {len(meta)} AS I, MAX(CAST({q} AS TIMESTAMP)) AS LATEST,"
                f" COUNT(DISTINCT CASE WHEN CAST({q} AS TIMESTAMP) >= %s THEN CAST({q} AS DATE) END) AS DAYS"
                f" FROM {tbl}"
            )
            params.append(since.replace(tzinfo=None))
            meta.append((key, c))
    if not parts:
        return []
    rows = ctx.rows(
        f"the latest row of each source table upstream of {asset}", "\nUNION ALL\n".join(parts), tuple(params)
    )
    best: dict[str, SourceAge] = {}
    for i, latest, days in rows or []:
        key, column = meta[int(i)]
        when = _utc(latest)
        age = (built_at - when).total_seconds() / 3600 if when else None
        rule = rules.get(key)
        limit = rule.max_input_age_hours if rule else DEFAULT_MAX_AGE_HOURS
        live = rule is not None or int(days or 0) >= LIVE_DAYS
        found = SourceAge(
            key, column, when, int(days or 0), age, live and (when is None or (age or 0) > limit)
        )
        # A table's latest row is its latest across its time columns.
        if key not in best or (when and (best[key].latest is None or when > best[key].latest)):
            best[key] = found
    return list(best.values())


def stopped(ctx: DiagnosisContext, asset: str, built_at: datetime) -> list[SourceAge]:
    return [a for a in source_ages(ctx, asset, built_at) if a.stale]


def feeding_systems(ctx: DiagnosisContext, keys: list[str]) -> list[str]:
    """The systems that feed the stopped tables (a replication task, a hand-kept sheet)."""
    return list(dict.fromkeys(s for k in keys for s in replication_of(ctx, k)))
