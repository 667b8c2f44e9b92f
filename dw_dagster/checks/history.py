"""Durable nightly histories in the warehouse ops schema: recorded totals, row counts, accepted levels.

Every series a check keeps is one history table, ``METRIC_HISTORY``, one row per series and business date:
a recorded total under its name, a table's row count as ``volume:<asset>``, a small table's keys as
``rows:<asset>`` (``keys.py``), a node's credits as ``cost:<asset>``. So a checks run reads everything it
judges against in one statement (``night_context``) and writes its night in one (``record_night``).
Re-recording a business date replaces its value (a rerun after a fix records the corrected total), and a
day flagged as an incident is kept but left out of every later baseline. An accepted level
(``BASELINE_LEVELS``) re-bases a series from its date: the nights before it are judged as if they had
been at the new level.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from dw_dagster.sql import placeholders
from dw_dagster.warehouse.connections import Connections
from dw_dagster.warehouse.ops import OpsSchema


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


class Reading(BaseModel):
    """Tonight's value of a series, as ``record_night`` writes it."""

    value: float | None
    groups: dict[str, float | None] | None = None
    source: str | None = None
    """Where a row count came from (``count``, ``coalesce_run_results``, ``information_schema``)."""
    flagged: bool = False
    """Tonight is an incident's night: kept, and left out of every later baseline."""


@dataclass
class NightContext:
    """What a checks run judges against, read in one statement: the accepted levels, the business dates
    with an incident, the incidents of earlier nights with a fix's receipt, and each series' history."""

    levels: dict[str, list[Rebase]]
    incident_days: set[date]
    fixed: list[FixedIncident]
    past: dict[str, dict[date, Recorded]] = field(default_factory=dict)
    """Each series read (``night_context(histories=...)``) -> its recorded nights before tonight."""

    def with_levels(self, new: Sequence[Rebase], since: date) -> dict[str, list[Rebase]]:
        """The levels as ``rebases(since)`` reads them after ``new`` were recorded."""
        out = {s: list(rs) for s, rs in self.levels.items()}
        for r in new:
            if r.from_date >= since:
                out.setdefault(r.series, []).append(r)
        for rs in out.values():
            rs.sort(key=lambda r: r.from_date)
        return out


def left_out(past: Mapping[date, Recorded], incident_days: Collection[date]) -> set[date]:
    """The nights left out of a series' baselines: those it flagged (an incident's night for it), and the
    nights of incidents on record."""
    return {d for d, r in past.items() if r.flagged} | set(incident_days)


def volume_series(asset_key: str) -> str:
    return f"volume:{asset_key}"


def total_series(total: str, group: str | None = None) -> str:
    return f"total:{total}" + (f"|{group}" if group is not None else "")


def input_load_series(input_asset: str) -> str:
    """An input's latest load (epoch seconds), night by night: the nights it advances are its cadence."""
    return f"input_load:{input_asset}"


def group_rows_series(total: str) -> str:
    """A grouped total's rows by group (its SQL's ``ROWS``), night by night."""
    return f"group_rows:{total}"


