"""The remediation job's steps on source tables: removing a load's duplicate copies, and waiting for a
stopped source to catch up. The job (``jobs.py``) calls them after its approval check, like every step
that changes something.

Removing copies keeps them: the copies of the approved keys are first written to a table in the ops schema,
then every row of those groups is deleted and one of each is put back, in one transaction. Undo puts the
kept copies back (``changes.undo``). A retried step finds its own kept copies and changes nothing twice, or,
when the copies are still in the table (the earlier attempt stopped before its commit), finishes the removal.
Every statement is built from the approved plan's table, columns and keys (identifiers quoted, values
bound), never from stored SQL text.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from dw_dagster.records.keys import typed
from dw_dagster.records.remediation import Approval, AwaitSource, Change, Dedupe
from dw_dagster.remediation.change_log import intent_recorder, record_change
from dw_dagster.sql import placeholders, quote_identifier, table_reference


class SourceStepFailed(Exception):
    """A source step could not be carried out; the message says why (the job writes a failure receipt)."""


def _scope(d: Dedupe, types: dict[str, str]) -> tuple[str, tuple]:
    if not d.key_column or not d.key_values:
        return "", ()
    values = tuple(typed(v, types.get(d.key_column, "")) for v in d.key_values)
    return f" WHERE {quote_identifier(d.key_column)} IN ({placeholders(len(values))})", values


def _exists(cur: Any, parts: tuple[str, str, str]) -> bool:
    cur.execute(
        f"SELECT COUNT(*) FROM {quote_identifier(parts[0])}.INFORMATION_SCHEMA.TABLES"
        " WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        (parts[1], parts[2]),
    )
    return int(cur.fetchone()[0]) > 0


def _copies(d: Dedupe, types: dict[str, str]) -> tuple[str, tuple]:
    """Rows beyond the first of each group of identical rows in the scope: exactly the copies."""
    cols = ", ".join(quote_identifier(c) for c in d.columns)
    where, params = _scope(d, types)
    return (
        f"SELECT {cols} FROM {d.table}{where}"
        f" QUALIFY ROW_NUMBER() OVER (PARTITION BY {cols} ORDER BY {quote_identifier(d.columns[0])}) > 1",
        params,
    )


def copies_left(cur: Any, d: Dedupe, types: dict[str, str] | None = None) -> int:
    """The copies still in the table (0 once a removal has committed)."""
    select, params = _copies(d, types or {})
    cur.execute(f"SELECT COUNT(*) FROM ({select})", params or None)
    return int(cur.fetchone()[0])


def remove_duplicates(
    cur: Any,
    proposal_id: str,
    d: Dedupe,
    approval: Approval,
    types: dict[str, str] | None = None,
    before_delete: Callable[[Change], None] | None = None,
) -> Change:
    """Removes the copies, keeping one row of each group; returns the change (with how to undo it).
    ``before_delete`` receives the change just before the transaction (the run records its intent there: a
    worker killed between the commit and its record leaves that intent, from which its receipt finds the
    removal)."""
    cols = ", ".join(quote_identifier(c) for c in d.columns)
    now = datetime.now(UTC)
    common = dict(
        kind="dedupe",
        proposal_id=proposal_id,
        table_parts=d.table_parts,
        key_column=d.key_column or "",
        key_value=list(d.key_values),
        backup_parts=d.backup_parts,
        columns=list(d.columns),
        at=now,
    )
    kept_before = _exists(cur, d.backup_parts)
    if not kept_before:
        cur.execute(
            f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(d.backup_parts[0])}.{quote_identifier(d.backup_parts[1])}"
        )
        select, params = _copies(d, types or {})
        cur.execute(f"CREATE TABLE {d.backup} AS {select}", params or None)
    cur.execute(f"SELECT COUNT(*) FROM {d.backup}")
    copies = int(cur.fetchone()[0])
    # Kept by an earlier attempt: done if its transaction committed, else finished here.
    if kept_before and not copies_left(cur, d, types):
        return Change(
            what=f"the copies were already removed from {d.table} ({copies:,} kept in {d.backup})",
            added=False,
            rows=copies,
            **common,
        )
    if not copies:
        return Change(
            what=f"{d.table} holds no copies any more; nothing was removed", added=False, rows=0, **common
        )
    scope = f" of {d.key_column} {', '.join(d.key_values)}" if d.key_values else ""
    change = Change(
        what=f"Removed {copies:,} duplicate rows{scope} from {d.table} on approval of {approval.approver}; "
        f"the copies are kept in {d.backup}",
        added=True,
        rows=copies,
        **common,
    )
    if before_delete is not None:
        before_delete(change)
    match = " AND ".join(
        f"(T.{quote_identifier(c)} = K.{quote_identifier(c)} OR (T.{quote_identifier(c)} IS NULL AND K.{quote_identifier(c)} IS NULL))"
        for c in d.columns
    )
    cur.execute("BEGIN")
    try:
        cur.execute(f"DELETE FROM {d.table} T USING (SELECT DISTINCT {cols} FROM {d.backup}) K WHERE {match}")
        cur.execute(f"INSERT INTO {d.table} ({cols}) SELECT DISTINCT {cols} FROM {d.backup}")
        cur.execute("COMMIT")
    except Exception:
        cur.execute("ROLLBACK")
        raise
    return change


def undo_dedupe(change: Change) -> tuple[str, tuple]:
    """Puts the removed copies back."""
    assert change.backup_parts is not None and change.columns
    cols = ", ".join(quote_identifier(c) for c in change.columns)
    target = table_reference(*change.table_parts)
    return f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {table_reference(*change.backup_parts)}", ()


def latest_load(cur: Any, a: AwaitSource) -> datetime | None:
    cur.execute(f"SELECT MAX({quote_identifier(a.column)}) FROM {a.table}")
    value = cur.fetchone()[0]
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def await_caught_up(
    read_latest: Callable[[AwaitSource], datetime | None],
    a: AwaitSource,
    deadline: float,
    poll_seconds: float,
    waiting: Callable[[], None],
) -> datetime:
    """Waits until the source holds a load later than the stale one; ``waiting`` is called once, when the
    first look finds it still stale. Raises :class:`SourceStepFailed` at the deadline (a monotonic time)."""
    told = False
    while True:
        latest = read_latest(a)
        if latest is not None and latest > a.stale_since:
            return latest
        if time.monotonic() > deadline:
            raise SourceStepFailed(
                f"{a.table} has not caught up: its latest {a.column} is still {latest or 'none'} "
                f"(stale since {a.stale_since:%Y-%m-%d %H:%M}); the rerun did not start"
            )
        if not told:
            waiting()
            told = True
        time.sleep(poll_seconds)


def apply_source_changes(warehouse: Any, store: Any, approved: Any, run_id: str, job: str) -> list[Change]:
    """The approved plan's de-duplications, each recorded as a change of the incident (with its undo).
    ``approved`` is the job's approval check result (plan, approvals, ``approver_for``)."""
    from dw_dagster.records.remediation import ProposalKind

    out = []
    for p in approved.plan.of_kind(ProposalKind.DEDUPE):
        if p.dedupe is None:
            continue
        approval = approved.approver_for(p.owners)
        intent = intent_recorder(store, approved.plan, p.proposal_id, run_id)
        try:
            with warehouse.tagged_connection("job.remediate", job=job, dagster_run_id=run_id) as conn:
                change = remove_duplicates(
                    conn.cursor(), p.proposal_id, p.dedupe, approval, before_delete=intent
                )
        except SourceStepFailed:
            raise
        except Exception as e:  # noqa: BLE001 - a warehouse error stops the run with a failure receipt
            raise SourceStepFailed(
                f"removing the copies from {p.dedupe.table} failed: {type(e).__name__}: {e}"
            ) from e
        record_change(store, approved.plan, change, run_id)
        out.append(change)
    return out


def await_sources(
    warehouse: Any,
    approved: Any,
    run_id: str,
    job: str,
    deadline: float,
    poll_seconds: float,
    tell: Callable[[str], None],
) -> list[str]:
    """Waits for each stopped source of the plan to catch up; ``tell`` says once what it waits for."""
    from dw_dagster.records.remediation import ProposalKind

    caught_up = []
    for p in approved.plan.of_kind(ProposalKind.AWAIT_SOURCE):
        a = p.await_source
        if a is None:
            continue

        def read(a: AwaitSource) -> datetime | None:
            with warehouse.tagged_connection(
                "job.remediate.await_source", job=job, dagster_run_id=run_id
            ) as conn:
                return latest_load(conn.cursor(), a)

        latest = await_caught_up(
            read,
            a,
            deadline,
            poll_seconds,
            lambda a=a: tell(
                f"Approved. Waiting for {a.system or a.table} to catch up ({a.table} has no load after "
                f"{a.stale_since:%Y-%m-%d %H:%M}); the rerun starts once it has."
            ),
        )
        caught_up.append(f"{a.table} caught up: latest {a.column} {latest:%Y-%m-%d %H:%M}")
    return caught_up
