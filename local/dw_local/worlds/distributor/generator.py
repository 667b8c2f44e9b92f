"""The distributor world: loads Oracle EBS (as Qlik replicates it) and planning ops' region map into the
local Snowflake, and plays business nights through the Coalesce simulator.

Night ``n`` applies business day ``first_business_day + n`` (on-hand moves, order lines, replication
timestamps), then runs Coalesce job ``inventory_nightly`` at 02:00 America/Chicago the next day. The
world keeps no state of its own: what has been played is read back from Snowflake (the latest ship date,
and whether EBS has opened the new org), so any process can play the next night.

Timestamps are TIMESTAMP_NTZ: EBS columns (``LAST_UPDATE_DATE``, ``ACTUAL_SHIPMENT_DATE``) in EBS server
time (America/Chicago), ``_QLIK_LOADED_AT`` and ``REGION_MAP.UPDATED_AT`` in UTC.

A night can be played with events (``events.py``: the shared vocabulary and three kinds of its own): real
changes to the sources, the region map, the Coalesce project or the schedule, deterministic from the seed;
``repair`` undoes one, and Qlik then reloads what it left wrong.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

from dw_dagster.coalesce.client import CoalesceClient
from dw_local.scenarios.event_rows import where_sql
from dw_local.world import SnowflakeTarget, WorldError
from dw_local.worlds.distributor.events import EVENTS
from dw_local.worlds.distributor.model import WorldSpec, load_spec
from dw_local.worlds.distributor.simulation import (
    ITEMS,
    ONHAND,
    ORDER_LINES,
    ORGS,
    REGION_MAP,
    Opening,
    Simulation,
    build_catalog,
    line_id_range,
    line_night_sql,
    onhand_frame,
    order_lines_frame,
)
from dw_local.worlds.night_world import NightResult, NightWorld, rng_for

HERE = Path(__file__).resolve().parent
WORLD_FILE = HERE / "world.yaml"
PROJECT_FILE = HERE / "project.yaml"

__all__ = ["ITEMS", "ONHAND", "ORDER_LINES", "ORGS", "REGION_MAP", "DistributorWorld"]
MAP_OWNER = "planning-ops"  # who edits the region map
_MAP_EDITED_AT = time(15, 30)  # local: when planning ops edits the map on the business day
_NIGHT_LOADS = {ONHAND: "snapshot", ORDER_LINES: "append"}
# The column holding each night-loaded table's org.
_ORG_COLUMN = {ONHAND: "ORGANIZATION_ID", ORDER_LINES: "SHIP_FROM_ORG_ID"}
# The tables Qlik reloads after a schema change (the map and the orgs hold what nights added); the columns
# the world itself reads to know what it has played, which a schema event may not touch.
_SCHEMA_TABLES = (ONHAND, ORDER_LINES, ITEMS)
_WORLD_KEYS = {ORDER_LINES: {"LINE_ID", "ACTUAL_SHIPMENT_DATE"}}


class DistributorWorld(NightWorld):
    """The reference night's world: data from ``world.yaml``, Coalesce project ``project.yaml``; the
    project, tables, calendar, job and the play of a night's events are ``NightWorld``'s, the data its
    simulation's (``simulation.py``). It keeps no memory between nights: what has been played is read back
    from Snowflake, so any process can play the next night."""

    EVENTS = EVENTS
    name = "distributor"

    def __init__(self, spec: WorldSpec | None = None, where: Path = WORLD_FILE):
        spec = spec or load_spec(WORLD_FILE)
        super().__init__(spec, PROJECT_FILE, ZoneInfo(spec.timezone), where)
        self.spec: WorldSpec = spec
        self.catalog = build_catalog(self.spec)
        self.simulation = Simulation(self.spec, self.catalog)
        self._install: dict[str, pd.DataFrame] | None = None

    @classmethod
    def from_file(cls, path: Path | str) -> DistributorWorld:
        return cls(load_spec(Path(path)), Path(path))

    # -- the data, as frames ---------------------------------------------------------------------

    def install_frames(self) -> dict[str, pd.DataFrame]:
        spec, cat, sim = self.spec, self.catalog, self.simulation
        # Qlik's full load ran before the order-line history starts; later rows came by CDC.
        full_load_local = datetime.combine(self.business_date(-spec.demand.history_days - 1), time(23, 0))
        full_load = self.utc(full_load_local)
        rng = rng_for(spec.seed, "item-dates")
        age = rng.integers(1, 730 * 86400, len(cat.item_ids)).astype("timedelta64[s]")
        created = np.datetime64(full_load_local, "s") - age
        items = pd.DataFrame({
            "INVENTORY_ITEM_ID": cat.item_ids,
            "SEGMENT1": cat.skus,
            "DESCRIPTION": cat.descriptions,
            "PRIMARY_UOM_CODE": cat.uoms,
            "INVENTORY_ITEM_STATUS_CODE": "Active",
            "LAST_UPDATE_DATE": created,
            "_QLIK_LOADED_AT": full_load,
        })  # fmt: skip
        org_set_up = datetime.combine(self.business_date(-900), time(9, 30))
        orgs = pd.DataFrame({
            "ORGANIZATION_ID": [o.id for o in spec.orgs],
            "ORGANIZATION_CODE": [o.code for o in spec.orgs],
            "LAST_UPDATE_DATE": org_set_up,
            "_QLIK_LOADED_AT": full_load,
        })  # fmt: skip
        region_map = pd.DataFrame({
            "ORGANIZATION_ID": [o.id for o in spec.orgs],
            "WAREHOUSE_CODE": [o.code for o in spec.orgs],
            "WAREHOUSE_NAME": [o.name for o in spec.orgs],
            "REGION": [o.region for o in spec.orgs],
            "UPDATED_BY": MAP_OWNER,
            "UPDATED_AT": self.utc(datetime.combine(self.business_date(-200), time(10, 15))),
        })  # fmt: skip
        history = [self._order_lines(t, None) for t in range(-spec.demand.history_days, 0)]
        return {
            ITEMS: items,
            ORGS: orgs,
            REGION_MAP: region_map,
            ONHAND: onhand_frame(spec, cat, sim.day(-1), None),
            ORDER_LINES: pd.concat(history, ignore_index=True),
        }

    def night_tables(self, night: int, opening: Opening | None = None) -> dict[str, pd.DataFrame]:
        """The on-hand table at the close of business day ``night`` and that day's order lines."""
        spec, cat = self.spec, self.catalog
        self.simulation.set_reference_index(opening.index if opening else None)
        day = self.simulation.day(night)
        return {
            ONHAND: onhand_frame(spec, cat, day, opening),
            ORDER_LINES: order_lines_frame(spec, cat, night, day.ordered, day.shipped, day.ship_at),
        }

    def _order_lines(self, t: int, opening: Opening | None) -> pd.DataFrame:
        """Business day ``t``'s order lines; before the first night, the history Qlik's full load brought."""
        if t < 0:
            ordered, ship_at = self.simulation.demand(t)
            return order_lines_frame(self.spec, self.catalog, t, ordered, ordered, ship_at)
        self.simulation.set_reference_index(opening.index if opening else None)
        day = self.simulation.day(t)
        return order_lines_frame(self.spec, self.catalog, t, day.ordered, day.shipped, day.ship_at)

    def _order_line_totals(self, t: int, opening: Opening | None) -> tuple[int, int, int]:
        """(lines, shipped units, ordered units) of business day ``t``, without building its frame."""
        if t < 0:
            ordered = shipped = self.simulation.demand(t)[0]
        else:
            self.simulation.set_reference_index(opening.index if opening else None)
            day = self.simulation.day(t)
            ordered, shipped = day.ordered, day.shipped
        keep = shipped > 0
        return int(keep.sum()), int(shipped[keep].sum()), int(ordered[keep].sum())

    def reference_opening(self, night: int) -> Opening:
        """EBS opens the new org and posts the transfers on business day ``night``; Qlik applies them."""
        ref, d = self.spec.reference_night, self.business_date(night)
        replicated = self.utc(datetime.combine(d, ref.replicated_at))
        return Opening(night, datetime.combine(d, ref.opened_at), replicated)

    # -- the sources, as events read them ------------------------------------------------------

    def source_load(self, name: str) -> str:
        return _NIGHT_LOADS.get(name, "once")

    def once_frame(self, name: str) -> pd.DataFrame:
        if self._install is None:
            self._install = self.install_frames()
        return self._install[name]

    def possible_values(self, name: str, column: str) -> set | None:
        if _ORG_COLUMN.get(name) == column:
            return {o.id for o in self.spec.orgs} | {self.spec.reference_night.new_org.id}
        return super().possible_values(name, column)

    def edit_stamp(self, table: str, night: int) -> dict:
        if table != REGION_MAP:
            return {}
        edited = self.utc(datetime.combine(self.business_date(night), _MAP_EDITED_AT))
        return {"UPDATED_BY": MAP_OWNER, "UPDATED_AT": edited}

    def parse_event(self, raw):
        event = super().parse_event(raw)
        if event.kind in ("column_renamed", "column_dropped"):
            if event.table not in _SCHEMA_TABLES:
                raise ValueError(f"table: {event.table}; {event.kind} changes one of {list(_SCHEMA_TABLES)}")
            if event.column in _WORLD_KEYS.get(event.table, ()):
                raise ValueError(
                    f"column: {event.column} of {event.table} is how the world knows what it played"
                )
        return event

    # -- what has been played, read back from Snowflake ---------------------------------------

    def opening(self, cur) -> Opening | None:
        """The org EBS opened after install (the reference night's, or its mapped twin's), if any."""
        known = ", ".join(str(o.id) for o in self.spec.orgs)
        cur.execute(
            'SELECT "ORGANIZATION_ID", "LAST_UPDATE_DATE", "_QLIK_LOADED_AT" '
            f"FROM {self.tables[ORGS].qualified} "
            f'WHERE "ORGANIZATION_ID" NOT IN ({known}) ORDER BY "LAST_UPDATE_DATE"'
        )
        rows = cur.fetchall()
        if not rows:
            return None
        if len(rows) > 1:
            raise WorldError(f"{ORGS}: orgs {[r[0] for r in rows]} opened; the world plays one new org")
        org, opened_at, replicated_at = rows[0]
        index = (opened_at.date() - self.spec.first_business_day).days
        return Opening(index, opened_at, replicated_at, int(org))

    def read_opening(self, sf: SnowflakeTarget) -> Opening | None:
        """The org opened after install, if any, as read back from EBS (``MTL_PARAMETERS``)."""
        with self.cursor(sf) as cur:
            return self.opening(cur)

    def last_played_night(self, sf: SnowflakeTarget) -> int:
        """The latest business day loaded (-1: none since install), read from the order lines."""
        with self.cursor(sf) as cur:
            return self._last_played(cur)

    def _last_played(self, cur) -> int:
        cur.execute(f'SELECT MAX("ACTUAL_SHIPMENT_DATE") FROM {self.tables[ORDER_LINES].qualified}')
        latest = cur.fetchone()[0]
        if latest is None:
            raise WorldError(f"{ORDER_LINES} is empty: install the world first")
        return (latest.date() - self.spec.first_business_day).days

    # -- nights (played by NightWorld.play_night) ------------------------------------------------

    def night_rows(self, cur, night: int, events) -> dict[str, pd.DataFrame]:
        return self.night_tables(night, self.opening(cur))

    def transformed(self, frames, night: int, events) -> dict[str, pd.DataFrame]:
        frames = super().transformed(frames, night, events)
        # EBS keeps no order line that ships nothing (a unit change can round one down to zero).
        lines = frames[ORDER_LINES]
        return {**frames, ORDER_LINES: lines[lines["SHIPPED_QUANTITY"] != 0]}

    def apply_night(self, cur, night: int, frames, held) -> None:
        """Qlik applies business day ``night``: the on-hand snapshot, and the order lines of that day plus
        any day it missed since the last one applied (after a stalled night); a ``held`` table is not
        applied tonight."""
        if ONHAND not in held:
            cur.execute(f"TRUNCATE TABLE {self.tables[ONHAND].qualified}")
            self.load(cur, ONHAND, frames[ONHAND])
        if ORDER_LINES in held:
            return  # the next night applied catches up from the last ship date held
        # Replaying a night replaces its own order lines instead of adding them twice.
        start = min(self._last_played(cur) + 1, night)
        opening = self.opening(cur)
        missed = [self._order_lines(t, opening) for t in range(start, night)]
        cur.execute(
            f'DELETE FROM {self.tables[ORDER_LINES].qualified} WHERE "LINE_ID" >= %s AND "LINE_ID" < %s',
            (line_id_range(start)[0], line_id_range(night)[1]),
        )
        self.load(cur, ORDER_LINES, pd.concat([*missed, frames[ORDER_LINES]], ignore_index=True))

    def after_repair(self, cur, coalesce: CoalesceClient, event, night: int | None) -> None:
        """Qlik reloads the tables the event left wrong, for the latest night (the later of the latest
        business day applied and the night of the latest job run); planning ops' fix of the region map is
        stamped the morning after."""
        night = self._current_night(cur, coalesce) if night is None else night
        for name in sorted(event.reloaded(self)):
            self._rebuild_table(cur, name, night)
        if event.edits_reference() == REGION_MAP:
            clause, args = where_sql(event.where)
            cur.execute(
                f'UPDATE {self.tables[REGION_MAP].qualified} SET "UPDATED_BY" = %s, "UPDATED_AT" = %s '
                f"WHERE {clause}",
                (MAP_OWNER, self._map_fix_time(night), *args),
            )

    def _current_night(self, cur, coalesce: CoalesceClient | None) -> int:
        night = self._last_played(cur)
        if coalesce is not None:
            env = self.spec.environment_id
            runs = coalesce.list_runs(
                env, run_type="refresh", order_by="id", order_by_direction="desc", limit=1
            ).data
            if runs and runs[0].run_start_time is not None:
                local_day = runs[0].run_start_time.astimezone(self.tz).date() - timedelta(days=1)
                night = max(night, (local_day - self.spec.first_business_day).days)
        return night

    def _rebuild_table(self, cur, name: str, night: int) -> None:
        """Recreates a source table in project.yaml's shape and reloads it, as Qlik's table reload does."""
        self.create_table(cur, name)
        if name == ONHAND:
            self.load(cur, ONHAND, self.night_tables(night, self.opening(cur))[ONHAND])
        elif name == ORDER_LINES:
            self._resync_order_lines(cur, night)
        elif name == ITEMS:
            self.load(cur, name, self.once_frame(name))
        else:
            raise WorldError(f"{name}: the world does not reload it")

    def _resync_order_lines(self, cur, through: int) -> None:
        """Reloads every business day's order lines (history included, through ``through``) whose line
        count or units differ from what EBS holds."""
        lines = self.tables[ORDER_LINES].qualified
        cur.execute(
            f'SELECT {line_night_sql()}, COUNT(*), SUM("SHIPPED_QUANTITY"), SUM("ORDERED_QUANTITY") '
            f"FROM {lines} GROUP BY 1"
        )
        held = {int(t): (int(n), int(s or 0), int(o or 0)) for t, n, s, o in cur.fetchall()}
        opening = self.opening(cur)
        days = range(-self.spec.demand.history_days, through + 1)
        stale = [t for t in days if held.get(t) != self._order_line_totals(t, opening)]
        if not stale:
            return
        cur.execute(f"DELETE FROM {lines} WHERE {line_night_sql()} IN ({', '.join(map(str, stale))})")
        reloaded = pd.concat([self._order_lines(t, opening) for t in stale], ignore_index=True)
        self.load(cur, ORDER_LINES, reloaded)

    # -- EBS orgs and the region map -------------------------------------------------------------

    def insert_org(self, cur, org_id: int, code: str, opened_at: datetime, replicated_at: datetime) -> None:
        cur.execute(
            f"INSERT INTO {self.tables[ORGS].qualified} "
            '("ORGANIZATION_ID", "ORGANIZATION_CODE", "LAST_UPDATE_DATE", "_QLIK_LOADED_AT") '
            "VALUES (%s, %s, %s, %s)",
            (org_id, code, opened_at, replicated_at),
        )

    def insert_map_row(self, cur, org_id: int, code: str, name: str, region: str, at: datetime) -> None:
        cur.execute(
            f'INSERT INTO {self.tables[REGION_MAP].qualified} ("ORGANIZATION_ID", "WAREHOUSE_CODE", '
            '"WAREHOUSE_NAME", "REGION", "UPDATED_BY", "UPDATED_AT") VALUES (%s, %s, %s, %s, %s, %s)',
            (org_id, code, name, region, MAP_OWNER, at),
        )

    def _map_fix_time(self, night: int) -> datetime:
        """UTC: the morning after ``night``, when planning ops fixes the map."""
        morning = self.business_date(night + 1)
        return self.utc(datetime.combine(morning, self.spec.reference_night.map_fixed_at))

    def check_no_org_opened(self, cur) -> None:
        if (previous := self.opening(cur)) is not None:
            raise WorldError(f"org {previous.org_id} already opened on night {previous.index}")

    def open_org(self, cur, night: int, org_id: int, code: str) -> None:
        """EBS opens the org on business day ``night`` and posts the reference night's transfers into it."""
        self.check_no_org_opened(cur)
        opening = self.reference_opening(night)
        self.insert_org(cur, org_id, code, opening.opened_at, opening.replicated_at)

    def map_new_org(self, cur, at: datetime | None = None) -> None:
        """Planning ops adds the reference night's new org to the region map (by default the morning after
        the latest night), unless it is there."""
        new_org = self.spec.reference_night.new_org
        cur.execute(
            f'SELECT COUNT(*) FROM {self.tables[REGION_MAP].qualified} WHERE "ORGANIZATION_ID" = %s',
            (new_org.id,),
        )
        if not cur.fetchone()[0]:
            at = at or self._map_fix_time(self._last_played(cur))
            self.insert_map_row(cur, new_org.id, new_org.code, new_org.name, new_org.region, at)

    def play_reference_night(
        self, sf: SnowflakeTarget, coalesce: CoalesceClient, night_index: int | None = None
    ) -> NightResult:
        """The reference night (``events.ReferenceNight``), on the next unplayed night unless given."""
        night = self.last_played_night(sf) + 1 if night_index is None else night_index
        return self.play_night(sf, coalesce, night, [{"kind": "new_key_unmapped"}])

    def apply_region_map_fix(self, sf: SnowflakeTarget, at: datetime | None = None) -> None:
        """Planning ops adds the new org to the region map (by default the morning after the latest night).

        ``at`` is UTC (naive) or aware."""
        if at is not None and at.tzinfo is not None:
            at = at.astimezone(UTC).replace(tzinfo=None)
        with self.cursor(sf) as cur:
            self.map_new_org(cur, at)
