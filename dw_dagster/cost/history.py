"""The reader of Snowflake's ``ACCOUNT_USAGE.QUERY_ATTRIBUTION_HISTORY`` and ``QUERY_HISTORY``.

Credits come from ``QUERY_ATTRIBUTION_HISTORY`` (``CREDITS_ATTRIBUTED_COMPUTE`` plus
``CREDITS_USED_QUERY_ACCELERATION``), the statement's text and bytes scanned from ``QUERY_HISTORY``. Both
views lag: up to 45 minutes for ``QUERY_HISTORY`` and up to 8 hours for ``QUERY_ATTRIBUTION_HISTORY``, so
a night is read once that lag has passed (``job.py``); queries too short to be attributed do not appear.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from dw_dagster.config import DwConfigError
from dw_dagster.sql import quote_identifier

ATTRIBUTION_VIEW = "QUERY_ATTRIBUTION_HISTORY"
HISTORY_VIEW = "QUERY_HISTORY"
# The columns read, by view: a view without one of them is named in the error.
ATTRIBUTION_COLUMNS = (
    "QUERY_ID",
    "QUERY_TAG",
    "WAREHOUSE_NAME",
    "USER_NAME",
    "START_TIME",
    "END_TIME",
    "CREDITS_ATTRIBUTED_COMPUTE",
    "CREDITS_USED_QUERY_ACCELERATION",
)
HISTORY_COLUMNS = ("QUERY_TEXT", "BYTES_SCANNED", "TOTAL_ELAPSED_TIME")


class CostViewError(DwConfigError):
    """The account usage views answered something this reader cannot use (a missing column, a bad value)."""


class QueryCost(BaseModel):
    """One attributed query."""

    query_id: str
    query_tag: str | None
    warehouse: str | None
    user: str | None
    start_time: datetime
    end_time: datetime | None
    credits: float
    query_text: str | None = None
    bytes_scanned: int | None = None
    elapsed_ms: int | None = None


class AccountUsage(BaseModel, frozen=True):
    """Where the two views are: Snowflake's own ``SNOWFLAKE.ACCOUNT_USAGE`` unless the account shares
    them elsewhere (a database of views granted to dw-dagster's role)."""

    database: str = "SNOWFLAKE"
    schema_name: str = "ACCOUNT_USAGE"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AccountUsage:
        import os

        raw = (env if env is not None else os.environ).get("DW_ACCOUNT_USAGE", "").strip()
        if not raw:
            return cls()
        parts = raw.split(".")
        if len(parts) != 2 or not all(parts):
            raise DwConfigError(f"DW_ACCOUNT_USAGE: expected DATABASE.SCHEMA, got {raw!r}")
        return cls(database=parts[0], schema_name=parts[1])

    def view(self, name: str) -> str:
        return ".".join(quote_identifier(p) for p in (self.database, self.schema_name, name))

    def query_sql(self) -> str:
        a = ", ".join(f"a.{quote_identifier(c)}" for c in ATTRIBUTION_COLUMNS)
        h = ", ".join(f"h.{quote_identifier(c)}" for c in HISTORY_COLUMNS)
        qid, start = quote_identifier("QUERY_ID"), quote_identifier("START_TIME")
        return (
            f"SELECT {a}, {h} FROM {self.view(ATTRIBUTION_VIEW)} a"
            f" LEFT JOIN {self.view(HISTORY_VIEW)} h ON h.{qid} = a.{qid} AND h.{start} >= ?"
            f" WHERE a.{start} >= ? AND a.{start} < ? ORDER BY a.{start}, a.{qid}"
        )


def read_query_costs(cursor: Any, views: AccountUsage, since: datetime, until: datetime) -> list[QueryCost]:
    """The attributed queries that started in ``[since, until)``."""
    if until <= since:
        raise ValueError(f"empty window: {since.isoformat()} is not before {until.isoformat()}")
    cursor.execute(views.query_sql(), (since, since, until))
    columns = [d[0].upper() for d in cursor.description]
    return costs_from_rows(columns, cursor.fetchall(), views.view(ATTRIBUTION_VIEW))


def costs_from_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], where: str) -> list[QueryCost]:
    """Rows of :meth:`AccountUsage.query_sql` as :class:`QueryCost`; a clear error naming the view, the
    query and the column for anything unusable."""
    missing = [c for c in (*ATTRIBUTION_COLUMNS, *HISTORY_COLUMNS) if c not in columns]
    if missing:
        raise CostViewError(f"{where}: the answer has no column {', '.join(missing)}")
    index = {c: i for i, c in enumerate(columns)}
    out = []
    for row in rows:
        get = {c: row[i] for c, i in index.items()}
        qid = get["QUERY_ID"]
        if not qid:
            raise CostViewError(f"{where}: a row without QUERY_ID (START_TIME {get['START_TIME']!r})")
        start = get["START_TIME"]
        if not isinstance(start, datetime):
            raise CostViewError(f"{where}: query {qid}: START_TIME: expected a timestamp, got {start!r}")
        if start.tzinfo is None:  # TIMESTAMP_LTZ comes with its zone; a copy of the view may not: UTC
            start = start.replace(tzinfo=UTC)
        credits = _number(get["CREDITS_ATTRIBUTED_COMPUTE"], where, qid, "CREDITS_ATTRIBUTED_COMPUTE")
        accelerated = _number(
            get["CREDITS_USED_QUERY_ACCELERATION"], where, qid, "CREDITS_USED_QUERY_ACCELERATION"
        )
        out.append(
            QueryCost(
                query_id=str(qid),
                query_tag=get["QUERY_TAG"] or None,
                warehouse=get["WAREHOUSE_NAME"],
                user=get["USER_NAME"],
                start_time=start,
                end_time=get["END_TIME"] if isinstance(get["END_TIME"], datetime) else None,
                credits=(credits or 0.0) + (accelerated or 0.0),
                query_text=get["QUERY_TEXT"],
                bytes_scanned=_whole(get["BYTES_SCANNED"]),
                elapsed_ms=_whole(get["TOTAL_ELAPSED_TIME"]),
            )
        )
    return out


def _number(value: Any, where: str, qid: Any, column: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if number < 0 or number != number:
        raise CostViewError(
            f"{where}: query {qid}: {column}: expected a number of credits >= 0, got {value!r}"
        )
    return number


def _whole(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None
