"""The events the distributor world plays: the shared vocabulary (``local/dw_local/scenarios/events.py``), with
parameters naming its tables and columns (``where: {ORGANIZATION_ID: 7020}`` on on-hand, ``SHIP_FROM_ORG_ID``
on order lines), the reference night (``new_key_unmapped``, as ``world.yaml`` defines it, without parameters) and three
kinds only this world has:

- ``node_failure`` with ``mode: test``: a data condition fails a node test;
- ``new_org_mapped`` (or ``new_key_mapped``): EBS opens a new org and planning ops maps it the same day
  (the reference night done right);
- ``steady_growth`` of the units held and shipped, not of the number of rows.

What each looks like to a data engineer on this world is ``faults.md``.
"""

from __future__ import annotations

from datetime import datetime, time
from typing import ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from dw_local.scenarios import benign_events, fault_events
from dw_local.scenarios.event_base import Event
from dw_local.scenarios.event_rows import pick_rows
from dw_local.scenarios.events import vocabulary
from dw_local.world import WorldError
from dw_local.worlds.distributor.simulation import ONHAND, ORDER_LINES, REGION_MAP
from dw_local.worlds.night_world import rng_for, to_utc

_FACT = "FCT_INVENTORY_POSITION"
_MAP_ADDED_AT = time(10, 30)  # local: when planning ops adds a new org's row, before EBS opens it


class NodeFailure(fault_events.NodeFailure):
    """``node_failure``, with ``mode``: ``sql`` (the default) is the shared kind (a broken node change
    deployed, until repaired); ``test`` is a data condition: 5 on-hand positions (chosen from the seed) go
    negative in EBS, which fails ``FCT_INVENTORY_POSITION``'s ``NO_NEGATIVE_ONHAND`` test. Night-scoped;
    ``node`` must be ``FCT_INVENTORY_POSITION``."""

    mode: Literal["sql", "test"] = "sql"
    NEGATIVE_POSITIONS: ClassVar[int] = 5

    @property
    def persists(self) -> bool:  # type: ignore[override]
        return self.mode == "sql"

    def check(self, world):
        super().check(world)
        if self.mode == "test" and self.node != _FACT:
            raise ValueError(f"node: mode test fails {_FACT}'s NO_NEGATIVE_ONHAND test only")

    def changes_load(self):
        return self.mode == "test"

    def reloaded(self, world):
        return {ONHAND} if self.mode == "test" else set()

    def transform(self, world, frames, night):
        if self.mode != "test":
            return frames
        frame = frames[ONHAND].copy()
        # Positions held in one subinventory only, so their on-hand sums negative.
        single = ~frame.duplicated(["ORGANIZATION_ID", "INVENTORY_ITEM_ID"], keep=False).to_numpy()
        rng = rng_for(world.spec.seed, "fault/node_failure/", night)
        rows = pick_rows(single, self.NEGATIVE_POSITIONS / single.sum(), rng)
        frame.loc[rows, "TRANSACTION_QUANTITY"] = -frame.loc[rows, "TRANSACTION_QUANTITY"]
        return {**frames, ONHAND: frame}

    def before_run(self, world, coalesce):
        if self.mode == "sql":
            super().before_run(world, coalesce)

    def repair(self, world, cur, coalesce):
        if self.mode == "sql":
            super().repair(world, cur, coalesce)


class SteadyGrowth(benign_events.SteadyGrowth):
    """Benign: the business grows steadily: on night n >= ``since_night`` every on-hand quantity and the
    night's shipped and ordered units are multiplied by (1 + pct/100) ** (n - since_night + 1), rounded
    (rows whose quantity changes are stamped as changed that business day). ``pct`` defaults to 0.2. The
    world keeps no memory of it: list it on every night from ``since_night`` on (a night without it returns
    to the base level; a repair of another fault reloads the sources at the base level too)."""

    pct: float = Field(default=0.2, ge=-5, le=5)

    @field_validator("pct")
    @classmethod
    def _grows(cls, pct: float) -> float:
        if pct == 0:
            raise ValueError("0 is no growth")
        return pct

    def tables(self):
        return [ONHAND]

    def growth(self, night):
        return 1.0  # the rows stay as many; their units grow (``transform``)

    def transform(self, world, frames, night):
        if night < self.since_night:
            raise WorldError(f"steady_growth: night {night} is before since_night {self.since_night}")
        growth = (1 + self.pct / 100) ** (night - self.since_night + 1)
        onhand = frames[ONHAND].copy()
        before = onhand["TRANSACTION_QUANTITY"].to_numpy()
        onhand["TRANSACTION_QUANTITY"] = _scaled(onhand["TRANSACTION_QUANTITY"], growth)
        changed = onhand["TRANSACTION_QUANTITY"].to_numpy() != before
        day = np.datetime64(world.business_date(night), "s")
        stale = changed & (onhand["LAST_UPDATE_DATE"].to_numpy() < day)
        rng = rng_for(world.spec.seed, "fault/steady_growth/stamps", night)
        at = day + rng.uniform(6 * 3600, 22 * 3600, int(stale.sum())).astype("timedelta64[s]")
        onhand.loc[stale, "LAST_UPDATE_DATE"] = at
        lag = rng.uniform(2, 90, len(at)).astype("timedelta64[s]")
        onhand.loc[stale, "_QLIK_LOADED_AT"] = to_utc(at, world.spec.timezone) + lag
        lines = frames[ORDER_LINES].copy()
        for column in ("SHIPPED_QUANTITY", "ORDERED_QUANTITY"):
            lines[column] = _scaled(lines[column], growth)
        return {**frames, ONHAND: onhand[onhand["TRANSACTION_QUANTITY"] > 0], ORDER_LINES: lines}


