"""The distributor world: loads Oracle EBS (as Qlik replicates it) and planning ops' region map into the
local Snowflake, and plays business nights through the Coalesce simulator.

Night ``n`` applies business day ``first_business_day + n`` (on-hand moves, order lines, replication
timestamps), then runs Coalesce job ``inventory_nightly`` at 02:00 America/Chicago the next day. The
world keeps no state of its own: what has been played is read back from Snowflake (the latest ship date,
and whether EBS has opened the new org), so any process can play the next night.

Timestamps are TIMESTAMP_NTZ: EBS columns (``LAST_UPDATE_DATE``, ``ACTUAL_SHIPMENT_DATE``) in EBS server
time (America/Chicago), ``_QLIK_LOADED_AT`` and ``REGION_MAP.UPDATED_AT`` in UTC.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from time import monotonic, sleep
from zoneinfo import ZoneInfo

import httpx
import numpy as np
import pandas as pd

from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.models import CoalesceUserCredentials
from dw_local.coalesce_sim.project import load_project
from dw_local.world import (
    LOCAL_COALESCE_TOKEN,
    LOCAL_SNOWFLAKE_PASSWORD,
    LOCAL_SNOWFLAKE_USER,
    SnowflakeTarget,
    WorldError,
)
from dw_local.worlds.distributor.model import WorldSpec, load_spec
from dw_local.worlds.distributor.simulation import (
    Opening,
    Simulation,
    build_catalog,
    line_id_range,
    onhand_frame,
    order_lines_frame,
    rng_for,
    to_utc,
)

HERE = Path(__file__).resolve().parent
WORLD_FILE = HERE / "world.yaml"
PROJECT_FILE = HERE / "project.yaml"

ONHAND = "MTL_ONHAND_QUANTITIES_DETAIL"
ITEMS = "MTL_SYSTEM_ITEMS_B"
ORGS = "MTL_PARAMETERS"
ORDER_LINES = "OE_ORDER_LINES_ALL"
REGION_MAP = "REGION_MAP"

_CSV_TIME = "%Y-%m-%d %H:%M:%S"
_WAREHOUSE = "LOCAL_WH"
_MAP_OWNER = "planning-ops"


@dataclass(frozen=True)
class NightResult:
    night: int
    business_date: date
    scheduled_at: datetime  # the job's start on the simulator clock, in the world's time zone
    run_id: int
    status: str  # the Coalesce run status: completed, failed or canceled


@dataclass(frozen=True)
class _Table:
    qualified: str  # "DB"."SCHEMA"."NAME"
    columns: list[str]
    ddl: str  # the column definitions


class DistributorWorld:
    """The reference night's world: data from ``world.yaml``, Coalesce project ``project.yaml``."""

    def __init__(self, spec: WorldSpec | None = None):
        self.spec = spec or load_spec(WORLD_FILE)
        self.project_file = PROJECT_FILE
        self._tz = ZoneInfo(self.spec.timezone)
        self._tables, self._schemas, self.database = self._read_project()
        self.catalog = build_catalog(self.spec)
        self.simulation = Simulation(self.spec, self.catalog)

    @classmethod
    def from_file(cls, path: Path | str) -> DistributorWorld:
        return cls(load_spec(Path(path)))

    def _read_project(self) -> tuple[dict[str, _Table], list[str], str]:
        # The simulator's own reader; the Source nodes' columns are the RAW tables' DDL, so the project
        # and the data cannot drift apart.
        project = load_project(self.project_file)
        env = project.environment(self.spec.environment_id)
        if env is None or project.job(self.spec.job_id) is None:
            raise WorldError(
                f"{self.project_file}: no environment {self.spec.environment_id} or no job {self.spec.job_id}"
            )
        tables = {}
        for node in project.file.nodes:
            if node.is_source:
                database, schema, name = env.table(node.locationName, node.name)
                ddl = [f'"{c.name}" {c.dataType}' + ("" if c.nullable else " NOT NULL") for c in node.columns]
                columns = [c.name for c in node.columns]
                tables[name] = _Table(f'"{database}"."{schema}"."{name}"', columns, ", ".join(ddl))
        databases = {m.database for m in env.storageMappings.values()}
        if len(databases) != 1:
            raise WorldError(f"{self.project_file}: environment {env.id} spans {sorted(databases)}")
        schemas = [f'"{m.database}"."{m.schema_name}"' for m in env.storageMappings.values()]
        return tables, schemas, databases.pop()

    # -- calendar --------------------------------------------------------------------------------

    def business_date(self, night: int) -> date:
        return self.simulation.business_date(night)

    def scheduled_at(self, night: int) -> datetime:
        """When the Coalesce Scheduler starts the nightly job after business day ``night``."""
        return datetime.combine(self.business_date(night) + timedelta(days=1), self.spec.night_time, self._tz)

    def _utc(self, local: datetime) -> datetime:
        return to_utc(np.array([np.datetime64(local, "s")]), self.spec.timezone)[0].item()

    # -- the data, as frames ---------------------------------------------------------------------

    def install_tables(self) -> dict[str, pd.DataFrame]:
        """Every source table's rows before the first night, by Source node name."""
        spec, cat, sim = self.spec, self.catalog, self.simulation
        # Qlik's full load ran before the order-line history starts; later rows came by CDC.
        full_load_local = datetime.combine(self.business_date(-spec.demand.history_days - 1), time(23, 0))
        full_load = self._utc(full_load_local)
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
            "UPDATED_BY": _MAP_OWNER,
            "UPDATED_AT": self._utc(datetime.combine(self.business_date(-200), time(10, 15))),
        })  # fmt: skip
        history = []
        for t in range(-spec.demand.history_days, 0):
            ordered, ship_at = sim.demand(t)
            history.append(order_lines_frame(spec, cat, t, ordered, ordered, ship_at))
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

    def reference_opening(self, night: int) -> Opening:
        """EBS opens the new org and posts the transfers on business day ``night``; Qlik applies them."""
        ref, d = self.spec.reference_night, self.business_date(night)
        replicated = self._utc(datetime.combine(d, ref.replicated_at))
        return Opening(night, datetime.combine(d, ref.opened_at), replicated)

    # -- Snowflake -------------------------------------------------------------------------------

    @contextmanager
    def _cursor(self, sf: SnowflakeTarget) -> Iterator:
        with closing(sf.connect(database=self.database)) as conn:
            yield conn.cursor()

    def install(self, sf: SnowflakeTarget) -> None:
        """Creates the database, every schema of the environment, the source tables and their day-0 rows."""
        with self._cursor(sf) as cur:
            for schema in self._schemas:
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            for table in self._tables.values():
                cur.execute(f"CREATE OR REPLACE TABLE {table.qualified} ({table.ddl})")
            for name, frame in self.install_tables().items():
                self._load(cur, name, frame)

    def _load(self, cur, name: str, frame: pd.DataFrame) -> None:
        # PUT + COPY: the fast path into fakesnow (executemany and big VALUES lists are slow).
        table = self._tables[name]
        columns = table.columns
        if set(frame.columns) != set(columns):
            raise WorldError(f"{name}: generated columns {sorted(frame.columns)}, project.yaml's {columns}")
        with tempfile.TemporaryDirectory(prefix="dw-world-") as tmp:
            path = Path(tmp) / f"{name.lower()}.csv"
            frame[columns].to_csv(path, index=False, header=False, date_format=_CSV_TIME)
            cur.execute(f'CREATE TEMPORARY STAGE IF NOT EXISTS {self.database}.PUBLIC."DW_WORLD_LOAD"')
            stage = f'@{self.database}.PUBLIC."DW_WORLD_LOAD"'
            cur.execute(f"PUT file://{path} {stage} AUTO_COMPRESS=FALSE OVERWRITE=TRUE")
            cur.execute(
                f"COPY INTO {table.qualified} FROM {stage}/{path.name} "
                "FILE_FORMAT=(TYPE=CSV FIELD_OPTIONALLY_ENCLOSED_BY='\"') PURGE=TRUE FORCE=TRUE"
            )

    def _read_opening(self, cur) -> Opening | None:
        ref = self.spec.reference_night
        cur.execute(
            f'SELECT "LAST_UPDATE_DATE", "_QLIK_LOADED_AT" FROM {self._tables[ORGS].qualified} '
            'WHERE "ORGANIZATION_ID" = %s',
            (ref.new_org.id,),
        )
        row = cur.fetchone()
        if row is None:
            return None
        return Opening((row[0].date() - self.spec.first_business_day).days, row[0], row[1])

    def last_played_night(self, sf: SnowflakeTarget) -> int:
        """The latest business day loaded (-1: none since install), read from the order lines."""
        with self._cursor(sf) as cur:
            return self._last_played(cur)

    def _last_played(self, cur) -> int:
        cur.execute(f'SELECT MAX("ACTUAL_SHIPMENT_DATE") FROM {self._tables[ORDER_LINES].qualified}')
        return (cur.fetchone()[0].date() - self.spec.first_business_day).days

    def _apply_business_day(self, cur, night: int, opening: Opening | None) -> None:
        tables = self.night_tables(night, opening)
        cur.execute(f"TRUNCATE TABLE {self._tables[ONHAND].qualified}")
        self._load(cur, ONHAND, tables[ONHAND])
        # Replaying a night replaces its own order lines instead of adding them twice.
        first, last = line_id_range(night)
        cur.execute(
            f'DELETE FROM {self._tables[ORDER_LINES].qualified} WHERE "LINE_ID" >= %s AND "LINE_ID" < %s',
            (first, last),
        )
        self._load(cur, ORDER_LINES, tables[ORDER_LINES])

    # -- nights ----------------------------------------------------------------------------------

    def play_night(self, sf: SnowflakeTarget, coalesce: CoalesceClient, night_index: int) -> NightResult:
        """Applies business day ``night_index`` to EBS, then runs the nightly job at 02:00 the next day."""
        with self._cursor(sf) as cur:
            self._apply_business_day(cur, night_index, self._read_opening(cur))
        return self.run_job(coalesce, night_index)

    def seed_history(
        self,
        sf: SnowflakeTarget,
        coalesce: CoalesceClient,
        nights: int = 60,
        on_night: Callable[[NightResult], None] | None = None,
    ) -> list[NightResult]:
        """Plays nights 0 .. nights-1 after ``install``. ``on_night`` runs after each night's job, e.g. to
        record that night's totals (the tables keep only the latest night)."""
        results = []
        for night in range(nights):
            result = self.play_night(sf, coalesce, night)
            if result.status != "completed":
                raise WorldError(f"night {night}: Coalesce run {result.run_id} ended {result.status}")
            if on_night is not None:
                on_night(result)
            results.append(result)
        return results

    def play_reference_night(
        self, sf: SnowflakeTarget, coalesce: CoalesceClient, night_index: int | None = None
    ) -> NightResult:
        """The reference night, on the next unplayed night unless given: at 14:00 EBS opens the new org and
        posts the transfers out of the from-org, at 14:06 Qlik applies them, at 02:00 the nightly job runs."""
        new_org = self.spec.reference_night.new_org
        with self._cursor(sf) as cur:
            if (previous := self._read_opening(cur)) is not None:
                raise WorldError(f"org {new_org.id} already opened on night {previous.index}")
            night = self._last_played(cur) + 1 if night_index is None else night_index
            opening = self.reference_opening(night)
            cur.execute(
                f"INSERT INTO {self._tables[ORGS].qualified} "
                '("ORGANIZATION_ID", "ORGANIZATION_CODE", "LAST_UPDATE_DATE", "_QLIK_LOADED_AT") '
                "VALUES (%s, %s, %s, %s)",
                (new_org.id, new_org.code, opening.opened_at, opening.replicated_at),
            )
            self._apply_business_day(cur, night, opening)
        return self.run_job(coalesce, night)

    def apply_region_map_fix(self, sf: SnowflakeTarget, at: datetime | None = None) -> None:
        """Planning ops adds the new org to the region map (by default the morning after the latest night).

        ``at`` is UTC (naive) or aware."""
        new_org = self.spec.reference_night.new_org
        if at is None:
            morning = self.business_date(self.last_played_night(sf) + 1)
            at = self._utc(datetime.combine(morning, self.spec.reference_night.map_fixed_at))
        elif at.tzinfo is not None:
            at = at.astimezone(UTC).replace(tzinfo=None)
        table = self._tables[REGION_MAP].qualified
        with self._cursor(sf) as cur:
            cur.execute(f'SELECT COUNT(*) FROM {table} WHERE "ORGANIZATION_ID" = %s', (new_org.id,))
            if cur.fetchone()[0]:
                return
            cur.execute(
                f'INSERT INTO {table} ("ORGANIZATION_ID", "WAREHOUSE_CODE", "WAREHOUSE_NAME", "REGION", '
                '"UPDATED_BY", "UPDATED_AT") VALUES (%s, %s, %s, %s, %s, %s)',
                (new_org.id, new_org.code, new_org.name, new_org.region, _MAP_OWNER, at),
            )

    def run_job(
        self, coalesce: CoalesceClient, night_index: int, at: datetime | None = None, timeout: float = 600
    ) -> NightResult:
        """Runs the nightly job with the simulator clock at ``at`` and waits until it ends.

        By default ``at`` is the night's 02:00: with the simulator's Scheduler on, setting the clock there
        fires the schedule and that run is the night's; with it off, the run is started through the API as
        the Scheduler would. An explicit ``at`` (a rerun in the morning) always starts a run."""
        scheduled = at is None
        at = at or self.scheduled_at(night_index)
        env = self.spec.environment_id
        before = coalesce.list_runs(env, order_by="id", order_by_direction="desc", limit=1).data
        scheduler_on = self._sim_control(coalesce, "GET", "health")["scheduler"]
        self._sim_control(coalesce, "POST", "clock", {"now": at.isoformat()})
        if scheduled and scheduler_on:
            run_id = self._scheduled_run(coalesce, before[0].id if before else 0)
        else:
            run_id = coalesce.start_run(
                env,
                job_id=self.spec.job_id,
                user_credentials=CoalesceUserCredentials(
                    # The local Snowflake accepts any credentials; these are the world's.
                    snowflake_username=LOCAL_SNOWFLAKE_USER,
                    snowflake_password=LOCAL_SNOWFLAKE_PASSWORD,
                    snowflake_warehouse=_WAREHOUSE,
                ),
            )
        run = coalesce.wait_for_run(run_id, poll_interval=0.05, timeout=timeout)
        return NightResult(night_index, self.business_date(night_index), at, run_id, run.run_status.value)

    @staticmethod
    def _sim_control(coalesce: CoalesceClient, method: str, name: str, body: dict | None = None) -> dict:
        # The simulator's own endpoints, outside the Coalesce API the client speaks.
        response = httpx.request(
            method,
            f"{coalesce.base_url}/_sim/{name}",
            json=body,
            headers={"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json()

    def _scheduled_run(self, coalesce: CoalesceClient, after: int, within: float = 10.0) -> int:
        """The run the Scheduler starts once the clock reaches the schedule (it checks every 0.2 s)."""
        deadline = monotonic() + within
        while monotonic() < deadline:
            runs = coalesce.list_runs(
                environment_id=self.spec.environment_id, order_by="id", order_by_direction="desc", limit=1
            ).data
            if runs and runs[0].id > after:
                return runs[0].id
            sleep(0.05)
        raise WorldError(f"the simulator's Scheduler started no run within {within:.0f} s of its time")
