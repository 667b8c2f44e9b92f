"""What every world does the same way: its Coalesce project's Source nodes read as the RAW tables' shape,
those tables created and loaded in the local Snowflake, the night calendar (night ``n`` applies business day
``first_business_day + n``; the job starts at ``night_time`` the next day), and the night's job started
through the Coalesce API as the Scheduler would.

A night plays its events (``local/dw_local/scenarios/events.py``) the same way on every world: their edits of
schemas and reference rows, the night's new rows as they change them, their Coalesce project changes, then the
job unless one skips it; ``repair`` undoes one. A world file's world (``local/dw_local/scenarios/generic.py``) and
the distributor (``local/dw_local/worlds/distributor/generator.py``) are built on ``NightWorld``; each adds how it
generates its data, loads a night and reloads what an event broke. Every draw comes from ``rng_for(seed,
purpose, night)``, so a night's data never depends on which nights were played before it.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from time import monotonic, sleep
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pydantic

from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.models import CoalesceUserCredentials
from dw_dagster.config import DwConfigError
from dw_dagster.sql import quote_identifier
from dw_local.coalesce_sim.project import Project, load_project
from dw_local.coalesce_sim.schemas import SCHEDULER_SNOWFLAKE_USER
from dw_local.world import (
    LOCAL_SNOWFLAKE_PASSWORD,
    SnowflakeTarget,
    WorldError,
    sim_control,
)
from dw_local.worlds.tables import SourceRef

Frames = dict[str, pd.DataFrame]


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """The rows as the CSV file a COPY loads: Arrow's writer, a tenth of pandas' CPU (1.3 s -> 0.13 s for
    half a million order lines; pandas formats every cell in Python). Times to the second, as the worlds
    generate them; strings quoted (FIELD_OPTIONALLY_ENCLOSED_BY), a missing value an empty field (NULL)."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    for i, column in enumerate(table.schema):
        if pa.types.is_timestamp(column.type) and column.type.unit != "s":
            table = table.set_column(
                i, column.name, table.column(i).cast(pa.timestamp("s", column.type.tz), safe=False)
            )
    pa_csv.write_csv(table, path, write_options=pa_csv.WriteOptions(include_header=False))


# A Source column's dataType is interpolated into the RAW table's DDL: only a type name and its precision.
_DATA_TYPE = re.compile(r"^[A-Z_]+(\(\s*\d+(\s*,\s*\d+)?\s*\))?$", re.IGNORECASE)


def rng_for(seed: int, purpose: str, day: int = 0) -> np.random.Generator:
    # A stable integer per purpose (str hash() is salted per process).
    tag = int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:4], "big")
    return np.random.default_rng([seed, tag, day + 100_000])


def to_utc(local: np.ndarray, tz: str) -> np.ndarray:
    """Naive local wall times -> naive UTC times (datetime64[s]).

    On a daylight-saving change a wall time can be ambiguous (the repeated hour in autumn: read as its first
    occurrence, still on summer time, as a clock that logs wall time cannot say which) or skipped (the
    missing hour in spring: moved forward past the gap, as a clock does)."""
    flat = pd.DatetimeIndex(local.ravel())
    first = np.ones(len(flat), dtype=bool)
    idx = (
        flat.tz_localize(tz, ambiguous=first, nonexistent="shift_forward").tz_convert("UTC").tz_localize(None)
    )
    return idx.values.astype("datetime64[s]").reshape(local.shape)


@dataclass(frozen=True)
class NightResult:
    night: int
    business_date: date
    scheduled_at: datetime  # the job's start on the simulator clock, in the world's time zone
    run_id: int | None  # None: no run (the scheduler_skip fault)
    status: str  # the Coalesce run status: completed, failed or canceled; "skipped" when no run started

    @property
    def watched_at(self) -> datetime:
        """When a deployed daemon's sensors see the night's run, a minute after its start: the business time
        the local daemon ticks at for the night (``LocalDaemon.tick(at=...)``)."""
        return self.scheduled_at + timedelta(minutes=1)


