"""Durable nightly histories in the warehouse ops schema: recorded totals, row counts, accepted levels.

Re-recording a business date replaces its value (a rerun after a fix records the corrected total), and a
day flagged as an incident is kept but left out of every later baseline. An accepted level
(``BASELINE_LEVELS``) re-bases a series from its date: the nights before it are judged as if they had
been at the new level.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


class Recorded(BaseModel):
    business_date: date
    value: float | None
    groups: dict[str, float | None] = Field(default_factory=dict)
    """None: the group's value was NULL that night."""
    flagged: bool = False


class Rebase(BaseModel):
    """From ``from_date`` on, ``series`` is judged at the level it shows that night."""

    series: str
    """``volume:<asset>``, ``total:<name>`` or ``total:<name>|<group>``."""
    from_date: date
    kind: Literal["accepted", "explained", "remediation"]
    """accepted: an owner said so (``dw-dagster baseline accept``); explained: the check found the record
    explains it (new keys mapped); remediation: a verified fix changed it."""
    reason: str
    accepted_by: str | None = None
    recorded_at: datetime | None = None

    def describe(self) -> str:
        who = f" by {self.accepted_by}" if self.accepted_by else ""
        return f"new level from {self.from_date.isoformat()} ({self.kind}{who}): {self.reason}"


@dataclass
class FixedIncident:
    """An incident of an earlier night with a receipt: what a verified fix of it changed."""

    incident_id: str
    business_date: date
    updated_at: datetime
    verified: bool = False
    assets: set[str] = field(default_factory=set)


@dataclass
class NightContext:
    """What a checks step judges against besides the histories, read in one statement: the accepted levels,
    the business dates with an incident, and the incidents of earlier nights with a fix's receipt."""

    levels: dict[str, list[Rebase]]
    incident_days: set[date]
    fixed: list[FixedIncident]

    def with_levels(self, new: Sequence[Rebase], since: date) -> dict[str, list[Rebase]]:
        """The levels as ``rebases(since)`` reads them after ``new`` were recorded."""
        out = {s: list(rs) for s, rs in self.levels.items()}
        for r in new:
            if r.from_date >= since:
                out.setdefault(r.series, []).append(r)
        for rs in out.values():
            rs.sort(key=lambda r: r.from_date)
        return out


def volume_series(asset_key: str) -> str:
    return f"volume:{asset_key}"


def total_series(total: str, group: str | None = None) -> str:
    return f"total:{total}" + (f"|{group}" if group is not None else "")


class HistoryStore:
    """Reads and writes ``METRIC_HISTORY`` and ``VOLUME_HISTORY`` on one connection per use."""

    def __init__(self, warehouse: WarehouseResource, ops: OpsSchema, **tag_fields: Any):
        self.warehouse = warehouse
        self.ops = ops
        self.tag_fields = tag_fields

    @contextmanager
    def session(self, purpose: str) -> Iterator[HistorySession]:
        with self.ops.connect(self.warehouse, purpose, **self.tag_fields) as conn:
            yield HistorySession(conn, self.ops)


