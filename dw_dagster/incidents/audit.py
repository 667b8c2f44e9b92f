"""The diagnosis's audit trail: every statement it sends to the warehouse, with what it was for, its bound
values, how many rows came back and how long it took, like a reconciliation log.

The trail also holds the diagnosis to a budget (``QUERY_BUDGET`` statements per incident, docs/diagnose.md):
a measurement that would exceed it is not run, and the diagnosis says what it could not measure. A statement
that fails is recorded with its error and the diagnosis goes on without that measurement; it never fails
the job.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any

from dw_dagster.checks.history import HistorySession, Recorded
from dw_dagster.records.incidents import QueryRecord

QUERY_BUDGET = 30
"""Statements one diagnosis may send: history reads included, the blast radius not (it is bounded by the
downstream assets, one statement each)."""


class QueryBudgetExceeded(Exception):
    """The diagnosis has used its statements; what it has measured so far is what it reports."""


class QueryFailed(Exception):
    """A measurement statement failed in the warehouse (recorded in the trail with its error)."""


class AuditTrail:
    """The statements of one diagnosis, in order."""

    def __init__(self, budget: int = QUERY_BUDGET):
        self.budget = budget
        self.records: list[QueryRecord] = []
        self._purpose = "diagnosis"

    @property
    def used(self) -> int:
        return len(self.records)

    def remaining(self) -> int:
        return max(0, self.budget - self.used)

    @contextmanager
    def purpose(self, what: str) -> Iterator[None]:
        """Statements sent inside the block are recorded as being for ``what``."""
        before, self._purpose = self._purpose, what
        try:
            yield
        finally:
            self._purpose = before


def _shown(params: Any) -> list[str] | dict[str, str] | None:
    if params is None:
        return None
    if isinstance(params, dict):
        return {str(k): repr(v) for k, v in params.items()}
    return [repr(v) for v in params] if isinstance(params, Sequence) else [repr(params)]


class AuditedCursor:
    """A DB-API cursor that records each statement in an :class:`AuditTrail` and keeps to its budget.

    Only what the diagnosis uses of a cursor is offered: ``execute``, ``fetchone``, ``fetchall``,
    ``description`` and ``rowcount``.
    """

    def __init__(self, cursor: Any, trail: AuditTrail):
        self._cursor = cursor
        self.trail = trail
        self._last: QueryRecord | None = None

    def execute(self, sql: str, params: Any = None) -> AuditedCursor:
        if self.trail.used >= self.trail.budget:
            raise QueryBudgetExceeded(
                f"the diagnosis used its {self.trail.budget} statements before: {self.trail._purpose}"
            )
        record = QueryRecord(purpose=self.trail._purpose, sql=sql.strip(), params=_shown(params))
        self.trail.records.append(record)
        start = time.monotonic()
        try:
            if params is None:
                self._cursor.execute(sql)
            else:
                self._cursor.execute(sql, params)
        except Exception as e:
            record.error = f"{type(e).__name__}: {e}"[:500]
            record.ms = round((time.monotonic() - start) * 1000, 1)
            raise QueryFailed(f"{record.purpose}: {record.error}") from e
        record.ms = round((time.monotonic() - start) * 1000, 1)
        self._last = record
        return self

    def _count(self, rows: int) -> None:
        if self._last is not None:
            self._last.rows = (self._last.rows or 0) + rows

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        self._count(0 if row is None else 1)
        return row

    def fetchall(self) -> list[Any]:
        rows = self._cursor.fetchall()
        self._count(len(rows))
        return rows

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount


class AuditedHistory:
    """A history session whose reads go through the trail, each (metric, dates) read once per diagnosis."""

    def __init__(self, history: HistorySession, trail: AuditTrail):
        self._session = copy.copy(history)
        self._session.cur = AuditedCursor(history.cur, trail)
        self._trail = trail
        self._memo: dict[tuple, dict[date, Recorded]] = {}

    def metric_history(self, metric: str, before: date, days: int) -> dict[date, Recorded]:
        key = ("metric", metric, before, days)
        if key not in self._memo:
            with self._trail.purpose(f"recorded history of {metric}"):
                self._memo[key] = self._session.metric_history(metric, before, days)
        return self._memo[key]

    def volume_history(self, asset_key: str, before: date, days: int) -> dict[date, Recorded]:
        key = ("volume", asset_key, before, days)
        if key not in self._memo:
            with self._trail.purpose(f"row-count history of {asset_key}"):
                self._memo[key] = self._session.volume_history(asset_key, before, days)
        return self._memo[key]

    def incident_days(self, since: date) -> set[date]:
        key = ("incidents", since)
        if key not in self._memo:
            with self._trail.purpose("business dates with an incident"):
                self._memo[key] = self._session.incident_days(since)  # type: ignore[assignment]
        return self._memo[key]  # type: ignore[return-value]
