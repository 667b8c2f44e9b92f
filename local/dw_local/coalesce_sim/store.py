"""The simulator's durable state, in one SQLite file under ``--data-dir``: runs (numbered 1, 2, 3...),
their per-node query results, node edits (workspace and deployed), and the clock offset. Everything a
client has seen survives a restart, or a kill -9.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

RunType = Literal["refresh", "deploy"]
RUN_STATUSES = ("waitingToRun", "initializing", "rendering", "running", "completed", "failed", "canceled")
TERMINAL_STATUSES = ("completed", "failed", "canceled")
RUN_ORDER_COLUMNS = {"id": "id", "runStartTime": "start_time", "runEndTime": "end_time"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_type TEXT NOT NULL,
    status TEXT NOT NULL,
    environment_id TEXT NOT NULL,
    job_id TEXT,
    include_selector TEXT,
    exclude_selector TEXT,
    parallelism INTEGER NOT NULL,
    plan TEXT NOT NULL,
    rerun_of INTEGER,
    run_history TEXT NOT NULL,
    parameters TEXT NOT NULL,
    user_credentials TEXT NOT NULL,
    user_id TEXT NOT NULL,
    start_time TEXT,
    end_time TEXT,
    failure_reason TEXT,
    canceled INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS node_results (
    run_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    node_id TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    query_results TEXT NOT NULL,
    PRIMARY KEY (run_id, node_id)
);
CREATE TABLE IF NOT EXISTS node_edits (
    scope TEXT NOT NULL,
    node_id TEXT NOT NULL,
    node TEXT NOT NULL,
    PRIMARY KEY (scope, node_id)
);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class RunRecord:
    id: int
    run_type: RunType
    status: str
    environment_id: str
    job_id: str | None
    include_selector: str | None
    exclude_selector: str | None
    parallelism: int
    plan: list[str]
    rerun_of: int | None
    run_history: list[int]
    parameters: dict[str, Any]
    user_credentials: dict[str, Any]
    user_id: str
    start_time: str | None
    end_time: str | None
    failure_reason: str | None
    canceled: bool

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "runType": self.run_type,
            "runStatus": self.status,
            "runStartTime": self.start_time,
            "runEndTime": self.end_time,
            "environmentID": self.environment_id,
            "reRunID": self.rerun_of,
            "runFailureReason": self.failure_reason,
        }

    def detail(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "version": 1,
            "runHistory": self.run_history,
            "runTimeParameters": self.parameters,
            "userID": self.user_id,
            "userCredentials": self.user_credentials,
            "runDetails": {
                "environmentID": self.environment_id,
                "jobID": self.job_id,
                "includeNodesSelector": self.include_selector,
                "excludeNodesSelector": self.exclude_selector,
                "parallelism": self.parallelism,
                "nodesInRun": len(self.plan),
                "canceled": self.canceled,
            },
        }


def _record(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"],
        run_type=row["run_type"],
        status=row["status"],
        environment_id=row["environment_id"],
        job_id=row["job_id"],
        include_selector=row["include_selector"],
        exclude_selector=row["exclude_selector"],
        parallelism=row["parallelism"],
        plan=json.loads(row["plan"]),
        rerun_of=row["rerun_of"],
        run_history=json.loads(row["run_history"]),
        parameters=json.loads(row["parameters"]),
        user_credentials=json.loads(row["user_credentials"]),
        user_id=row["user_id"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        failure_reason=row["failure_reason"],
        canceled=bool(row["canceled"]),
    )


@dataclass(frozen=True)
class RunQuery:
    """A page request of ``GET /api/v1/runs``, already validated."""

    limit: int = 25
    order_by: str = "id"
    descending: bool = True
    starting_from_id: int | None = None
    starting_from_time: str | None = None
    run_type: str | None = None
    run_status: str | None = None
    environment_id: str | None = None


class RunStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the API's threads and the run worker, serialized by a lock.
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        self._conn.execute("PRAGMA journal_mode=WAL")
        # A simulator's commits need not wait for the disk: they outlive a killed server all the same.
        self._conn.execute("PRAGMA synchronous=OFF")
        self._conn.executescript(_SCHEMA)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- runs --------------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        run_type: RunType,
        status: str,
        environment_id: str,
        plan: Sequence[str],
        user_credentials: dict[str, Any],
        user_id: str,
        job_id: str | None = None,
        include_selector: str | None = None,
        exclude_selector: str | None = None,
        parallelism: int = 16,
        rerun_of: int | None = None,
        run_history: Sequence[int] = (),
        parameters: dict[str, Any] | None = None,
        start_time: str | None = None,
        end_time: str | None = None,
    ) -> RunRecord:
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO runs (run_type, status, environment_id, job_id, include_selector, "
                "exclude_selector, parallelism, plan, rerun_of, run_history, parameters, user_credentials, "
                "user_id, start_time, end_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_type,
                    status,
                    environment_id,
                    job_id,
                    include_selector,
                    exclude_selector,
                    parallelism,
                    json.dumps(list(plan)),
                    rerun_of,
                    json.dumps(list(run_history)),
                    json.dumps(parameters or {}),
                    json.dumps(user_credentials),
                    user_id,
                    start_time,
                    end_time,
                ),
            )
            run_id = cursor.lastrowid
        run = self.get(run_id)  # type: ignore[arg-type]
        assert run is not None
        return run

    def get(self, run_id: int) -> RunRecord | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _record(row) if row else None

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Sets ``status``, ``start_time``, ``end_time``, ``failure_reason`` or ``canceled``."""
        allowed = {"status", "start_time", "end_time", "failure_reason", "canceled"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not run fields: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self._tx() as conn:
            conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*fields.values(), run_id))

    def cancel_if_waiting(self, run_id: int, end_time: str) -> bool:
        """Cancels a run that has not started; False if it already has."""
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'canceled', canceled = 1, end_time = ? "
                "WHERE id = ? AND status = 'waitingToRun'",
                (end_time, run_id),
            )
            return cursor.rowcount == 1

    def claim(self, run_id: int, start_time: str) -> bool:
        """Moves a waiting run to running; False if it was canceled meanwhile."""
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'running', start_time = ? WHERE id = ? AND status = 'waitingToRun'",
                (start_time, run_id),
            )
            return cursor.rowcount == 1

    def run_ids_with_status(self, *statuses: str) -> list[int]:
        marks = ", ".join("?" for _ in statuses)
        with self._lock:
            rows = self._conn.execute(f"SELECT id FROM runs WHERE status IN ({marks}) ORDER BY id", statuses)
            return [row["id"] for row in rows]

    def latest_refresh(self, environment_id: str) -> RunRecord | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM runs WHERE environment_id = ? AND run_type = 'refresh' "
                "AND status != 'waitingToRun' ORDER BY id DESC LIMIT 1",
                (environment_id,),
            ).fetchone()
        return _record(row) if row else None

    def list_runs(self, query: RunQuery) -> tuple[list[RunRecord], bool]:
        """One page of runs and whether more follow. Ordering by a time leaves out runs without it;
        ties on a time are broken by id, so a page boundary never skips a run.
        """
        column = RUN_ORDER_COLUMNS[query.order_by]
        direction, compare = ("DESC", "<") if query.descending else ("ASC", ">")
        where, args = [], []
        for name, value in (
            ("run_type", query.run_type),
            ("status", query.run_status),
            ("environment_id", query.environment_id),
        ):
            if value is not None:
                where.append(f"{name} = ?")
                args.append(value)
        if column != "id":
            where.append(f"{column} IS NOT NULL")
        if query.starting_from_id is not None:
            if column == "id":
                where.append(f"id {compare} ?")
                args.append(query.starting_from_id)
            else:
                where.append(
                    f"({column} {compare} (SELECT {column} FROM runs WHERE id = ?) OR "
                    f"({column} = (SELECT {column} FROM runs WHERE id = ?) AND id {compare} ?))"
                )
                args += [query.starting_from_id] * 3
        elif query.starting_from_time is not None:
            where.append(f"{column} {compare} ?")
            args.append(query.starting_from_time)
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {column} {direction}, id {direction} LIMIT ?"
        args.append(query.limit + 1)
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        return [_record(r) for r in rows[: query.limit]], len(rows) > query.limit

    # -- node results ------------------------------------------------------------------------------

    def save_node_result(
        self, run_id: int, position: int, node_id: str, name: str, state: str, query_results: list[dict]
    ) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO node_results (run_id, position, node_id, name, state, query_results) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, node_id) DO UPDATE SET "
                "state = excluded.state, query_results = excluded.query_results",
                (run_id, position, node_id, name, state, json.dumps(query_results)),
            )

    def node_results(self, run_id: int) -> list[dict[str, Any]]:
        """``[{nodeID, name, state, queryResults}]`` in the order the nodes ran."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM node_results WHERE run_id = ? ORDER BY position", (run_id,)
            ).fetchall()
        return [
            {
                "nodeID": r["node_id"],
                "name": r["name"],
                "state": r["state"],
                "queryResults": json.loads(r["query_results"]),
            }
            for r in rows
        ]

    # -- node edits and settings ------------------------------------------------------------------

    def node_edits(self, scope: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute("SELECT node_id, node FROM node_edits WHERE scope = ?", (scope,))
            return {r["node_id"]: json.loads(r["node"]) for r in rows}

    def put_node_edit(self, scope: str, node_id: str, node: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO node_edits (scope, node_id, node) VALUES (?, ?, ?)",
                (scope, node_id, json.dumps(node)),
            )

    def replace_node_edits(self, scope: str, nodes: dict[str, dict[str, Any]]) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM node_edits WHERE scope = ?", (scope,))
            conn.executemany(
                "INSERT INTO node_edits (scope, node_id, node) VALUES (?, ?, ?)",
                [(scope, node_id, json.dumps(node)) for node_id, node in nodes.items()],
            )

    def get_setting(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else None

    def set_setting(self, key: str, value: str) -> None:
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))
