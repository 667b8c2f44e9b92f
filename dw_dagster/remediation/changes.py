"""Reference rows the remediation job adds (and source copies it removes, ``source_steps.py``), and how they
are undone.

The owner approved an *added* row: if the key is already there with the approved values (a retried step)
nothing is changed; with other values (someone edited the table since) the job stops and asks for a new
approval rather than overwrite it. Undo deletes exactly the rows the job added. Every statement is built
from the recorded table and key (identifiers quoted, values bound), never from stored SQL text.
"""

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import Approval, Change, ProposalKind, ReferenceRow, RemediationPlan
from dw_dagster.sql import placeholders, quote_identifier, table_reference


class ChangeConflict(Exception):
    """The table no longer is as it was when the change was approved."""


def apply_row(
    cur: Any,
    proposal_id: str,
    row: ReferenceRow,
    approval: Approval,
    before_insert: Callable[[Change], None] | None = None,
) -> Change:
    """Adds the approved row, or finds it there as approved (a retried step: nothing changed); a row that is
    there with other values is a conflict, never overwritten. ``before_insert`` receives the change just before
    the row is added (the run records its intent there: a worker killed between the insert and its record
    leaves that intent, from which its receipt finds the row)."""
    now = datetime.now(UTC)
    values = {**row.values, **approval.values}
    audit = set(row.audit_columns.values())
    if "by" in row.audit_columns:
        values[row.audit_columns["by"]] = approval.approver
    if "at" in row.audit_columns:
        values[row.audit_columns["at"]] = now
    columns = [c for c in values if values[c] is not None]
    key = quote_identifier(row.key_column)
    shown = ", ".join(f"{c}={values[c]}" for c in columns if c != row.key_column and c not in audit)
    common = dict(
        proposal_id=proposal_id,
        table_parts=row.table_parts,
        key_column=row.key_column,
        key_value=row.key_value,
        at=now,
    )
    compared = [c for c in columns if c not in audit]
    cur.execute(
        f"SELECT {', '.join(map(quote_identifier, compared))} FROM {row.table} WHERE {key} = ?",
        (row.key_value,),
    )
    found = cur.fetchone()
    if found is not None:
        existing = dict(zip(compared, found, strict=True))
        if all(str(existing[c]) == str(values[c]) for c in compared):
            return Change(
                what=f"{row.key_column} {row.key_value} already in {row.table} as approved: {shown}",
                added=False,
                **common,
            )
        raise ChangeConflict(
            f"{row.table}: {row.key_column} {row.key_value} exists with {existing}, not the approved {shown}; "
            "nothing was overwritten: the owner must look again and approve a new plan"
        )
    change = Change(
        what=f"Added {row.key_column} {row.key_value} to {row.table}: {shown}", added=True, **common
    )
    if before_insert is not None:
        before_insert(change)
    sql = f"INSERT INTO {row.table} ({', '.join(map(quote_identifier, columns))}) VALUES ({placeholders(len(columns))})"
    cur.execute(sql, tuple(values[c] for c in columns))
    return change


def row_present(cur: Any, change: Change) -> bool:
    """Whether the key of a reference-row change is in its table now."""
    table = table_reference(*change.table_parts)
    cur.execute(
        f"SELECT COUNT(*) FROM {table} WHERE {quote_identifier(change.key_column)} = ?", (change.key_value,)
    )
    return cur.fetchone()[0] > 0


def undo_statement(change: Change) -> tuple[str, tuple[Any, ...]]:
    if change.kind == "dedupe":
        from dw_dagster.remediation.source_steps import undo_dedupe

        return undo_dedupe(change)
    return (
        f"DELETE FROM {table_reference(*change.table_parts)} WHERE {quote_identifier(change.key_column)} = ?",
        (change.key_value,),
    )


def undo_steps(plan: RemediationPlan, changes: Sequence[Change]) -> list[str]:
    added = [c for c in changes if c.added and c.kind == "reference_row"]
    steps = (
        [
            f"`dw-dagster undo {plan.incident_id} --as <owner>` deletes the {'row' if len(added) == 1 else 'rows'} added: "
            + "; ".join(f"{c.key_column} {c.key_value} from {table_reference(*c.table_parts)}" for c in added)
        ]
        if added
        else []
    )
    for c in changes:
        if c.added and c.kind == "dedupe" and c.backup_parts:
            steps.append(
                f"`dw-dagster undo {plan.incident_id} --as <owner>` puts the {c.rows:,} removed copies back into "
                f"{table_reference(*c.table_parts)} from {table_reference(*c.backup_parts)}"
            )
    for p in plan.of_kind(ProposalKind.NODE_CHANGE):
        if p.node_change:
            steps.append(
                f"In Coalesce, revert {p.node_change.node_name} (apply the diff in reverse) and deploy."
            )
    for p in plan.of_kind(ProposalKind.SCOPED_RERUN):
        if p.rerun:
            steps.append(
                f"Rerun `{p.rerun.include_selector}` in {p.rerun.environment} to rebuild the tables."
            )
    return steps


def _undo_key(change: Change) -> str:
    return f"undo|{change.proposal_id}|{change.at.isoformat()}"


def pending_undo(store: IncidentStore, incident_id: str) -> list[Change]:
    """The rows a remediation added for the incident and no undo has deleted yet."""
    done = {e.event_key for e in store.events(incident_id, kind="undo")}
    changes = [Change.model_validate(e.detail) for e in store.events(incident_id, kind="change")]
    return [c for c in changes if c.added and _undo_key(c) not in done]


def undo(cur: Any, store: IncidentStore, incident_id: str, changes: Sequence[Change], by: str) -> list[str]:
    """Deletes the added rows, newest first, recording each undo; returns what was undone."""
    done = []
    for c in reversed(changes):
        cur.execute(*undo_statement(c))
        store.append_event(incident_id, "undo", _undo_key(c), {"by": by, "undid": c.what})
        done.append(f"undid: {c.what}")
    return done
