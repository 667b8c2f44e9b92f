"""What a fix is made of: proposals, the plan that bundles them for approval, approvals, the receipt."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, Literal

import sqlglot
from pydantic import BaseModel, Field, model_validator

from dw_dagster.sql import table_reference

SYSTEM_ACTOR = "dw-dagster"
"""Who proposes; never a valid approver."""


def environment_label(environment_id: str, name: str | None) -> str:
    """A Coalesce environment as a person reads it: ``PROD``, or ``environment 2`` when its name is unknown."""
    return name or f"environment {environment_id}"


class ProposalKind(str, Enum):
    REFERENCE_ROW = "reference_row"
    """Add a missing key's row to a hand-maintained reference table (applied by the remediation job)."""
    NODE_CHANGE = "node_change"
    """A Coalesce node change, as a diff the node owner applies and deploys in Coalesce."""
    SCOPED_RERUN = "scoped_rerun"
    """A Coalesce run of the affected nodes only, under the approving owner's credentials."""
    DEDUPE = "dedupe"
    """Remove a load's duplicate copies from a source table (its owner confirms by approving; the removed
    copies are kept for undo)."""
    AWAIT_SOURCE = "await_source"
    """Wait until a stopped source has caught up (its owner confirms by approving), then rerun."""


class ReferenceRow(BaseModel):
    asset_key: str
    table_parts: tuple[str, str, str]
    """Database, schema and table name, as metadata gives them; quoted wherever SQL is built."""
    key_column: str
    values: dict[str, Any]
    """The drafted row, key included; ``None`` where the owner must give a value when approving."""
    drafted_from: dict[str, str] = Field(default_factory=dict)
    """Column -> where the drafted value came from, shown to the approver."""
    required: list[str] = Field(default_factory=list)
    """Columns that may not be NULL."""
    audit_columns: dict[str, str] = Field(default_factory=dict)

    @property
    def table(self) -> str:
        return table_reference(*self.table_parts)

    @property
    def key_value(self) -> Any:
        return self.values[self.key_column]

    def missing(self, overrides: dict[str, str] | None = None) -> list[str]:
        values = {**self.values, **(overrides or {})}
        return [c for c in self.required if values.get(c) in (None, "")]


class NodeChange(BaseModel):
    kind: Literal["keep_unmatched", "normalise"] = "keep_unmatched"
    """keep_unmatched: an inner join made LEFT with an unmatched bucket; normalise: a column's values
    rescaled (or their sign restored) for the subset a source changed."""
    environment_id: str
    node_id: str
    node_name: str
    asset_key: str
    environment_name: str | None = None
    """The environment as people know it (PROD); the id is what Coalesce's API takes."""
    before: dict[str, Any]
    """The node's editable definition as read from Coalesce: join, columns' transforms, node tests."""
    after: dict[str, Any]
    diff: str
    """Unified diff of ``before`` -> ``after`` as YAML."""
    right_ref: tuple[str, str] | None = None
    """keep_unmatched: the (location, node name) the join now keeps unmatched rows of."""
    test_name: str
    """The node test the change adds; it must pass in the rerun."""

    @property
    def environment(self) -> str:
        return environment_label(self.environment_id, self.environment_name)


class Dedupe(BaseModel):
    """Exact duplicate rows to remove from a source table, scoped to the keys that hold them."""

    asset_key: str
    table_parts: tuple[str, str, str]
    columns: list[str]
    """Every column: a copy equals its original in all of them."""
    key_column: str | None = None
    key_values: list[str] = Field(default_factory=list)
    """Only duplicates of these keys are removed (all duplicates when empty)."""
    extra_rows: int
    """Copies the diagnosis counted; the step removes the copies it finds when it runs."""
    backup_parts: tuple[str, str, str]
    """Where the removed copies are kept (the ops schema), for undo."""

    @property
    def table(self) -> str:
        return table_reference(*self.table_parts)

    @property
    def backup(self) -> str:
        return table_reference(*self.backup_parts)


class AwaitSource(BaseModel):
    """A stopped source the rerun waits for."""

    asset_key: str
    table_parts: tuple[str, str, str]
    column: str
    """The column that says when a row was loaded."""
    stale_since: datetime
    """Its latest load when the diagnosis ran; caught up once a later one arrives."""
    system: str | None = None
    """The system that feeds it (a replication task), named for its owner."""

    @property
    def table(self) -> str:
        return table_reference(*self.table_parts)


class ScopedRerun(BaseModel):
    environment_id: str
    include_selector: str
    reason: str
    environment_name: str | None = None
    """The environment as people know it (PROD); the id is what Coalesce's API takes."""

    @property
    def environment(self) -> str:
        return environment_label(self.environment_id, self.environment_name)


class Proposal(BaseModel):
    proposal_id: str
    kind: ProposalKind
    title: str
    owners: list[str]
    """Team ids; one member of each must approve."""
    reference_row: ReferenceRow | None = None
    node_change: NodeChange | None = None
    rerun: ScopedRerun | None = None
    dedupe: Dedupe | None = None
    await_source: AwaitSource | None = None