class NightWorld:
    """A world's project, tables and calendar on the local servers. ``spec`` gives ``seed``,
    ``environment_id``, ``job_id``, ``first_business_day`` and ``night_time``; ``where`` names the world's
    file in errors. A subclass gives the rows loaded at install (``install_frames``), how each source loads
    (``source_load``), the events it plays (``EVENTS``) and how a night's rows are made and applied
    (``night_rows``, ``apply_night``)."""

    EVENTS: ClassVar[pydantic.TypeAdapter]
    name: str

    def __init__(self, spec: Any, project_file: Path, tz: ZoneInfo, where: Path | str):
        self.spec = spec
        self.project_file = Path(project_file)
        self.tz = tz
        self.where = where
        self.project: Project = load_project(self.project_file)
        self.tables, self.database = self._read_sources()

        # Reference edits made upstream while their table's sync was stopped, applied with its next sync.
        self.deferred: list[Any] = []

    def _problem(self, message: str) -> DwConfigError:
        return DwConfigError(f"{self.where}: {message}")

    def _read_sources(self) -> tuple[dict[str, SourceRef], str]:
        """Every Source node as its RAW table (the simulator's own reader: the Source nodes' columns are the
        tables' DDL, so the project and the data cannot drift apart), and their one database."""
        env = self.project.environment(self.spec.environment_id)
        if env is None or self.project.job(self.spec.job_id) is None:
            raise self._problem(
                f"environment_id / job_id: {self.project_file} has no environment "
                f"{self.spec.environment_id} or no job {self.spec.job_id}"
            )
        tables = {}
        for node in self.project.file.nodes:
            if not node.is_source:
                continue
            for c in node.columns:
                if not _DATA_TYPE.match(c.dataType):
                    raise self._problem(
                        f"project: {self.project_file}: Source node {node.name} column {c.name}: dataType "
                        f"{c.dataType!r} is not a Snowflake type such as NUMBER(38,0), VARCHAR(20) or DATE"
                    )
            database, schema, name = env.table(node.locationName, node.name)
            ddl = ", ".join(
                f"{quote_identifier(c.name)} {c.dataType}" + ("" if c.nullable else " NOT NULL")
                for c in node.columns
            )
            columns = [c.name for c in node.columns]
            tables[name] = SourceRef(
                name, database, schema, columns, {c.name: c.dataType for c in node.columns}, ddl
            )
        databases = {t.database for t in tables.values()}
        if len(databases) != 1:
            raise self._problem(f"project: the Source nodes span databases {sorted(databases)}")
        return tables, databases.pop()

    # -- the sources, as events read them ------------------------------------------------------

    def source_load(self, name: str) -> str:
        """How a source gets its rows: ``once`` (reference data), ``append`` or ``snapshot`` (each night)."""
        raise NotImplementedError

    def refreshed(self, name: str) -> bool:
        """A ``once`` table re-synced each night (so it can be held back)."""
        return False

    def once_frame(self, name: str) -> pd.DataFrame:
        """A ``once`` table's rows as installed."""
        return self.install_frames()[name]

    def possible_values(self, name: str, column: str) -> set[Any] | None:
        """Every value the column can hold, where the world knows them; else None."""
        return set(self.once_frame(name)[column]) if self.source_load(name) == "once" else None

    def edit_stamp(self, table: str, night: int) -> dict[str, Any]:
        """Columns an upstream edit of a reference table's rows on business day ``night`` sets besides its
        own (who edited it, when)."""
        return {}

    # -- calendar --------------------------------------------------------------------------------

    def business_date(self, night: int) -> date:
        return self.spec.first_business_day + timedelta(days=night)

    def scheduled_at(self, night: int) -> datetime:
        """When the Coalesce Scheduler starts the nightly job after business day ``night``."""
        return datetime.combine(self.business_date(night) + timedelta(days=1), self.spec.night_time, self.tz)

    def utc(self, local: datetime) -> datetime:
        """A naive local wall time of the world as naive UTC."""
        return to_utc(np.array([np.datetime64(local, "s")]), self.tz.key)[0].item()

    # -- Snowflake -------------------------------------------------------------------------------

    @contextmanager
    def cursor(self, sf: SnowflakeTarget) -> Iterator[Any]:
        with closing(sf.connect(database=self.database)) as conn:
            yield conn.cursor()

    def install_frames(self) -> dict[str, pd.DataFrame]:
        """The rows each source table holds before the first night, by Source node name."""
        raise NotImplementedError

    def install(self, sf: SnowflakeTarget) -> None:
        """Creates every schema of the environment and the source tables, and loads their install rows."""
        env = self.project.environment(self.spec.environment_id)
        assert env is not None
        with self.cursor(sf) as cur:
            for mapping in env.storageMappings.values():
                cur.execute(
                    f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(mapping.database)}."
                    f"{quote_identifier(mapping.schema_name)}"
                )
            for name in self.tables:
                self.create_table(cur, name)
            for name, frame in self.install_frames().items():
                self.load(cur, name, frame)

    def create_table(self, cur, name: str) -> None:
        """(Re)creates a source table in its Source node's shape, empty."""
        cur.execute(f"CREATE OR REPLACE TABLE {self.tables[name].qualified} ({self.tables[name].ddl})")

    def actual_columns(self, cur, name: str) -> list[str]:
        return self.tables[name].actual_columns(cur)

    def load(self, cur, name: str, frame: pd.DataFrame) -> None:
        """Loads rows into the table as it now is: a dropped column left out, a renamed one by position."""
        if frame.empty:
            return
        declared, actual = self.tables[name].columns, self.actual_columns(cur, name)
        target = actual
        if set(actual) <= set(declared):
            source = actual
        elif set(declared) < set(actual):
            # A column added upstream (column_added): loaded when the rows carry it, NULL when they do not.
            source = target = [a for a in actual if a in declared or a in frame.columns]
        elif len(actual) == len(declared):
            source = [a if a in declared else declared[i] for i, a in enumerate(actual)]
        else:
            raise WorldError(f"{name}: cannot load columns {actual} from the project's {declared}")
        if missing := sorted(set(source) - set(frame.columns)):
            raise WorldError(f"{name}: the rows generated have no column {missing}; the table has {actual}")
        # PUT + COPY: the fast path into the local server (executemany and big VALUES lists are slow).
        with tempfile.TemporaryDirectory(prefix="dw-world-") as tmp:
            path = Path(tmp) / f"{name.lower()}.csv"
            _write_csv(frame[source], path)
            stage = f"@{quote_identifier(self.database)}.PUBLIC.{quote_identifier('DW_WORLD_LOAD')}"
            cur.execute(f"CREATE TEMPORARY STAGE IF NOT EXISTS {stage[1:]}")
            cur.execute(f"PUT file://{path} {stage} AUTO_COMPRESS=FALSE OVERWRITE=TRUE")
            cur.execute(
                f"COPY INTO {self.tables[name].qualified} ({', '.join(map(quote_identifier, target))}) "
                f"FROM {stage}/{path.name} FILE_FORMAT=(TYPE=CSV FIELD_OPTIONALLY_ENCLOSED_BY='\"') "
                "PURGE=TRUE FORCE=TRUE"
            )

    # -- nights ---------------------------------------------------------------------------------

    def parse_event(self, raw: Any) -> Any:
        """An event of the world's vocabulary (``EVENTS``) from its fields, checked against the world
        (ValueError naming the parameter; pydantic's ValidationError for a field)."""
        event = raw if isinstance(raw, pydantic.BaseModel) else self.EVENTS.validate_python(raw)
        event.check(self)
        return event

    def night_rows(self, cur, night: int, events: Sequence[Any]) -> Frames:
        """The rows each night-loaded source gets on business day ``night``, before the events change them."""
        raise NotImplementedError

    def transformed(self, frames: Frames, night: int, events: Sequence[Any]) -> Frames:
        """The night's rows as the events make them arrive."""
        for event in events:
            frames = event.transform(self, frames, night)
        return frames

    def apply_night(self, cur, night: int, frames: Frames, held: set[str]) -> None:
        """Loads the night's rows (a ``held`` table gets nothing new tonight)."""
        raise NotImplementedError

    def stalled(self, night: int) -> None:
        """Nothing is loaded tonight (replication stalled); the next night played catches up."""

    def play_night(
        self, sf: SnowflakeTarget, coalesce: CoalesceClient, night: int, events: Sequence[Any] = ()
    ) -> NightResult:
        """Applies business day ``night`` with its events (or their fields, ``parse_event``), then runs the
        job at ``scheduled_at`` unless an event skips it (status ``skipped``, no run id)."""
        events = [self.parse_event(e) for e in events]
        held = {t for e in events for t in e.held_tables()}
        loads = all(e.loads_source for e in events)
        if not loads and (changing := [e.kind for e in events if e.changes_load()]):
            raise WorldError(
                f"night {night}: {changing[0]} changes a load that replication_stalled holds back"
            )
        with self.cursor(sf) as cur:
            waiting, self.deferred = self.deferred, []
            for event in [*waiting, *events]:
                if event.edits_reference() in held:
                    self.deferred.append(event)
                    continue
                event.before_load(self, cur, night)
            if loads:
                frames = self.transformed(self.night_rows(cur, night, events), night, events)
                self.apply_night(cur, night, frames, held)
            else:
                self.stalled(night)
            for event in events:
                event.before_run(self, coalesce)
        if all(e.runs_job for e in events):
            return self.run_job(coalesce, night)
        return self.skipped(night)

    def repair(
        self, sf: SnowflakeTarget, coalesce: CoalesceClient, event: Any, night: int | None = None
    ) -> None:
        """Undoes ``event`` (its own ``repair``), then puts right what it left in the sources as the world's
        owners would (``after_repair``). The job is not run: rerun it (``run_job``) to rebuild."""
        event = self.parse_event(event)
        with self.cursor(sf) as cur:
            event.repair(self, cur, coalesce)
            self.after_repair(cur, coalesce, event, night)

    def after_repair(self, cur, coalesce: CoalesceClient, event: Any, night: int | None) -> None:
        """What a world's owners do after an event is undone (``night``: the latest, by default)."""

    # -- the job ---------------------------------------------------------------------------------

    def skipped(self, night: int) -> NightResult:
        """The night's result when no run starts (the scheduler_skip fault)."""
        return NightResult(night, self.business_date(night), self.scheduled_at(night), None, "skipped")

    def run_job(
        self, coalesce: CoalesceClient, night: int, at: datetime | None = None, timeout: float = 600
    ) -> NightResult:
        """Runs the nightly job with the simulator clock at ``at`` and waits until it ends.

        By default ``at`` is the night's schedule: with the simulator's Scheduler on, setting the clock there
        fires the schedule and that run is the night's; with it off, the run is started through the API as
        the Scheduler would. An explicit ``at`` (a rerun in the morning) always starts a run."""
        scheduled = at is None
        at = at or self.scheduled_at(night)
        env = self.spec.environment_id
        before = coalesce.list_runs(env, order_by="id", order_by_direction="desc", limit=1).data
        scheduler_on = sim_control(coalesce, "GET", "health")["scheduler"]
        sim_control(coalesce, "POST", "clock", {"now": at.isoformat()})
        if scheduled and scheduler_on:
            run_id = self._scheduled_run(coalesce, before[0].id if before else 0)
        else:
            run_id = coalesce.start_run(
                env,
                job_id=self.spec.job_id,
                user_credentials=CoalesceUserCredentials(
                    # The environment's own user, as the Scheduler signs its runs in (not dw-dagster's, which
                    # signs in by key pair only); the local Snowflake takes any password from it.
                    snowflake_username=SCHEDULER_SNOWFLAKE_USER,
                    snowflake_password=LOCAL_SNOWFLAKE_PASSWORD,
                    snowflake_warehouse="LOCAL_WH",
                ),
            )
        # Polled every 50 ms: a night's run takes the simulator about a second, and a template's sixty nights
        # are played one after another, so each poll's wait is on the suite's longest path (at 0.2 s a
        # template took 8% longer, for some 20 ms of CPU a night saved).
        run = coalesce.wait_for_run(run_id, poll_interval=0.05, timeout=timeout)
        return NightResult(night, self.business_date(night), at, run_id, run.run_status.value)

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
