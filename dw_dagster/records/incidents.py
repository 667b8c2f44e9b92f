"""What an incident is made of: findings, the incident itself, its events, its diagnosis and blast radius."""

from __future__ import annotations

import math
from datetime import date, datetime
from enum import Enum
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field

from dw_dagster.records.keys import key_label


class Finding(BaseModel):
    """What a check saw: enough to group it with its siblings and to tell the owners."""

    check_name: str
    asset_key: str
    business_date: date
    summary: str
    severity: Literal["ERROR", "WARN"] = "ERROR"
    evidence: dict[str, Any] = Field(default_factory=dict)
    cause_scope: str = Field(
        description="What findings of the same night share a cause by default: the Coalesce job that built "
        "the asset, or the asset itself when no job builds it."
    )
    dagster_run_id: str | None = None
    coalesce_run_id: str | None = None

    @property
    def signature(self) -> str:
        return f"{self.check_name}@{self.asset_key}"

    @property
    def named(self) -> str:
        """The check and its table as people read them (``total_revenue on sales/fct_orders``): a diagnosis's
        ``explained_by`` names the finding that explained the night so."""
        return f"{self.check_name} on {self.asset_key}"


IncidentStatus = Literal["open", "resolved", "merged"]
"""``open`` (reopened is an ``open`` incident whose ``status`` events say so), ``resolved``, and ``merged``: a
night's provisional incident whose diagnosis named the cause of an older open one, which it continues."""


class Incident(BaseModel):
    incident_id: str
    cause_key: str
    status: IncidentStatus
    business_date: date | None
    title: str
    severity: str
    opened_at: datetime
    updated_at: datetime
    detail: dict[str, Any] = Field(default_factory=dict)
    """Lifecycle attributes (``docs/incidents.md``): ``cause_scope``, ``lane``, ``dedup``, ``merged_into``,
    ``related``, ``stale_since``, ``reopened``, ``resolution``."""

    @property
    def merged_into(self) -> str | None:
        return self.detail.get("merged_into")

    @property
    def stale_since(self) -> str | None:
        """The business date from which it was marked stale (no new finding since)."""
        return self.detail.get("stale_since")


class IncidentEvent(BaseModel):
    incident_id: str
    event_key: str
    kind: str
    at: datetime
    detail: dict[str, Any]


class RecordOutcome(BaseModel):
    incident: Incident
    new_incident: bool
    """The incident did not exist before this finding."""
    new_finding: bool
    """The finding was not already attached (re-ticks and repeats are not news)."""
    explained_by: str | None = None
    """What in the record explains the finding (a verified fix's receipt): no incident opens for it."""
    reopened: bool = False
    """The finding landed on a resolved incident and reopened it."""


class CauseClass(str, Enum):
    """What kind of wrong the evidence shows (not what the alert's words say)."""

    FAILED_LOAD = "failed_load"
    STALE_INPUT = "stale_input"
    VOLUME_LOSS = "volume_loss"
    VALUE_LOSS = "value_loss"
    """Rows are there and fresh, the number is wrong: e.g. a join that drops rows it should keep."""
    DUPLICATION = "duplication"
    SCHEMA_CHANGE = "schema_change"
    UNIT_CHANGE = "unit_change"
    SIGN_CHANGE = "sign_change"
    """Values of a subset (a key) flipped sign."""
    REFERENCE_DATA_CHANGE = "reference_data_change"
    COST_INCREASE = "cost_increase"
    """Not a data fault: a node's Snowflake credits rose beyond its own nights, by the statements named."""
    UNKNOWN = "unknown"

    @property
    def words(self) -> str:
        """The class as a person reads it (``value loss``); ``value`` stays the identifier in JSON."""
        return self.value.replace("_", " ")


class KeyGap(BaseModel):
    """A key value that holds (part of) the gap, e.g. ACCOUNT_ID = 42, or a NULL key."""

    column: str
    value: str | None
    """None: the key is NULL (shown ``COLUMN IS NULL``, see :attr:`label`)."""
    units: float
    rows: int
    distinct_items: int | None = None
    """e.g. line items over which the units are spread."""
    new_in_source_since: date | None = None
    """The first business date the key appeared in the source, when it is new since the last good night."""
    change: str | None = None
    """What changed upstream for this key, read from the source's and the reference table's own rows (new in
    the source, its reference row deleted or changed, loaded twice, its values scaled...)."""
    factor: float | None = None
    """Unit or sign change: tonight's values over the last good night's, measured from the data."""
    parts: list[tuple[str, str | None]] = Field(default_factory=list)
    """A join key of several columns: the whole tuple, (column, value) each. :attr:`column` and
    :attr:`value` are then the first of :attr:`unmatched_columns`."""
    unmatched_columns: list[str] = Field(default_factory=list)
    """Of :attr:`parts`, the columns that fail to match (NULL, or a value nowhere on the reference side;
    all of them when each value is there but not the combination): the ones the label names."""

    @property
    def label(self) -> str:
        """``ACCOUNT_ID=42``, or ``ACCOUNT_ID IS NULL``: how a key is named everywhere. A key of several
        columns names each column that fails to match, one label each: ``SITE_CODE IS NULL``,
        ``SITE_CODE=7, LINE=B``."""
        if self.parts:
            return ", ".join(key_label(c, v) for c, v in self.parts if c in self.unmatched_columns)
        return key_label(self.column, self.value)

    @property
    def values(self) -> tuple[str | None, ...]:
        """The key's value(s) as the join matches them, in the join's column order."""
        return tuple(v for _, v in self.parts) if self.parts else (self.value,)


