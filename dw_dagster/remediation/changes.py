"""Changes the remediation job makes to reference data, each with the statement that undoes it.

Every identifier comes from metadata and is quoted; every value is bound.
"""

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from dw_dagster.coalesce.sql import quote_identifier
from dw_dagster.remediation.models import Approval, Change, ProposalKind, ReferenceRow, RemediationPlan


def apply_row(cur: Any, proposal_id: str, row: ReferenceRow, approval: Approval) -> Change:
    """Inserts (or corrects) one reference row; returns the change with the statement that undoes it."""
    now = datetime.now(timezone.utc)
    values = {**row.values, **approval.values}
    if "by" in row.audit_columns:
        values[row.audit_columns["by"]] = approval.approver
    if "at" in row.audit_columns:
        values[row.audit_columns["at"]] = now.replace(tzinfo=None)
    key = quote_identifier(row.key_column)
    key_value = values[row.key_column]
    cur.execute(f"SELECT * FROM {row.table} WHERE {key} = %s", (key_value,))
    found = cur.fetchone()
    columns = [c for c in values if values[c] is not None]
    if found is None:
        sql = f"INSERT INTO {row.table} ({', '.join(map(quote_identifier, columns))}) VALUES ({', '.join(['%s'] * len(columns))})"
        cur.execute(sql, tuple(values[c] for c in columns))
        return Change(
            proposal_id=proposal_id, what=f"Added {row.key_column} {key_value} to {row.table}: "
            + ", ".join(f"{c}={values[c]}" for c in columns if c != row.key_column),
            sql=sql, undo_sql=f"DELETE FROM {row.table} WHERE {key} = %s", undo_params=[key_value], previous=None, at=now,
        )  # fmt: skip
    previous = {d[0]: v for d, v in zip(cur.description, found, strict=True)}
    sets = [c for c in columns if c != row.key_column]
    sql = f"UPDATE {row.table} SET {', '.join(f'{quote_identifier(c)} = %s' for c in sets)} WHERE {key} = %s"
    cur.execute(sql, (*[values[c] for c in sets], key_value))
    restore = [c for c in previous if c != row.key_column]
    return Change(
        proposal_id=proposal_id, what=f"Updated {row.key_column} {key_value} in {row.table}",
        sql=sql, undo_sql=f"UPDATE {row.table} SET {', '.join(f'{quote_identifier(c)} = %s' for c in restore)} WHERE {key} = %s",
        undo_params=[*(previous[c] for c in restore), key_value], previous=previous, at=now,
    )  # fmt: skip


def undo_steps(plan: RemediationPlan, changes: Sequence[Change], incident_id: str) -> list[str]:
    steps = [f"`dw-dagster undo {incident_id} --as <owner>` reverses the reference rows ({len(changes)} change(s)): "
             + "; ".join(f"{c.undo_sql} with {c.undo_params}" for c in changes)] if changes else []  # fmt: skip
    for p in plan.of_kind(ProposalKind.NODE_CHANGE):
        assert p.node_change is not None
        steps.append(f"In Coalesce, revert {p.node_change.node_name} (apply the diff in reverse) and deploy.")
    for p in plan.of_kind(ProposalKind.SCOPED_RERUN):
        assert p.rerun is not None
        steps.append(f"Rerun `{p.rerun.include_selector}` in environment {p.rerun.environment_id} to rebuild the tables.")
    return steps


def undo_changes(cur: Any, changes: Sequence[Change]) -> list[str]:
    """Runs each change's undo statement, newest first; returns what was undone."""
    done = []
    for c in reversed(changes):
        cur.execute(c.undo_sql, tuple(c.undo_params))
        done.append(f"undid: {c.what}")
    return done