def _scaled(values: pd.Series, factor: float) -> np.ndarray:
    return np.rint(values.to_numpy(dtype=float) * factor).astype(np.int64)


class ReferenceNight(Event):
    """The reference night (PRODUCT.md), the world's ``new_key_unmapped``: at 14:00 EBS opens the new org of
    ``world.yaml`` and posts the transfers out of the from-org (41,800 units over 1,260 SKUs), applied by
    Qlik at 14:06; planning ops' region map has no row for the org. Persists until repaired: planning ops
    adds the row the morning after. Played alone on its night."""

    kind: Literal["new_key_unmapped"]
    persists: ClassVar[bool] = True

    def tables(self):
        return [ONHAND, REGION_MAP]

    def before_load(self, world, cur, night):
        new_org = world.spec.reference_night.new_org
        world.open_org(cur, night, new_org.id, new_org.code)

    def repair(self, world, cur, coalesce):
        world.map_new_org(cur)


class NewOrgMapped(Event):
    """Benign: EBS opens a new org and planning ops maps it the same day: at 10:30 planning ops adds the
    org's row to ``REGION_MAP``; at 14:00 EBS opens the org and posts the reference night's transfers,
    applied by Qlik at 14:06. ``org_id``, ``code``, ``name``, ``region`` default to the world file's new org
    (DC7 Dallas, South). The org stays open on later nights; one org can open per world, and the reference
    night cannot be played after it."""

    kind: Literal["new_org_mapped", "new_key_mapped"]
    org_id: int | None = Field(default=None, gt=0)
    code: str | None = Field(default=None, min_length=1)
    name: str | None = Field(default=None, min_length=1)
    region: str | None = Field(default=None, min_length=1)
    benign: ClassVar[bool] = True
    persists: ClassVar[bool] = True

    def tables(self):
        return [ONHAND]

    def _identity(self, world) -> tuple[int, dict[str, str | None]]:
        new_org = world.spec.reference_night.new_org
        org_id = self.org_id or new_org.id
        defaults = new_org if org_id == new_org.id else None
        return org_id, {k: getattr(self, k) or getattr(defaults, k, None) for k in ("code", "name", "region")}

    def check(self, world):
        org_id, identity = self._identity(world)
        if org_id in {o.id for o in world.spec.orgs}:
            raise ValueError(f"org_id: org {org_id} already exists in the world file")
        if missing := [k for k, v in identity.items() if v is None]:
            raise ValueError(f"{missing[0]}: new_org_mapped needs it for org {org_id}")

    def before_load(self, world, cur, night):
        org_id, identity = self._identity(world)
        world.check_no_org_opened(cur)
        added = world.utc(datetime.combine(world.business_date(night), _MAP_ADDED_AT))
        world.insert_map_row(cur, org_id, identity["code"], identity["name"], identity["region"], added)
        world.open_org(cur, night, org_id, identity["code"])


# The shared kinds, with its own node_failure and steady_growth; a new key on this world is its new org (the
# reference night, ``new_org_mapped``); it has no column_added.
DISTRIBUTOR_KINDS: tuple[type, ...] = (
    fault_events.ReferenceRowDeleted,
    fault_events.ReferenceRowRemapped,
    fault_events.DuplicateLoad,
    fault_events.PartialLoad,
    fault_events.ReplicationStalled,
    fault_events.UnitChange,
    fault_events.NullJoinKey,
    fault_events.ColumnRenamed,
    fault_events.ColumnDropped,
    NodeFailure,
    fault_events.SchedulerSkip,
    fault_events.SourceNotRefreshed,
    ReferenceNight,
    NewOrgMapped,
    SteadyGrowth,
)
EVENTS = vocabulary(DISTRIBUTOR_KINDS)