class HistorySession:
    def __init__(self, conn: Any, ops: OpsSchema):
        self.cur = conn.cursor()
        self.ops = ops

    def record_metric(
        self,
        metric: str,
        day: date,
        value: float | None,
        groups: Mapping[str, float | None],
        dagster_run_id: str | None,
        coalesce_run_id: str | None,
    ) -> None:
        self.record_metrics(day, {metric: (value, groups)}, dagster_run_id, coalesce_run_id)

    def record_metrics(
        self,
        day: date,
        values: Mapping[str, tuple[float | None, Mapping[str, float | None]]],
        dagster_run_id: str | None,
        coalesce_run_id: str | None,
    ) -> None:
        """Tonight's value and groups of each metric (``metric -> (value, groups)``) in one statement."""
        if not values:
            return
        now = datetime.now(UTC)
        rows = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(values))
        params = [
            v
            for metric, (value, groups) in values.items()
            for v in (metric, day, value, json.dumps(dict(groups)), now, dagster_run_id, coalesce_run_id)
        ]
        self.cur.execute(
            f"MERGE INTO {self.ops.table('METRIC_HISTORY')} t USING (SELECT column1 AS METRIC,"
            " column2::DATE AS BUSINESS_DATE, column3::FLOAT AS VALUE, column4 AS GROUPS,"
            " column5::TIMESTAMP_TZ AS RECORDED_AT, column6 AS DAGSTER_RUN_ID, column7 AS COALESCE_RUN_ID"
            f" FROM VALUES {rows}) s ON t.METRIC = s.METRIC AND t.BUSINESS_DATE = s.BUSINESS_DATE"
            " WHEN MATCHED THEN UPDATE SET VALUE = s.VALUE, GROUPS = s.GROUPS, RECORDED_AT = s.RECORDED_AT,"
            " DAGSTER_RUN_ID = s.DAGSTER_RUN_ID, COALESCE_RUN_ID = s.COALESCE_RUN_ID"
            " WHEN NOT MATCHED THEN INSERT (METRIC, BUSINESS_DATE, VALUE, GROUPS, RECORDED_AT, DAGSTER_RUN_ID,"
            " COALESCE_RUN_ID, FLAGGED) VALUES (s.METRIC, s.BUSINESS_DATE, s.VALUE, s.GROUPS, s.RECORDED_AT,"
            " s.DAGSTER_RUN_ID, s.COALESCE_RUN_ID, FALSE)",
            tuple(params),
        )

    def metric_history(self, metric: str, before: date, days: int) -> dict[date, Recorded]:
        return self.metric_histories([metric], before, days)[metric]

    def metric_histories(
        self, metrics: Sequence[str], before: date, days: int
    ) -> dict[str, dict[date, Recorded]]:
        """The history of every metric in ``metrics``, read in one statement."""
        rows = self._histories("METRIC_HISTORY", "METRIC", "VALUE, GROUPS, FLAGGED", metrics, before, days)
        return {
            metric: {
                _as_date(day): Recorded(
                    business_date=_as_date(day),
                    value=value,
                    groups=json.loads(groups or "{}"),
                    flagged=bool(flagged),
                )
                for day, value, groups, flagged in found
            }
            for metric, found in rows.items()
        }

    def _histories(
        self, table: str, key: str, columns: str, keys: Sequence[str], before: date, days: int
    ) -> dict[str, list[tuple]]:
        """``(BUSINESS_DATE, *columns)`` of each of ``keys`` in the ops ``table`` over the ``days`` before
        ``before``, in one statement."""
        out: dict[str, list[tuple]] = {k: [] for k in keys}
        if not out:
            return out
        self.cur.execute(
            f"SELECT {key}, BUSINESS_DATE, {columns} FROM {self.ops.table(table)}"
            f" WHERE {key} IN ({', '.join(['%s'] * len(out))}) AND BUSINESS_DATE < %s AND BUSINESS_DATE >= %s",
            (*out, before, before - timedelta(days=days)),
        )
        for r in self.cur.fetchall():
            out[r[0]].append(tuple(r[1:]))
        return out

    def flag_metric(self, metric: str, day: date, flagged: bool = True) -> None:
        self.cur.execute(
            f"UPDATE {self.ops.table('METRIC_HISTORY')} SET FLAGGED = %s WHERE METRIC = %s AND BUSINESS_DATE = %s",
            (flagged, metric, day),
        )

    def incident_days(self, since: date) -> set[date]:
        """Business dates with an incident (open or resolved): left out of every baseline, so neither the
        bad night nor the recovery after it trains or triggers anything."""
        self.cur.execute(
            f"SELECT DISTINCT BUSINESS_DATE FROM {self.ops.table('INCIDENTS')} WHERE BUSINESS_DATE >= %s",
            (since,),
        )
        return {_as_date(r[0]) for r in self.cur.fetchall() if r[0] is not None}

    def record_volumes(self, day: date, counts: Mapping[str, tuple[float | None, str]]) -> None:
        """Tonight's row count of each asset (``asset key -> (count, source)``) in one statement."""
        if not counts:
            return
        now = datetime.now(UTC)
        rows = ", ".join(["(%s, %s, %s, %s, %s)"] * len(counts))
        params = [v for key, (n, source) in counts.items() for v in (key, day, n, source, now)]
        self.cur.execute(
            f"MERGE INTO {self.ops.table('VOLUME_HISTORY')} t USING (SELECT column1 AS ASSET_KEY,"
            " column2::DATE AS BUSINESS_DATE, column3::FLOAT AS ROW_COUNT, column4 AS SOURCE,"
            f" column5::TIMESTAMP_TZ AS RECORDED_AT FROM VALUES {rows}) s"
            " ON t.ASSET_KEY = s.ASSET_KEY AND t.BUSINESS_DATE = s.BUSINESS_DATE"
            " WHEN MATCHED THEN UPDATE SET ROW_COUNT = s.ROW_COUNT, SOURCE = s.SOURCE, RECORDED_AT = s.RECORDED_AT"
            " WHEN NOT MATCHED THEN INSERT (ASSET_KEY, BUSINESS_DATE, ROW_COUNT, SOURCE, RECORDED_AT, FLAGGED)"
            " VALUES (s.ASSET_KEY, s.BUSINESS_DATE, s.ROW_COUNT, s.SOURCE, s.RECORDED_AT, FALSE)",
            tuple(params),
        )

    def volume_history(self, asset_key: str, before: date, days: int) -> dict[date, Recorded]:
        return self.volume_histories([asset_key], before, days)[asset_key]

    def volume_histories(
        self, asset_keys: Sequence[str], before: date, days: int
    ) -> dict[str, dict[date, Recorded]]:
        """The row-count history of every asset in ``asset_keys``, read in one statement."""
        rows = self._histories("VOLUME_HISTORY", "ASSET_KEY", "ROW_COUNT, FLAGGED", asset_keys, before, days)
        return {
            key: {
                _as_date(day): Recorded(business_date=_as_date(day), value=count, flagged=bool(flagged))
                for day, count, flagged in found
            }
            for key, found in rows.items()
        }

    def flag_volume(self, asset_key: str, day: date, flagged: bool = True) -> None:
        self.cur.execute(
            f"UPDATE {self.ops.table('VOLUME_HISTORY')} SET FLAGGED = %s WHERE ASSET_KEY = %s AND BUSINESS_DATE = %s",
            (flagged, asset_key, day),
        )

    def latest_metric(self, metric: str) -> Recorded | None:
        """The last night a total was recorded, whenever that was."""
        self.cur.execute(
            f"SELECT MAX(BUSINESS_DATE) FROM {self.ops.table('METRIC_HISTORY')} WHERE METRIC = %s", (metric,)
        )
        last = self.cur.fetchone()[0]
        return (
            None
            if last is None
            else self.metric_history(metric, _as_date(last) + timedelta(days=1), 1).get(_as_date(last))
        )

    def latest_volume(self, asset_key: str) -> date | None:
        self.cur.execute(
            f"SELECT MAX(BUSINESS_DATE) FROM {self.ops.table('VOLUME_HISTORY')} WHERE ASSET_KEY = %s",
            (asset_key,),
        )
        last = self.cur.fetchone()[0]
        return None if last is None else _as_date(last)

    def record_rebase(self, rebase: Rebase) -> bool:
        """Records an accepted level once per series and date (a re-tick changes nothing); returns whether
        it is new."""
        self.cur.execute(
            f"MERGE INTO {self.ops.table('BASELINE_LEVELS')} t USING (SELECT %s AS SERIES, %s AS FROM_DATE) s"
            " ON t.SERIES = s.SERIES AND t.FROM_DATE = s.FROM_DATE"
            " WHEN NOT MATCHED THEN INSERT (SERIES, FROM_DATE, KIND, REASON, ACCEPTED_BY, RECORDED_AT)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (rebase.series, rebase.from_date, rebase.series, rebase.from_date, rebase.kind, rebase.reason,
             rebase.accepted_by, datetime.now(UTC)),
        )  # fmt: skip
        return self.cur.rowcount > 0

    def night_context(self, since: date, day: date) -> NightContext:
        """The accepted levels from ``since`` on, the incident days from ``since`` on, and the incidents
        before ``day`` with a receipt (their receipts and findings), in one statement."""
        levels, incidents, events = (
            self.ops.table("BASELINE_LEVELS"),
            self.ops.table("INCIDENTS"),
            self.ops.table("INCIDENT_EVENTS"),
        )
        self.cur.execute(
            "SELECT 'level' AS ROW_KIND, SERIES AS NAME, FROM_DATE AS DAY, KIND, REASON, ACCEPTED_BY,"
            f" RECORDED_AT AS AT FROM {levels} WHERE FROM_DATE >= %s"
            " UNION ALL SELECT DISTINCT 'incident_day', CAST(NULL AS VARCHAR), BUSINESS_DATE,"
            " CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(NULL AS TIMESTAMP_TZ)"
            f" FROM {incidents} WHERE BUSINESS_DATE >= %s"
            " UNION ALL SELECT 'fix_event', i.INCIDENT_ID, i.BUSINESS_DATE, e.KIND, e.DETAIL,"
            f" CAST(NULL AS VARCHAR), i.UPDATED_AT FROM {incidents} i JOIN {events} e"
            " ON e.INCIDENT_ID = i.INCIDENT_ID AND e.KIND IN ('receipt', 'finding')"
            " WHERE i.BUSINESS_DATE < %s AND EXISTS (SELECT 1 FROM"
            f" {events} r WHERE r.INCIDENT_ID = i.INCIDENT_ID AND r.KIND = 'receipt')",
            (since, since, day),
        )
        ctx = NightContext(levels={}, incident_days=set(), fixed=[])
        fixed: dict[str, FixedIncident] = {}
        for kind, name, day_, sub, text, by, at in self.cur.fetchall():
            if kind == "level":
                ctx.levels.setdefault(name, []).append(_rebase(name, day_, sub, text, by, at))
            elif kind == "incident_day":
                if day_ is not None:
                    ctx.incident_days.add(_as_date(day_))
            else:
                incident = fixed.setdefault(name, FixedIncident(name, _as_date(day_), at))
                detail = json.loads(text or "{}")
                if sub == "receipt":
                    incident.verified = incident.verified or bool(detail.get("verified"))
                elif detail.get("asset_key") is not None:
                    incident.assets.add(detail["asset_key"])
        for rs in ctx.levels.values():
            rs.sort(key=lambda r: r.from_date)
        ctx.fixed = sorted(fixed.values(), key=lambda i: i.incident_id)
        return ctx

    def rebases(self, since: date) -> dict[str, list[Rebase]]:
        """Every accepted level from ``since`` on, by series, oldest first."""
        self.cur.execute(
            f"SELECT SERIES, FROM_DATE, KIND, REASON, ACCEPTED_BY, RECORDED_AT FROM {self.ops.table('BASELINE_LEVELS')}"
            " WHERE FROM_DATE >= %s ORDER BY FROM_DATE",
            (since,),
        )
        out: dict[str, list[Rebase]] = {}
        for r in self.cur.fetchall():
            out.setdefault(r[0], []).append(_rebase(*r))
        return out


def _rebase(
    series: str, from_date: Any, kind: str, reason: str, accepted_by: str | None, recorded_at: Any
) -> Rebase:
    """A ``BASELINE_LEVELS`` row, in its column order."""
    return Rebase(series=series, from_date=_as_date(from_date), kind=kind, reason=reason, accepted_by=accepted_by,
                  recorded_at=recorded_at)  # fmt: skip


def _as_date(v: Any) -> date:
    return v.date() if isinstance(v, datetime) else v
