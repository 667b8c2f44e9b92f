"""Faults the distributor world can play, and the benign events it must play without raising an alarm.

A fault is a real change to what the pipeline reads or runs, never an edit of what it built:

- the night's source data as Qlik applies it: rows duplicated, missing or scaled, a join key nulled, or
  nothing applied at all;
- a source table's schema: a column renamed or dropped, as Qlik replicates an EBS DDL change;
- planning ops' region map: a row deleted or pointed at another warehouse or region;
- the Coalesce project: a node change deployed through the simulator's workspace and deploy endpoints,
  as an engineer applies one in the Coalesce app;
- the Coalesce Scheduler: the night's run does not start.

Play them with ``DistributorWorld.play_night(sf, coalesce, night, faults=[Fault(kind=..., ...)])``. Every
random choice comes from the world's seed, the fault's kind and the night (``rng_for``), so the same faults
on the same night of the same world load byte-identical data.

**Night-scoped** faults change one night's load; the next night's load is clean again, since the on-hand
table is a snapshot that Qlik reloads each night. Order lines are the exception: a night's lines stay in
the history, faults and all. **Persistent** faults (a schema change, an edited map row, a deployed node
change) stay until ``DistributorWorld.repair(sf, coalesce, fault)``. ``repair`` also puts a night-scoped
fault's damage right for the latest night (as a Qlik reload of the table would), so a rerun of the job
then builds clean tables; it never runs the job itself.

Every kind but three is played by the event framework all worlds share (``dw_local.scenarios.events``):
``GenericKind`` turns the distributor's parameters (an ``org_id``, a column's default) into that event on
the distributor's tables and columns, so the same fault does the same thing on every world. What only this
world needs stays here: checks against its orgs, repairs as a Qlik reload or planning ops' next-morning map
fix, order lines scaled to zero units not kept, and three kinds of its own (``node_failure`` mode
``test``, ``new_org_mapped``, ``steady_growth``, whose growth is of units, not rows).

Each kind's docstring below says what it changes and what a data engineer would see.
"""

from __future__ import annotations

import inspect
import re
from datetime import datetime, time
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dw_local.scenarios import events
from dw_local.world import WorldError
from dw_local.worlds.distributor.simulation import ITEMS, ONHAND, ORDER_LINES, REGION_MAP
from dw_local.worlds.night_world import rng_for, to_utc

if TYPE_CHECKING:
    from dw_dagster.coalesce.client import CoalesceClient
    from dw_local.worlds.distributor.generator import DistributorWorld

Tables = dict[str, pd.DataFrame]

FaultKind = Literal[
    "duplicate_load",
    "replication_stalled",
    "unit_change",
    "partial_load",
    "reference_row_deleted",
    "reference_row_remapped",
    "null_join_key",
    "column_renamed",
    "column_dropped",
    "node_failure",
    "scheduler_skip",
    "source_not_refreshed",
    # Benign events: they must not raise an alarm.
    "new_org_mapped",
    "steady_growth",
]

PARAMETERS = (
    "org_id", "factor", "fraction", "table", "column", "new_name", "node", "mode", "to_org_id", "region",
    "code", "name", "pct", "since_night",
)  # fmt: skip
# Columns the world itself reads to know what it has played; a schema fault may not touch them.
_WORLD_KEYS = {ORDER_LINES: {"LINE_ID", "ACTUAL_SHIPMENT_DATE"}}
_SCHEMA_TABLES = (ONHAND, ORDER_LINES, ITEMS)
_IDENTIFIER = re.compile(r"^[A-Z_][A-Z0-9_$]*$")
# The column holding each night-loaded table's org: where an ``org_id`` restricts a fault to one org's rows.
_ORG_COLUMN = {ONHAND: "ORGANIZATION_ID", ORDER_LINES: "SHIP_FROM_ORG_ID"}
MAP_OWNER = "planning-ops"  # who edits the region map
_MAP_EDITED_AT = time(15, 30)  # local: when planning ops edits the map on the business day
_MAP_ADDED_AT = time(10, 30)  # local: when planning ops adds a new org's row, before EBS opens it