class JoinEffect(BaseModel):
    """What one join of a node on the path does to the measured quantity tonight."""

    asset_key: str
    join_type: str
    left: str
    right: str
    on: list[str]
    dropped_rows: int
    dropped_units: float
    duplicated_rows: int = 0
    unmatched: list[KeyGap] = Field(default_factory=list)


class GrownStatement(BaseModel):
    """A statement of a node (a Coalesce stage: ``Insert Data``, a test) whose credits rose tonight against
    what the statement's own nights expected of it (``dw_dagster/cost/jump.py``)."""

    stage: str
    credits: float
    expected: float | None = Field(default=None, validation_alias=AliasChoices("expected", "usual"))
    """None: the statement is new tonight. (Cost findings recorded before December 2026 call it ``usual``.)"""

    def describe(self) -> str:
        if not self.expected:
            return f"{self.stage}: {credits_text(self.credits)} credits (new)"
        change = self.credits / self.expected - 1
        return (
            f"{self.stage}: {credits_text(self.credits)} credits against an expected "
            f"{credits_text(self.expected)} ({change:+.0%})"
        )


def credits_text(value: float) -> str:
    """Snowflake credits as a person reads them: three significant digits (2.13, 0.0415), whole from 100."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}"


EvidenceValue = float | int | str | list[str]
"""A measured number, a name, or names (the costliest query ids, the runs): each a line a person reads."""


class QueryRecord(BaseModel):
    """One statement the diagnosis sent to the warehouse (its audit trail)."""

    purpose: str
    sql: str
    params: list[str] | dict[str, str] | None = None
    rows: int | None = None
    ms: float | None = None
    error: str | None = None


class Diagnosis(BaseModel):
    incident_id: str
    classification: CauseClass
    cause: str
    """One or two sentences a data engineer on call can act on."""
    evidence: dict[str, EvidenceValue] = Field(default_factory=dict)
    keys: list[KeyGap] = Field(default_factory=list)
    joins: list[JoinEffect] = Field(default_factory=list)
    statements: list[GrownStatement] = Field(default_factory=list)
    """A cost increase: the node's statements whose credits grew most, the largest rise first."""
    upstream_change: str | None = None
    cause_asset: str | None = None
    """The asset where the cause sits: the node whose join or filter drops the keys, the table holding the
    copies, the first source that stopped, the source whose subset moved, the node that failed, the table
    whose volume or total fell when nothing further up was found; None when the diagnosis placed no cause.
    An incident's dedup key is rooted at it (``incidents/lifecycle.py``)."""
    path: list[str] = Field(default_factory=list)
    """Asset keys from the upstream cause to the failing asset."""
    test_query: str | None = None
    """Ready-to-run SQL that returns the rows at fault (e.g. order amounts matching no account)."""
    owners: list[str] = Field(default_factory=list)
    """Teams that own the assets on the path where the cause sits (node owner, reference-table owner)."""
    queries: list[QueryRecord] = Field(default_factory=list)
    """Every statement the diagnosis ran, in order (docs/diagnose.md: at most QUERY_BUDGET)."""
    notes: list[str] = Field(default_factory=list)
    """What could not be measured and why (a join sqlglot cannot parse, a failed query, the budget)."""


class AffectedAsset(BaseModel):
    asset_key: str
    name: str
    kind: str
    owners: list[str] = Field(default_factory=list)
    change: dict[str, Any] = Field(default_factory=dict)
    """What changed in numbers, e.g. {"rows_before": 31, "rows_after": 195}."""
    next_read: str | None = None
    """When a person reads it next, e.g. "09:00 sales review, Tue 2025-06-17 09:00 Europe/Paris"."""


class BlastRadius(BaseModel):
    assets: list[AffectedAsset] = Field(default_factory=list)
    newly_flagged: list[str] = Field(default_factory=list)
    """Items newly on a consumer's list tonight (e.g. the 164 accounts newly on the overdue list)."""
    summary: dict[str, float | int | str] = Field(default_factory=dict)