class HistoryStore:
    """Reads and writes the histories on one connection per use."""

    def __init__(self, warehouse: Connections, ops: OpsSchema, **tag_fields: Any):
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
        self.record_night(
            day, {metric: Reading(value=value, groups=dict(groups))}, dagster_run_id, coalesce_run_id
        )

    def record_night(
        self,
        day: date,
        readings: Mapping[str, Reading],
        dagster_run_id: str | None,
        coalesce_run_id: str | None,
    ) -> None:
        """Tonight's reading of each series in one statement. A series recorded again for the same night is
        replaced, and a night once flagged stays flagged."""
        if not readings:
            return
        now = datetime.now(UTC)
        rows = ", ".join([f"({placeholders(9)})"] * len(readings))
        params = [
            v
            for series, r in readings.items()
            for v in (
                series,
                day,
                r.value,
                None if r.groups is None else json.dumps(r.groups),
                r.source,
                now,
                dagster_run_id,
                coalesce_run_id,
                r.flagged,
            )
        ]
        self.cur.execute(
            f"MERGE INTO {self.ops.table('METRIC_HISTORY')} t USING (SELECT column1 AS METRIC,"
            " column2::DATE AS BUSINESS_DATE, column3::FLOAT AS VALUE, column4 AS GROUPS, column5 AS SOURCE,"
            " column6::TIMESTAMP_TZ AS RECORDED_AT, column7 AS DAGSTER_RUN_ID, column8 AS COALESCE_RUN_ID,"
            f" column9::BOOLEAN AS FLAGGED FROM VALUES {rows}) s"
            " ON t.METRIC = s.METRIC AND t.BUSINESS_DATE = s.BUSINESS_DATE"
            " WHEN MATCHED THEN UPDATE SET VALUE = s.VALUE, GROUPS = s.GROUPS, SOURCE = s.SOURCE,"
            " RECORDED_AT = s.RECORDED_AT, DAGSTER_RUN_ID = s.DAGSTER_RUN_ID, COALESCE_RUN_ID = s.COALESCE_RUN_ID,"
            " FLAGGED = t.FLAGGED OR s.FLAGGED"
            " WHEN NOT MATCHED THEN INSERT (METRIC, BUSINESS_DATE, VALUE, GROUPS, SOURCE, RECORDED_AT,"
            " DAGSTER_RUN_ID, COALESCE_RUN_ID, FLAGGED) VALUES (s.METRIC, s.BUSINESS_DATE, s.VALUE, s.GROUPS,"
            " s.SOURCE, s.RECORDED_AT, s.DAGSTER_RUN_ID, s.COALESCE_RUN_ID, s.FLAGGED)",
            tuple(params),
        )

    def metric_history(self, metric: str, before: date, days: int) -> dict[date, Recorded]:
        return self.metric_histories([metric], before, days)[metric]

    def metric_histories(
        self, metrics: Sequence[str], before: date, days: int
    ) -> dict[str, dict[date, Recorded]]:
        """The history of every series in ``metrics``, read in one statement."""
        out: dict[str, dict[date, Recorded]] = {m: {} for m in metrics}
        if not out:
            return out
        self.cur.execute(
            f"SELECT METRIC, BUSINESS_DATE, VALUE, GROUPS, FLAGGED FROM {self.ops.table('METRIC_HISTORY')}"
            f" WHERE METRIC IN ({placeholders(len(out))}) AND BUSINESS_DATE < ? AND BUSINESS_DATE >= ?",
            (*out, before, before - timedelta(days=days)),
        )
        for metric, day, value, groups, flagged in self.cur.fetchall():
            out[metric][_as_date(day)] = _recorded(day, value, groups, flagged)
        return out

    def flag_metric(self, metric: str, day: date, flagged: bool = True) -> None:
        self.cur.execute(
            f"UPDATE {self.ops.table('METRIC_HISTORY')} SET FLAGGED = ? WHERE METRIC = ? AND BUSINESS_DATE = ?",
            (flagged, metric, day),
        )

    def incident_days(self, since: date) -> set[date]:
        """Business dates with an incident (open or resolved): left out of every baseline, so neither the
        bad night nor the recovery after it trains or triggers anything."""
        self.cur.execute(
            f"SELECT DISTINCT BUSINESS_DATE FROM {self.ops.table('INCIDENTS')} WHERE BUSINESS_DATE >= ?",
            (since,),
        )
        return {_as_date(r[0]) for r in self.cur.fetchall() if r[0] is not None}

    def volume_history(self, asset_key: str, before: date, days: int) -> dict[date, Recorded]:
        return self.metric_history(volume_series(asset_key), before, days)

    def flag_volume(self, asset_key: str, day: date, flagged: bool = True) -> None:
        self.flag_metric(volume_series(asset_key), day, flagged)

    def latest_metric(self, metric: str) -> Recorded | None:
        """The last night a series was recorded, whenever that was."""
        self.cur.execute(
            f"SELECT MAX(BUSINESS_DATE) FROM {self.ops.table('METRIC_HISTORY')} WHERE METRIC = ?", (metric,)
        )
        last = self.cur.fetchone()[0]
        return (
            None
            if last is None
            else self.metric_history(metric, _as_date(last) + timedelta(days=1), 1).get(_as_date(last))
        )

    def latest_volume(self, asset_key: str) -> date | None:
        last = self.latest_metric(volume_series(asset_key))
        return None if last is None else last.business_date

    def record_rebase(self, rebase: Rebase) -> bool:
        """Records an accepted level once per series and date (a re-tick changes nothing); returns whether
        it is new."""
        self.cur.execute(
            f"MERGE INTO {self.ops.table('BASELINE_LEVELS')} t USING (SELECT ? AS SERIES, ? AS FROM_DATE) s"
            " ON t.SERIES = s.SERIES AND t.FROM_DATE = s.FROM_DATE"
            " WHEN NOT MATCHED THEN INSERT (SERIES, FROM_DATE, KIND, REASON, ACCEPTED_BY, RECORDED_AT)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                rebase.series,
                rebase.from_date,
                rebase.series,
                rebase.from_date,
                rebase.kind,
                rebase.reason,
                rebase.accepted_by,
                datetime.now(UTC),
            ),
        )
        return self.cur.rowcount > 0

    def night_context(
        self, since: date, day: date, histories: Mapping[str, date] | None = None
    ) -> NightContext:
        """In one statement: the accepted levels and the incident days from ``since`` on, the incidents before
        ``day`` with a receipt (their receipts and findings), and the history of each series in
        ``histories`` (series -> the first night to read) up to the night before ``day``."""
        levels, incidents, events, history = (
            self.ops.table("BASELINE_LEVELS"),
            self.ops.table("INCIDENTS"),
            self.ops.table("INCIDENT_EVENTS"),
            self.ops.table("METRIC_HISTORY"),
        )
        null = "CAST(NULL AS VARCHAR)"
        sql = (
            "SELECT 'level' AS ROW_KIND, SERIES AS NAME, FROM_DATE AS DAY, KIND, REASON AS TEXT, ACCEPTED_BY,"
            " RECORDED_AT AS AT, CAST(NULL AS DOUBLE) AS VALUE, CAST(NULL AS BOOLEAN) AS FLAGGED"
            f" FROM {levels} WHERE FROM_DATE >= ?"
            f" UNION ALL SELECT DISTINCT 'incident_day', {null}, BUSINESS_DATE, {null}, {null}, {null},"
            f" CAST(NULL AS TIMESTAMP_TZ), NULL, NULL FROM {incidents} WHERE BUSINESS_DATE >= ?"
            " UNION ALL SELECT 'fix_event', i.INCIDENT_ID, i.BUSINESS_DATE, e.KIND, e.DETAIL,"
            f" {null}, i.UPDATED_AT, NULL, NULL FROM {incidents} i JOIN {events} e"
            " ON e.INCIDENT_ID = i.INCIDENT_ID AND e.KIND IN ('receipt', 'finding')"
            " WHERE i.BUSINESS_DATE < ? AND EXISTS (SELECT 1 FROM"
            f" {events} r WHERE r.INCIDENT_ID = i.INCIDENT_ID AND r.KIND = 'receipt')"
        )
        params: list[Any] = [since, since, day]
        by_first: dict[date, list[str]] = {}
        for series, first in (histories or {}).items():
            by_first.setdefault(first, []).append(series)
        if by_first:
            which = " OR ".join(
                f"(METRIC IN ({placeholders(len(names))}) AND BUSINESS_DATE >= ?)"
                for names in by_first.values()
            )
            # SOURCE is not used here: an ops schema older than this dw-dagster fails on it at once (the
            # step then says to migrate), before anything is judged.
            sql += (
                f" UNION ALL SELECT 'history', METRIC, BUSINESS_DATE, SOURCE, GROUPS, {null},"
                f" CAST(NULL AS TIMESTAMP_TZ), VALUE, FLAGGED FROM {history} WHERE BUSINESS_DATE < ? AND ({which})"
            )
            params += [day, *(v for first, names in by_first.items() for v in (*names, first))]
        self.cur.execute(sql, tuple(params))
        ctx = NightContext(levels={}, incident_days=set(), fixed=[], past={s: {} for s in histories or {}})
        fixed: dict[str, FixedIncident] = {}
        for kind, name, day_, sub, text, by, at, value, flagged in self.cur.fetchall():
            if kind == "level":
                ctx.levels.setdefault(name, []).append(_rebase(name, day_, sub, text, by, at))
            elif kind == "incident_day":
                if day_ is not None:
                    ctx.incident_days.add(_as_date(day_))
            elif kind == "history":
                ctx.past[name][_as_date(day_)] = _recorded(day_, value, text, flagged)
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
            " WHERE FROM_DATE >= ? ORDER BY FROM_DATE",
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
    return Rebase(
        series=series,
        from_date=_as_date(from_date),
        kind=kind,
        reason=reason,
        accepted_by=accepted_by,
        recorded_at=recorded_at,
    )


def _recorded(day: Any, value: float | None, groups: str | None, flagged: Any) -> Recorded:
    """A ``METRIC_HISTORY`` row."""
    return Recorded(
        business_date=_as_date(day), value=value, groups=json.loads(groups or "{}"), flagged=bool(flagged)
    )


def _as_date(v: Any) -> date:
    return v.date() if isinstance(v, datetime) else v