class Fault(BaseModel):
    """One fault (or benign event) to play on a night: ``kind`` and that kind's parameters.

    Parameters a kind does not take are refused, naming the parameter; the kind's defaults are filled in,
    so ``Fault(kind="unit_change")`` reads back as ``factor=12.0, column='TRANSACTION_QUANTITY'``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FaultKind
    org_id: int | None = Field(default=None, gt=0)
    factor: float | None = None
    fraction: float | None = Field(default=None, gt=0, le=1)
    table: str | None = None
    column: str | None = None
    new_name: str | None = None
    node: str | None = None
    mode: Literal["sql", "test"] | None = None
    to_org_id: int | None = Field(default=None, gt=0)
    region: str | None = Field(default=None, min_length=1)
    code: str | None = Field(default=None, min_length=1)
    name: str | None = Field(default=None, min_length=1)
    pct: float | None = Field(default=None, ge=-5, le=5)
    since_night: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _parameters_of_the_kind(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("kind") not in KINDS:
            return data  # the field validation names what is wrong
        kind = KINDS[data["kind"]]
        given = {k for k, v in data.items() if k in PARAMETERS and v is not None}
        if wrong := sorted(given - kind.params):
            takes = ", ".join(sorted(kind.params)) or "none"
            raise ValueError(f"{wrong[0]}: not a parameter of {kind.kind} (its parameters: {takes})")
        if missing := sorted(kind.required - given):
            raise ValueError(f"{missing[0]}: {kind.kind} needs it")
        explicit = {k: v for k, v in data.items() if v is not None}
        return {**kind.defaults(explicit), **explicit}

    @model_validator(mode="after")
    def _consistent(self) -> Fault:
        KINDS[self.kind].check(self)
        return self

    @property
    def benign(self) -> bool:
        return KINDS[self.kind].benign

    @property
    def persists(self) -> bool:
        """Stays in force on later nights until ``repair``."""
        return KINDS[self.kind].persists(self)

    def describe(self) -> str:
        """What the fault changes and what a data engineer would see (the kind's docstring)."""
        return inspect.cleandoc(KINDS[self.kind].__doc__ or "")


class FaultContext:
    """What a fault works with on a night: the world, the fault, and (when playing) a Snowflake cursor on
    the world's database and the Coalesce client. Pure transforms need neither."""

    def __init__(
        self,
        world: DistributorWorld,
        fault: Fault,
        night: int,
        cur: Any = None,
        coalesce: CoalesceClient | None = None,
    ):
        self.world, self.fault, self.night, self._cur, self._coalesce = world, fault, night, cur, coalesce

    @property
    def cur(self) -> Any:
        if self._cur is None:
            raise WorldError(f"{self.fault.kind}: needs the local Snowflake")
        return self._cur

    @property
    def coalesce(self) -> CoalesceClient:
        if self._coalesce is None:
            raise WorldError(f"{self.fault.kind}: needs the Coalesce API")
        return self._coalesce

    def rng(self, purpose: str = "") -> np.random.Generator:
        return rng_for(self.world.spec.seed, f"fault/{self.fault.kind}/{purpose}", self.night)

    def utc_on_business_day(self, local: time) -> datetime:
        return self.world.utc(datetime.combine(self.world.business_date(self.night), local))

    def table(self, name: str) -> str:
        return self.world.tables[name].qualified


class FaultKindBase:
    """One kind of fault. Hooks run in this order on a night: ``before_load`` (schema and reference-table
    changes), ``transform`` (the night's source frames, before Qlik applies them; pure), ``before_run``
    (Coalesce project changes), then the job runs unless a kind says it does not."""

    kind: ClassVar[str]
    params: ClassVar[frozenset[str]] = frozenset()
    required: ClassVar[frozenset[str]] = frozenset()
    benign: ClassVar[bool] = False
    loads_source: ClassVar[bool] = True  # False: Qlik applies nothing tonight
    runs_job: ClassVar[bool] = True  # False: the Scheduler starts no run tonight

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            KINDS[cls.kind] = cls

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {}

    @classmethod
    def check(cls, fault: Fault) -> None:
        """World-independent consistency of the parameters (raise ValueError naming the parameter)."""

    @classmethod
    def persists(cls, fault: Fault) -> bool:
        return False

    @classmethod
    def changes_load(cls, fault: Fault) -> bool:
        """Changes the night's data as Qlik applies it (``transform``)."""
        return cls.transform is not FaultKindBase.transform

    def before_load(self, ctx: FaultContext) -> None:
        pass

    def transform(self, tables: Tables, ctx: FaultContext) -> Tables:
        return tables

    def before_run(self, ctx: FaultContext) -> None:
        pass

    def held_tables(self, ctx: FaultContext) -> set[str]:
        """Source tables Qlik does not apply tonight."""
        return set()

    def repair(self, ctx: FaultContext) -> None:
        """Undo: by default the sources are put back to the latest night's clean data."""
        ctx.world._restore_sources(ctx.cur, ctx.night)


KINDS: dict[str, type[FaultKindBase]] = {}


class GenericKind(FaultKindBase):
    """A kind the event framework every world plays (``dw_local.scenarios.events``) plays here too: the
    distributor only names the event's tables, columns and rows from its parameters (``event``), and keeps
    what only its world needs (checks against its orgs, repairs as a Qlik reload or a map fix)."""

    EVENT: ClassVar[type[events.Event]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.loads_source, cls.runs_job = cls.EVENT.loads_source, cls.EVENT.runs_job

    @classmethod
    def changes_load(cls, fault: Fault) -> bool:
        return cls.EVENT.transform is not events.Event.transform

    def event(self, ctx: FaultContext) -> events.Event:
        """The generic event this fault is on the distributor's tables."""
        return self.EVENT(kind=self.kind)

    def before_load(self, ctx: FaultContext) -> None:
        self.event(ctx).before_load(ctx.world, ctx.cur, ctx.night)

    def transform(self, tables: Tables, ctx: FaultContext) -> Tables:
        return self.event(ctx).transform(ctx.world, tables, ctx.night)

    def before_run(self, ctx: FaultContext) -> None:
        self.event(ctx).before_run(ctx.world, ctx.coalesce)

    def held_tables(self, ctx: FaultContext) -> set[str]:
        return self.event(ctx).held_tables()


# ---------------------------------------------------------------------------------------------- helpers


def _org_rows(table: str, org_id: int | None) -> dict[str, Any] | None:
    """The event's ``where``: the org's rows of a night-loaded table (None: every org's)."""
    return None if org_id is None else {_ORG_COLUMN[table]: org_id}


def _scaled(values: pd.Series, factor: float) -> np.ndarray:
    return np.rint(values.to_numpy(dtype=float) * factor).astype(np.int64)


def _world_org(ctx: FaultContext, org_id: int) -> Any:
    """The org's region-map identity as the world defines it (orgs, or the reference night's new org)."""
    spec = ctx.world.spec
    for org in [*spec.orgs, spec.reference_night.new_org]:
        if org.id == org_id:
            return org
    raise WorldError(f"{ctx.fault.kind}: org {org_id} is not an org of the world file")


def _map_row(ctx: FaultContext, org_id: int) -> tuple | None:
    ctx.cur.execute(
        f'SELECT "WAREHOUSE_CODE", "WAREHOUSE_NAME", "REGION" FROM {ctx.table(REGION_MAP)} '
        'WHERE "ORGANIZATION_ID" = %s',
        (org_id,),
    )
    return ctx.cur.fetchone()


def _schema_target(ctx: FaultContext) -> tuple[str, str]:
    table, column = ctx.fault.table, ctx.fault.column
    assert table is not None and column is not None
    if column not in ctx.world.tables[table].columns:
        raise WorldError(f"{ctx.fault.kind}: {table} has no column {column} in project.yaml")
    return table, column


# ---------------------------------------------------------------------------------------------- kinds


class DuplicateLoad(GenericKind):
    """Qlik applies the night's on-hand rows twice (a task restarted without its checkpoint).

    Parameters: ``org_id`` (default: every org).

    Changes: every on-hand row of the org appears twice in ``RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL``, the
    copy identical down to ``ONHAND_QUANTITIES_ID`` and ``_QLIK_LOADED_AT``. Night-scoped.

    A data engineer sees: the job green and every Coalesce test passing (``STG_ONHAND`` sums the copies
    into the same org-item row, so ``INVENTORY_POSITION_KEY`` stays unique); the org's on-hand units
    doubled in RAW, in ``FCT_INVENTORY_POSITION`` and in the network total, which jumps by the org's share
    (14-24%); days of supply up, the reorder list shorter; the fact's row count unchanged; RAW and the fact
    still agree, so reconciling them shows no gap. The evidence is in RAW: ``ONHAND_QUANTITIES_ID`` is no
    longer unique and RAW's row count jumped while EBS holds no more positions.
    """

    kind = "duplicate_load"
    params = frozenset({"org_id"})
    EVENT = events.DuplicateLoad

    def event(self, ctx: FaultContext) -> events.Event:
        return self.EVENT(kind=self.kind, table=ONHAND, where=_org_rows(ONHAND, ctx.fault.org_id))


class ReplicationStalled(GenericKind):
    """Qlik Replicate stalls: nothing new reaches Snowflake for the night.

    Parameters: none.

    Changes: the night's business day is not applied: on-hand, order lines and every ``_QLIK_LOADED_AT``
    stay as the previous night left them. The next night played catches up (its on-hand snapshot, plus
    the missed night's order lines), as Qlik does when the task resumes. ``repair`` applies the backlog at
    once (the night of the latest job run), for a rerun.

    A data engineer sees: the job runs green on stale input at its usual time; every table is rebuilt
    ("fresh" by its build time) with the same numbers as the night before: network on-hand unchanged to
    the unit, RAW's row count unchanged, ``MAX(_QLIK_LOADED_AT)`` in RAW and in the fact a day old, the
    latest ship date in ``STG_DEMAND`` a day behind. A check comparing the fact's input time with its
    build time, or a total that never moves by exactly zero, catches it.
    """

    kind = "replication_stalled"
    EVENT = events.ReplicationStalled

    def repair(self, ctx: FaultContext) -> None:
        world = ctx.world
        if world._last_played(ctx.cur) < ctx.night:
            world._apply_business_day(ctx.cur, ctx.night, world._read_opening(ctx.cur))


class UnitChange(GenericKind):
    """A source quantity column changes unit: EBS posts eaches where it posted cases (x12) for an org.

    Parameters: ``column`` (``TRANSACTION_QUANTITY`` of on-hand, the default, or ``SHIPPED_QUANTITY`` of
    order lines), ``factor`` (default 12; any factor but 0 and 1: 3.7, 0.27, or -1 for a sign flip),
    ``org_id`` (default: every org).

    Changes: that night's values of the column for the org are multiplied by ``factor`` (rounded to whole
    units, as EBS stores them; an order line rounded to zero is not kept). On-hand is night-scoped; order
    lines keep the scaled night in their history until ``repair``. A negative factor flips the sign: the
    org's positions go negative, which fails ``FCT_INVENTORY_POSITION``'s ``NO_NEGATIVE_ONHAND`` test.

    A data engineer sees: the job green, every test passing, row counts unchanged. With
    ``TRANSACTION_QUANTITY``: the org's on-hand units x12 in RAW and in ``FCT_INVENTORY_POSITION``, the
    network total jumping by several times the org's share, RAW and the fact still agreeing (no
    reconciliation gap), days of supply up and the reorder list shorter. With ``SHIPPED_QUANTITY``: the
    org's shipments that day x12 in ``STG_DEMAND``, the 28-day average demand of its SKUs up, days of
    supply down and the reorder list longer, for the 28 days the night stays in the window.
    """

    kind = "unit_change"
    params = frozenset({"org_id", "factor", "column"})
    EVENT = events.UnitChange
    TABLE: ClassVar[dict[str, str]] = {"TRANSACTION_QUANTITY": ONHAND, "SHIPPED_QUANTITY": ORDER_LINES}

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {"factor": 12.0, "column": "TRANSACTION_QUANTITY"}

    @classmethod
    def check(cls, fault: Fault) -> None:
        if fault.column not in cls.TABLE:
            raise ValueError(f"column: {fault.column!r}; unit_change scales one of {sorted(cls.TABLE)}")
        if fault.factor in (0, 1) or not np.isfinite(fault.factor or 0):
            raise ValueError(
                f"factor: expected a factor other than 0 and 1 (negative flips the sign), got {fault.factor}"
            )

    def event(self, ctx: FaultContext) -> events.Event:
        fault = ctx.fault
        assert fault.column is not None
        table = self.TABLE[fault.column]
        where = _org_rows(table, fault.org_id)
        return self.EVENT(kind=self.kind, table=table, column=fault.column, factor=fault.factor, where=where)

    def transform(self, tables: Tables, ctx: FaultContext) -> Tables:
        tables = super().transform(tables, ctx)
        # EBS keeps no order line that ships nothing: a line scaled down to zero units is not there.
        lines = tables[ORDER_LINES]
        return {**tables, ORDER_LINES: lines[lines["SHIPPED_QUANTITY"] != 0]}


class PartialLoad(GenericKind):
    """Qlik applies only part of the night's rows (a batch cut short, a filter left on a task).

    Parameters: ``fraction`` of the rows missing (default 0.3), ``org_id`` (default: every org),
    ``table`` (``MTL_ONHAND_QUANTITIES_DETAIL``, the default, or ``OE_ORDER_LINES_ALL``).

    Changes: exactly round(fraction x rows) of the org's rows that night, chosen from the seed, are not
    loaded. On-hand is night-scoped; the missing order lines stay missing from the history until
    ``repair``.

    A data engineer sees: the job green. On-hand: RAW's row count and units down by about the fraction of
    the org's rows, the fact's row count and units down with them (a position disappears only when all
    its subinventory rows are missing), network on-hand down, RAW and the fact still agreeing (no
    reconciliation gap: both lost the rows), the reorder list longer. Order lines: the day's shipments
    short in ``STG_DEMAND``, the 28-day average demand a little lower, days of supply a little higher.
    """

    kind = "partial_load"
    params = frozenset({"fraction", "org_id", "table"})
    EVENT = events.PartialLoad

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {"fraction": 0.3, "table": ONHAND}

    @classmethod
    def check(cls, fault: Fault) -> None:
        if fault.table not in _ORG_COLUMN:
            raise ValueError(f"table: {fault.table!r}; partial_load drops rows of {sorted(_ORG_COLUMN)}")

    def event(self, ctx: FaultContext) -> events.Event:
        table = ctx.fault.table
        assert table is not None
        where = _org_rows(table, ctx.fault.org_id)
        return self.EVENT(kind=self.kind, table=table, fraction=ctx.fault.fraction, where=where)


class ReferenceRowDeleted(GenericKind):
    """Someone deletes an org's row from planning ops' region map.

    Parameters: ``org_id`` (required; an org of the world file).

    Changes: the org's row is deleted from ``REF_PLANNING.REGION_MAP`` before the night's job. Persists
    until ``repair``, which adds the row back as the world file defines it.

    A data engineer sees: the job green, every test passing; ``DIM_WAREHOUSE`` one row short;
    ``FCT_INVENTORY_POSITION``'s inner join drops every position of the org, so the fact's units and row
    count fall by the org's share (14-24%) while RAW does not move: a reconciliation gap equal to the org's
    RAW units, held by that ``ORGANIZATION_ID`` (on-hand rows matching no warehouse); network days of
    supply fall and the reorder list grows. The map keeps no trace of the deletion.
    """

    kind = "reference_row_deleted"
    params = frozenset({"org_id"})
    required = frozenset({"org_id"})
    EVENT = events.ReferenceRowDeleted

    @classmethod
    def persists(cls, fault: Fault) -> bool:
        return True

    def event(self, ctx: FaultContext) -> events.Event:
        return self.EVENT(kind=self.kind, table=REGION_MAP, where={"ORGANIZATION_ID": ctx.fault.org_id})

    def before_load(self, ctx: FaultContext) -> None:
        org_id = ctx.fault.org_id
        assert org_id is not None
        _world_org(ctx, org_id)
        if _map_row(ctx, org_id) is None:
            raise WorldError(f"reference_row_deleted: REGION_MAP has no row for org {org_id}")
        super().before_load(ctx)

    def repair(self, ctx: FaultContext) -> None:
        # Planning ops adds the row back the morning after (its UPDATED_AT says when), not as installed.
        org_id = ctx.fault.org_id
        assert org_id is not None
        org = _world_org(ctx, org_id)
        if _map_row(ctx, org_id) is None:
            fixed_at = ctx.world._map_fix_time(ctx.night)
            ctx.world._insert_map_row(ctx.cur, org_id, org.code, org.name, org.region, fixed_at)


class ReferenceRowRemapped(GenericKind):
    """Someone points an org's region-map row at the wrong warehouse or region.

    Parameters: ``org_id`` (required; an org of the world file), ``to_org_id`` (the row takes that org's
    warehouse code, name and region) and/or ``region``.

    Changes: the row's ``WAREHOUSE_CODE``, ``WAREHOUSE_NAME`` and ``REGION`` are updated in
    ``REF_PLANNING.REGION_MAP`` on the business day at 15:30 (``UPDATED_AT``, ``UPDATED_BY`` set). Persists
    until ``repair``, which puts the world file's values back.

    A data engineer sees: the job green, every test passing (nothing tests ``WAREHOUSE_CODE`` for
    uniqueness); network totals, row counts and the reorder list unchanged; the org's units counted under
    the other warehouse or region in ``FCT_INVENTORY_POSITION`` (two orgs with one warehouse code, one
    warehouse with no stock), so totals by warehouse or region move by the org's units. The map row's
    ``UPDATED_AT`` shows the edit.
    """

    kind = "reference_row_remapped"
    params = frozenset({"org_id", "to_org_id", "region"})
    required = frozenset({"org_id"})
    EVENT = events.ReferenceRowRemapped

    @classmethod
    def check(cls, fault: Fault) -> None:
        if fault.to_org_id is None and fault.region is None:
            raise ValueError("to_org_id: reference_row_remapped needs to_org_id or region")
        if fault.to_org_id == fault.org_id:
            raise ValueError("to_org_id: the same org as org_id")

    @classmethod
    def persists(cls, fault: Fault) -> bool:
        return True

    def event(self, ctx: FaultContext) -> events.Event:
        fault = ctx.fault
        assert fault.org_id is not None
        _world_org(ctx, fault.org_id)
        edited: dict[str, Any] = {}
        if fault.to_org_id is not None:
            target = _world_org(ctx, fault.to_org_id)
            edited = {"WAREHOUSE_CODE": target.code, "WAREHOUSE_NAME": target.name, "REGION": target.region}
        if fault.region is not None:
            edited["REGION"] = fault.region
        stamp = {"UPDATED_BY": MAP_OWNER, "UPDATED_AT": ctx.utc_on_business_day(_MAP_EDITED_AT)}
        where = {"ORGANIZATION_ID": fault.org_id}
        return self.EVENT(kind=self.kind, table=REGION_MAP, where=where, set={**edited, **stamp})

    def before_load(self, ctx: FaultContext) -> None:
        if _map_row(ctx, ctx.fault.org_id) is None:
            raise WorldError(f"reference_row_remapped: REGION_MAP has no row for org {ctx.fault.org_id}")
        super().before_load(ctx)

    def repair(self, ctx: FaultContext) -> None:
        org_id = ctx.fault.org_id
        assert org_id is not None
        org = _world_org(ctx, org_id)
        if _map_row(ctx, org_id) not in (None, (org.code, org.name, org.region)):
            fixed_at = ctx.world._map_fix_time(ctx.night)
            ctx.world._update_map_row(ctx.cur, org_id, org.code, org.name, org.region, fixed_at)


class NullJoinKey(GenericKind):
    """A surge of NULL ``ORGANIZATION_ID`` in the replicated on-hand rows (the org lost in replication).

    Parameters: ``fraction`` of the rows nulled (default 0.1), ``org_id`` (only that org's rows; default
    every org).

    Changes: the RAW column is made nullable (as a replication target often is), and exactly
    round(fraction x rows) of the night's on-hand rows, chosen from the seed, arrive with
    ``ORGANIZATION_ID`` NULL; their ids, items and quantities are intact. The rows are night-scoped; the
    column stays nullable until ``repair``, which rebuilds the table in the project's shape and reloads it.

    A data engineer sees: the job green, every test passing (the fact's ``ORGANIZATION_ID`` not-null test
    runs after the inner join to ``DIM_WAREHOUSE`` has dropped the NULL rows); ``STG_ONHAND`` holds rows
    with a NULL org; RAW's units unchanged while the fact's fall by the nulled rows' units: a
    reconciliation gap held by ``ORGANIZATION_ID IS NULL``; the reorder list grows when the loss is large.
    """

    kind = "null_join_key"
    params = frozenset({"fraction", "org_id"})
    EVENT = events.NullJoinKey

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {"fraction": 0.1}

    def event(self, ctx: FaultContext) -> events.Event:
        where = _org_rows(ONHAND, ctx.fault.org_id)
        return self.EVENT(
            kind=self.kind, table=ONHAND, column="ORGANIZATION_ID", fraction=ctx.fault.fraction, where=where
        )


class ColumnRenamed(GenericKind):
    """A source column is renamed: Qlik replicates an EBS DDL change to the RAW table.

    Parameters: ``table`` (``MTL_ONHAND_QUANTITIES_DETAIL``, the default, ``OE_ORDER_LINES_ALL`` or
    ``MTL_SYSTEM_ITEMS_B``), ``column`` (default ``TRANSACTION_QUANTITY``), ``new_name`` (default
    ``<column>_NEW``).

    Changes: ``ALTER TABLE ... RENAME COLUMN`` before the night's load; the night's rows arrive under the
    new name. Persists (later nights load into the renamed column) until ``repair`` renames it back.

    A data engineer sees: the job failed: the node reading the column (``STG_ONHAND`` for on-hand
    quantities) fails with an invalid-identifier error naming the old column and is left empty; nodes
    downstream of it are not built and keep the previous night's data; other branches build. RAW's
    columns differ from the Source node's. A column no node reads (``ONHAND_QUANTITIES_ID``) changes
    nothing downstream: the job stays green.
    """

    kind = "column_renamed"
    params = frozenset({"table", "column", "new_name"})
    EVENT = events.ColumnRenamed

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        column = given.get("column", "TRANSACTION_QUANTITY")
        return {"table": ONHAND, "column": column, "new_name": f"{column}_NEW"}

    @classmethod
    def check(cls, fault: Fault) -> None:
        _check_schema_fault(fault)
        if fault.new_name is None or not _IDENTIFIER.match(fault.new_name) or fault.new_name == fault.column:
            raise ValueError(f"new_name: {fault.new_name!r} is not a new upper-case column name")

    @classmethod
    def persists(cls, fault: Fault) -> bool:
        return True

    def event(self, ctx: FaultContext) -> events.Event:
        table, column = _schema_target(ctx)
        return self.EVENT(kind=self.kind, table=table, column=column, new_name=ctx.fault.new_name)

    def repair(self, ctx: FaultContext) -> None:
        self.event(ctx).repair(ctx.world, ctx.cur, ctx.coalesce)


class ColumnDropped(GenericKind):
    """A source column is dropped: Qlik replicates an EBS DDL change to the RAW table.

    Parameters: ``table`` (``MTL_ONHAND_QUANTITIES_DETAIL``, the default, ``OE_ORDER_LINES_ALL`` or
    ``MTL_SYSTEM_ITEMS_B``), ``column`` (default ``TRANSACTION_QUANTITY``).

    Changes: ``ALTER TABLE ... DROP COLUMN`` before the night's load; the night's rows arrive without it.
    Persists until ``repair``, which rebuilds the table in the project's shape and reloads it (Qlik's
    reload after a schema change: on-hand's latest snapshot, every night's order lines, the item master).

    A data engineer sees: the job failed: the node reading the column fails with an invalid-identifier
    error and is left empty; nodes downstream of it are not built and keep the previous night's data.
    RAW has one column fewer than the Source node declares.
    """

    kind = "column_dropped"
    params = frozenset({"table", "column"})
    EVENT = events.ColumnDropped

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {"table": ONHAND, "column": "TRANSACTION_QUANTITY"}

    @classmethod
    def check(cls, fault: Fault) -> None:
        _check_schema_fault(fault)

    @classmethod
    def persists(cls, fault: Fault) -> bool:
        return True

    def event(self, ctx: FaultContext) -> events.Event:
        table, column = _schema_target(ctx)
        return self.EVENT(kind=self.kind, table=table, column=column)

    def repair(self, ctx: FaultContext) -> None:
        # Qlik reloads the table after a schema change: the column comes back with its values.
        table, _ = _schema_target(ctx)
        ctx.world._rebuild_table(ctx.cur, table, ctx.night)


def _check_schema_fault(fault: Fault) -> None:
    if fault.table not in _SCHEMA_TABLES:
        raise ValueError(f"table: {fault.table!r}; {fault.kind} changes one of {list(_SCHEMA_TABLES)}")
    if fault.column in _WORLD_KEYS.get(fault.table, set()):
        raise ValueError(f"column: {fault.column} of {fault.table} is how the world knows what it played")


class NodeFailure(GenericKind):
    """A Coalesce node fails.

    Parameters: ``node`` (default ``FCT_INVENTORY_POSITION``), ``mode``:

    - ``sql`` (default): an engineer deploys a change to the node that adds a column ``<COL>_V2`` reading
      a column its source does not have (through the simulator's workspace and deploy endpoints, as in
      the Coalesce app). Persists until ``repair`` removes that column and deploys again.
    - ``test``: a data condition fails a node test: a few on-hand positions (5, chosen from the seed) go
      negative in EBS, which fails ``FCT_INVENTORY_POSITION``'s ``NO_NEGATIVE_ONHAND`` test. Night-scoped;
      ``node`` must be ``FCT_INVENTORY_POSITION``.

    A data engineer sees: the Coalesce run failed, the node failed (``sql``: its Insert Data query with an
    invalid-identifier error, the table left empty; ``test``: built, then its node test reporting 5 failing
    rows); the nodes downstream (``MART_DAYS_OF_SUPPLY``, ``MART_REORDER_CANDIDATES`` for the fact) not
    built, still holding the previous night's data; a deploy run in the run list just before (``sql``).
    """

    kind = "node_failure"
    params = frozenset({"node", "mode"})
    EVENT = events.NodeFailure
    NEGATIVE_POSITIONS: ClassVar[int] = 5

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {"node": "FCT_INVENTORY_POSITION", "mode": "sql"}

    @classmethod
    def check(cls, fault: Fault) -> None:
        if fault.mode == "test" and fault.node != "FCT_INVENTORY_POSITION":
            raise ValueError("node: mode test fails FCT_INVENTORY_POSITION's NO_NEGATIVE_ONHAND test only")

    @classmethod
    def persists(cls, fault: Fault) -> bool:
        return fault.mode == "sql"

    @classmethod
    def changes_load(cls, fault: Fault) -> bool:
        return fault.mode == "test"

    def event(self, ctx: FaultContext) -> events.Event:
        node = ctx.fault.node
        if not any(n.name == node and not n.is_source for n in ctx.world.project.file.nodes):
            raise WorldError(f"node_failure: project.yaml has no built node {node}")
        return self.EVENT(kind=self.kind, node=node)

    def transform(self, tables: Tables, ctx: FaultContext) -> Tables:
        # Mode test is the distributor's own: a data condition that fails its fact's node test.
        if ctx.fault.mode != "test":
            return tables
        frame = tables[ONHAND].copy()
        # Positions held in one subinventory only, so their on-hand sums negative.
        single = ~frame.duplicated(["ORGANIZATION_ID", "INVENTORY_ITEM_ID"], keep=False).to_numpy()
        rows = events.pick_rows(single, self.NEGATIVE_POSITIONS / single.sum(), ctx.rng())
        frame.loc[rows, "TRANSACTION_QUANTITY"] = -frame.loc[rows, "TRANSACTION_QUANTITY"]
        return {**tables, ONHAND: frame}

    def before_run(self, ctx: FaultContext) -> None:
        if ctx.fault.mode == "sql":
            super().before_run(ctx)

    def repair(self, ctx: FaultContext) -> None:
        if ctx.fault.mode == "test":
            super().repair(ctx)
        else:
            self.event(ctx).repair(ctx.world, ctx.cur, ctx.coalesce)


class SchedulerSkip(GenericKind):
    """The Coalesce Scheduler does not start the nightly job (paused schedule, scheduler outage).

    Parameters: none.

    Changes: the night's business day is applied to the sources as usual, but no run starts and the
    simulator clock is not moved to the night's 02:00. ``play_night`` returns status ``skipped`` with no
    run id. Nothing to repair: the next night's job builds from the then-current sources.

    A data engineer sees: no run of ``inventory_nightly`` for the night in Coalesce's run list; every
    built table keeps the previous night's data and build time (stale by a day), while RAW moved on
    (``MAX(_QLIK_LOADED_AT)`` newer than what the fact holds). No failure is reported anywhere: only a
    freshness expectation on the job or the tables catches it.
    """

    kind = "scheduler_skip"
    EVENT = events.SchedulerSkip

    def repair(self, ctx: FaultContext) -> None:
        pass


class SourceNotRefreshed(GenericKind):
    """One replicated table is not refreshed tonight while the rest of the replication moves on (its Qlik
    table task suspended), as opposed to ``replication_stalled``.

    Parameters: ``table`` (``MTL_ONHAND_QUANTITIES_DETAIL`` or ``OE_ORDER_LINES_ALL``).

    Changes: on-hand: the night's snapshot is not applied, the table keeps the previous night's rows and
    ``_QLIK_LOADED_AT``; order lines: the night's lines are not applied (the next night played brings them
    with its own, as Qlik catches up). The other table is applied as usual. ``repair`` applies the table's
    latest night.

    A data engineer sees: the job green on the usual schedule. On-hand: network units unchanged to the unit
    while shipments moved on, ``MAX(_QLIK_LOADED_AT)`` of RAW on-hand and of the fact a day old (the input
    freshness check fails). Order lines: no lines for the day in ``STG_DEMAND``, the 28-day average demand
    a little lower, on-hand fresh.
    """

    kind = "source_not_refreshed"
    params = frozenset({"table"})
    required = frozenset({"table"})
    EVENT = events.SourceNotRefreshed

    @classmethod
    def check(cls, fault: Fault) -> None:
        if fault.table not in _ORG_COLUMN:
            raise ValueError(
                f"table: {fault.table!r}; source_not_refreshed holds back one of {list(_ORG_COLUMN)}"
            )

    def event(self, ctx: FaultContext) -> events.Event:
        return self.EVENT(kind=self.kind, table=ctx.fault.table)


class NewOrgMapped(FaultKindBase):
    """Benign: EBS opens a new org and planning ops maps it the same day (the reference night done right).

    Parameters: ``org_id``, ``code``, ``name``, ``region`` (default: the world file's new org, DC7
    Dallas, South).

    Changes: at 10:30 planning ops adds the org's row to ``REGION_MAP``; at 14:00 EBS opens the org and
    posts the reference night's transfers (41,800 units over 1,260 SKUs out of DC2), applied by Qlik at
    14:06. The org stays open on later nights. Only one org can open per world, and the reference night
    cannot be played after it. Nothing to repair.

    A data engineer sees (and nothing should alarm): the job green; ``DIM_WAREHOUSE`` one row more; RAW
    and ``FCT_INVENTORY_POSITION`` holding the same units, both moving by the day's ordinary change
    (+0.2%); the fact's row count up by the new org's 1,260 positions; the reorder list unchanged (network
    days of supply do not move when stock moves between mapped warehouses).
    """

    kind = "new_org_mapped"
    params = frozenset({"org_id", "code", "name", "region"})
    benign = True

    @classmethod
    def persists(cls, fault: Fault) -> bool:
        return True

    def before_load(self, ctx: FaultContext) -> None:
        world, fault = ctx.world, ctx.fault
        ref = world.spec.reference_night
        org_id = fault.org_id or ref.new_org.id
        if org_id in {o.id for o in world.spec.orgs}:
            raise WorldError(f"new_org_mapped: org {org_id} already exists in the world file")
        defaults = ref.new_org if org_id == ref.new_org.id else None
        identity = {k: getattr(fault, k) or getattr(defaults, k, None) for k in ("code", "name", "region")}
        if missing := [k for k, v in identity.items() if v is None]:
            raise WorldError(f"new_org_mapped: {missing[0]} is needed for org {org_id}")
        if (opened := world._read_opening(ctx.cur)) is not None:
            raise WorldError(f"new_org_mapped: org {opened.org_id} already opened on night {opened.index}")
        world._insert_map_row(
            ctx.cur, org_id, identity["code"], identity["name"], identity["region"],
            ctx.utc_on_business_day(_MAP_ADDED_AT),
        )  # fmt: skip
        opening = world.reference_opening(ctx.night)
        world._insert_org(ctx.cur, org_id, identity["code"], opening.opened_at, opening.replicated_at)

    def repair(self, ctx: FaultContext) -> None:
        pass


class SteadyGrowth(FaultKindBase):
    """Benign: the business grows steadily: stock and shipments up by ``pct`` percent a night.

    Parameters: ``pct`` (default 0.2), ``since_night`` (required: the first night of the growth).

    Changes: on night n >= since_night, every on-hand quantity and the night's shipped and ordered units
    are multiplied by (1 + pct/100) ** (n - since_night + 1), rounded (rows whose quantity changes are
    stamped as changed that business day). The world keeps no memory of it: pass the fault on every
    night from ``since_night`` on (a night played without it returns to the base level, a drop; a repair
    of another fault reloads the sources at the base level too). Nothing to repair.

    A data engineer sees (and nothing should alarm): the job green; RAW and the fact growing together by
    ``pct`` a night (no reconciliation gap); row counts unchanged; days of supply and the reorder list
    steady.
    """

    kind = "steady_growth"
    params = frozenset({"pct", "since_night"})
    required = frozenset({"since_night"})
    benign = True

    @classmethod
    def defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {"pct": 0.2}

    @classmethod
    def check(cls, fault: Fault) -> None:
        if fault.pct == 0:
            raise ValueError("pct: 0 is no growth")

    def transform(self, tables: Tables, ctx: FaultContext) -> Tables:
        fault = ctx.fault
        assert fault.pct is not None and fault.since_night is not None
        if ctx.night < fault.since_night:
            raise WorldError(f"steady_growth: night {ctx.night} is before since_night {fault.since_night}")
        growth = (1 + fault.pct / 100) ** (ctx.night - fault.since_night + 1)
        onhand = tables[ONHAND].copy()
        before = onhand["TRANSACTION_QUANTITY"].to_numpy()
        onhand["TRANSACTION_QUANTITY"] = _scaled(onhand["TRANSACTION_QUANTITY"], growth)
        changed = onhand["TRANSACTION_QUANTITY"].to_numpy() != before
        day = np.datetime64(ctx.world.business_date(ctx.night), "s")
        stale = changed & (onhand["LAST_UPDATE_DATE"].to_numpy() < day)
        rng = ctx.rng("stamps")
        at = day + rng.uniform(6 * 3600, 22 * 3600, int(stale.sum())).astype("timedelta64[s]")
        onhand.loc[stale, "LAST_UPDATE_DATE"] = at
        lag = rng.uniform(2, 90, len(at)).astype("timedelta64[s]")
        onhand.loc[stale, "_QLIK_LOADED_AT"] = to_utc(at, ctx.world.spec.timezone) + lag
        lines = tables[ORDER_LINES].copy()
        for column in ("SHIPPED_QUANTITY", "ORDERED_QUANTITY"):
            lines[column] = _scaled(lines[column], growth)
        return {
            **tables,
            ONHAND: onhand[onhand["TRANSACTION_QUANTITY"] > 0],
            ORDER_LINES: lines[lines["SHIPPED_QUANTITY"] > 0],
        }

    def repair(self, ctx: FaultContext) -> None:
        pass


def coerce_fault(fault: Fault | dict[str, Any]) -> Fault:
    return fault if isinstance(fault, Fault) else Fault.model_validate(fault)


def kind_of(fault: Fault) -> FaultKindBase:
    return KINDS[fault.kind]()