class Expectation(BaseModel):
    """One thing verification checks after the rerun."""

    kind: Literal[
        "reconciles", "node_test_passed", "back_to_baseline", "rows_restored", "no_duplicates", "input_fresh"
    ]
    subject: str
    """A recorded total's name, a node test's name, or (rows_restored, no_duplicates, input_fresh) an asset
    key: the fixed node, the de-duplicated table, the rebuilt table."""
    target: float | None = None
    """back_to_baseline: the value before the incident; rows_restored: the night's rows plus those the join
    dropped."""
    tolerance: float | None = None
    table_parts: tuple[str, str, str] | None = None
    """rows_restored, no_duplicates, input_fresh: the table's database, schema and name, as metadata gives
    them. Kept as names, never as SQL text: verification quotes them where it builds its statement."""
    columns: list[str] = Field(default_factory=list)
    """no_duplicates: the columns a copy repeats; input_fresh: the table's and the source's load column."""
    source_parts: tuple[str, str, str] | None = None
    """input_fresh: the source table's database, schema and name."""
    max_lag_minutes: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _names_of_recorded_sql(cls, data: Any) -> Any:
        """A plan recorded before the names were kept holds each table as a quoted reference: read back as
        its three names (parsed, never executed as written)."""
        if isinstance(data, dict):
            for old, new in (("table", "table_parts"), ("source_table", "source_parts")):
                if isinstance(data.get(old), str) and new not in data:
                    data = {**data, new: _names(data[old])}
                    del data[old]
        return data

    @property
    def table(self) -> str:
        assert self.table_parts is not None, f"{self.kind} on {self.subject}: no table"
        return table_reference(*self.table_parts)

    @property
    def source_table(self) -> str:
        assert self.source_parts is not None, f"{self.kind} on {self.subject}: no source table"
        return table_reference(*self.source_parts)


def _names(reference: str) -> tuple[str, str, str]:
    table = sqlglot.exp.to_table(reference, dialect="snowflake")
    names = (table.catalog, table.db, table.name)
    if not all(names):
        raise ValueError(f"expected a fully qualified table, got {reference!r}")
    return names


class RemediationPlan(BaseModel):
    plan_id: str
    incident_id: str
    domain: str | None
    autonomy: str
    proposals: list[Proposal]
    expectations: list[Expectation]
    created_at: datetime
    expires_at: datetime
    proposed_by: str = SYSTEM_ACTOR

    @property
    def required_teams(self) -> list[str]:
        return list(dict.fromkeys(t for p in self.proposals for t in p.owners))

    def of_kind(self, kind: ProposalKind) -> list[Proposal]:
        return [p for p in self.proposals if p.kind is kind]


class Approval(BaseModel):
    plan_id: str
    team: str
    approver: str
    email: str
    at: datetime
    run_id: str
    values: dict[str, str] = Field(default_factory=dict)
    """What the approver filled in or corrected on reference rows their team owns."""
    os_user: str | None = None
    """The operating-system account the approve command ran under (recorded for the audit; proves nothing)."""
    via: str | None = None
    """How the approver was verified: Slack, their approver key, or (local world only) unverified."""


class Decision(BaseModel):
    """A rejection, an expiry, or a newer plan for the same incident: the plan will not run."""

    plan_id: str
    kind: Literal["rejected", "expired", "superseded"]
    by: str
    at: datetime
    reason: str
    run_id: str | None = None


class Change(BaseModel):
    """One change the remediation job made: a reference row added (undone by deleting it), or a source's
    duplicate copies removed (undone by putting the kept copies back); ``changes.undo``."""

    kind: Literal["reference_row", "dedupe"] = "reference_row"
    proposal_id: str
    what: str
    table_parts: tuple[str, str, str]
    key_column: str
    key_value: Any
    added: bool
    """False: the approved row was already there (a retried step), nothing was changed and nothing is undone."""
    rows: int = 1
    """dedupe: the copies removed."""
    backup_parts: tuple[str, str, str] | None = None
    """dedupe: where the removed copies are kept."""
    columns: list[str] = Field(default_factory=list)
    """dedupe: the columns the copies are put back in."""
    at: datetime


class VerificationResult(BaseModel):
    expectation: Expectation
    passed: bool | None
    """None: could not be checked (errored), never counted as passed."""
    observed: dict[str, Any] = Field(default_factory=dict)
    detail: str = ""


class Receipt(BaseModel):
    incident_id: str
    plan_id: str
    cause: str
    evidence: dict[str, Any]
    proposals: list[Proposal]
    approvals: list[Approval]
    changes: list[Change]
    dagster_run_id: str
    coalesce_run_id: int | None
    coalesce_run_as: str | None
    verification: list[VerificationResult]
    verified: bool
    failure: str | None = None
    """What stopped the run before verification (the changes listed were made; see undo)."""
    undo: list[str]
    written_at: datetime
