"""A world played from its world file alone (``world_file.py``): any Coalesce project whose Source nodes the
file generates data for. The e-commerce world is one; a scenario author can write another without Python.

Night ``n`` applies business day ``first_business_day + n``: each ``append`` source gets that day's new
rows, each ``snapshot`` source is reloaded with them, each reference table with a ``refresh`` is re-synced
(its stamp column set to the sync time); then the job runs at ``night_time`` the next day, started through
the Coalesce API with the simulator clock at that time, as the Scheduler would. Row counts follow the
calendar (weekend, month-end and holiday factors) and every draw comes from ``rng_for(seed, table,
night)``, so a night's data never depends on which nights were played before it.

Events (``events.py``) change what a night loads or runs: the fault vocabulary and the benign events, played
by ``NightWorld.play_night``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dw_dagster.sql import quote_identifier
from dw_local.scenarios.events import EVENTS
from dw_local.scenarios.world_file import ColumnGenerator, RowCount, SourceTable, WorldFile
from dw_local.worlds.night_world import Frames, NightWorld, rng_for, to_utc

# Ids of one night's rows: start + night x block + row, so a night replayed or caught up reuses its own ids.
_ID_BLOCK = 1_000_000


def _calendar_factor(count, day: date, is_holiday: Callable[[date], bool]) -> float:
    factor = count.weekend_factor if day.weekday() >= 5 else 1.0
    next_month = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    if count.month_end_on == "business":
        # The days from this one to the month's end, counted in business days (weekdays not holidays).
        days = (day + timedelta(days=i) for i in range((next_month - day).days))
        left = sum(1 for d in days if d.weekday() < 5 and not is_holiday(d))
        in_window = 0 < left <= count.month_end_days and day.weekday() < 5 and not is_holiday(day)
    else:
        in_window = (next_month - day).days <= count.month_end_days
    if in_window:
        factor *= count.month_end_factor
        if day.month % 3 == 0:  # the month-end that closes a quarter (March, June, September, December)
            factor *= count.quarter_end_factor
    return factor * (count.holiday_factor if is_holiday(day) else 1.0)


class GenericWorld(NightWorld):
    """Plays a world file's nights on the local servers. It keeps in memory what replication has not
    applied yet (``backlog``, ``held_rows``), so one process plays a scenario's nights."""

    EVENTS = EVENTS

    def __init__(self, spec: WorldFile, source: Path | None = None):
        super().__init__(spec, spec.project, spec.timezone, source or spec.name)
        self.spec: WorldFile = spec
        self.name = spec.name
        self.source = source
        self._check_sources()
        self._once = self._once_frames()
        # Business days replication held back (replication_stalled), applied with the next night played.
        self.backlog: list[int] = []
        # One table's rows held back (source_not_refreshed).
        self.held_rows: dict[str, list[pd.DataFrame]] = {}

    def _check_sources(self) -> None:
        """Each Source node has a generator of exactly its columns."""
        for name, table in self.spec.sources.items():
            ref = self.tables.get(name)
            if ref is None:
                raise self._problem(
                    f"sources.{name}: not a Source node of {self.spec.project} ({sorted(self.tables)})"
                )
            given = list(table.columns) if table.rows is None else sorted(set().union(*table.rows))
            if set(given) != set(ref.columns):
                raise self._problem(
                    f"sources.{name}: generates columns {sorted(given)}; the Source node declares {sorted(ref.columns)}"
                )
        if missing := sorted(set(self.tables) - set(self.spec.sources)):
            raise self._problem(f"sources: no generator for the Source nodes {missing}")

    def is_holiday(self, day: date) -> bool:
        return day in self.spec.holidays.of_year(day.year)

    # -- data --------------------------------------------------------------------------------------

    def _once_frames(self) -> Frames:
        frames: Frames = {}
        for name, table in self.spec.sources.items():
            if table.load != "once":
                continue
            if table.rows is not None:
                frames[name] = pd.DataFrame(table.rows, columns=self.tables[name].columns)
            else:
                frames[name] = self._generate(name, table, table.once_rows(), -1, frames)
        # A lookup reads one row per key: a key repeated in the once table would make it ambiguous.
        for name, table in self.spec.sources.items():
            for column, gen in table.columns.items():
                if gen.kind == "lookup":
                    other, _ = gen.ref_parts()
                    if not frames[other][gen.by].is_unique:
                        raise self._problem(
                            f"sources.{name}.columns.{column}.by: expected a unique key of {other}; "
                            f"{other}.{gen.by} repeats values"
                        )
        return frames

    def once_frame(self, name: str) -> pd.DataFrame:
        return self._once[name]

    def source_load(self, name: str) -> str:
        return self.spec.sources[name].load

    def refreshed(self, name: str) -> bool:
        return self.spec.sources[name].refresh is not None

    def possible_values(self, name: str, column: str) -> set[Any] | None:
        """Every value the column can hold, where its generator says (a choice, a reference); else None."""
        if name in self._once:
            return set(self._once[name][column])
        gen = self.spec.sources[name].columns[column]
        if gen.kind in ("choice", "each"):
            return set(gen.choice or gen.each or [])
        if gen.kind == "value":
            return {gen.value}
        if gen.kind in ("ref", "lookup"):
            table, ref_column = gen.ref_parts()
            return set(self._once[table][ref_column])
        return None

    def rows_tonight(self, name: str, night: int, growth: float = 1.0) -> int:
        count = self.spec.sources[name].row_count()
        if not isinstance(self.spec.sources[name].count, RowCount):
            growth = (
                1.0  # a fixed count (one rate per currency) is a lookup's rows: the business does not grow it
            )
        rng = rng_for(self.spec.seed, f"count/{name}", night)
        noise = np.exp(count.noise_sigma * rng.standard_normal() - count.noise_sigma**2 / 2)
        day = self.business_date(night)
        factor = _calendar_factor(count, day, self.is_holiday)
        return max(1, round(count.per_night * factor * noise * growth))

    def night_frames(self, night: int, growth: float = 1.0) -> Frames:
        """The rows each append or snapshot source gets on business day ``night``."""
        return {
            name: self._generate(name, table, self.rows_tonight(name, night, growth), night, self._once)
            for name, table in self.spec.sources.items()
            if table.load != "once"
        }

    def _generate(self, name: str, table: SourceTable, n: int, night: int, once: Frames) -> pd.DataFrame:
        rng = rng_for(self.spec.seed, f"rows/{name}", night)
        out: dict[str, Any] = {}
        # Columns computed from others come after them.
        later = {"lookup", "synced", "prefix"}
        ordered = sorted(table.columns.items(), key=lambda kv: kv[1].kind in later)
        for column, gen in ordered:
            out[column] = self._draw(gen, n, night, rng, out, once)
        return pd.DataFrame(out, columns=self.tables[name].columns)

    def _draw(self, gen: ColumnGenerator, n: int, night: int, rng, done: dict, once: Frames) -> Any:
        kind = gen.kind
        if kind == "sequence":
            index = np.floor(np.arange(n) / gen.rows_per_value).astype(np.int64)
            return gen.sequence + max(night, 0) * _ID_BLOCK + index
        if kind == "value":
            return np.full(n, gen.value, dtype=object)
        if kind == "choice":
            return np.array(gen.choice, dtype=object)[rng.choice(len(gen.choice), n, p=_weights(gen.weights))]
        if kind == "each":
            return np.array(gen.each, dtype=object)[np.arange(n) % len(gen.each)]
        if kind == "ref":
            table, column = gen.ref_parts()
            values = once[table][column].to_numpy()
            weights = _weights(gen.weights) if gen.weights else None
            return values[rng.choice(len(values), n, p=weights)]
        if kind == "lookup":
            table, column = gen.ref_parts()
            index = once[table].set_index(gen.by)[column]
            return index.reindex(done[gen.by]).to_numpy()
        if kind == "integer":
            return rng.integers(gen.integer[0], gen.integer[1] + 1, n)
        if kind in ("uniform", "lognormal"):
            if kind == "uniform":
                values = rng.uniform(gen.uniform[0], gen.uniform[1], n)
            else:
                values = gen.lognormal.median * np.exp(gen.lognormal.sigma * rng.standard_normal(n))
            return values if gen.decimals is None else np.round(values, gen.decimals)
        if kind == "business_time":
            seconds = rng.uniform(gen.business_time[0] * 3600, gen.business_time[1] * 3600, n)
            return np.datetime64(self.business_date(night), "s") + seconds.astype("timedelta64[s]")
        if kind == "business_date":
            return np.full(n, self.business_date(night))
        if kind == "synced":
            lag = rng.uniform(gen.lag_seconds[0], gen.lag_seconds[1], n).astype("timedelta64[s]")
            return to_utc(np.asarray(done[gen.synced], dtype="datetime64[s]"), self.tz.key) + lag
        if kind == "timestamp":
            return np.full(n, np.datetime64(gen.timestamp, "s"))
        if kind == "prefix":
            return np.array([f"{gen.prefix}{v}" for v in done[gen.of]], dtype=object)
        raise AssertionError(kind)

    def install_frames(self) -> Frames:
        return self._once

    # -- nights ------------------------------------------------------------------------------------

    def night_rows(self, cur, night: int, events: Sequence[Any]) -> Frames:
        growth = float(np.prod([e.growth(night) for e in events])) if events else 1.0
        return self.night_frames(night, growth)

    def stalled(self, night: int) -> None:
        self.backlog.append(night)

    def apply_night(self, cur, night: int, frames: Frames, held: set[str]) -> None:
        missed = [self.night_frames(t) for t in self.backlog]
        self.backlog = []
        for name, frame in frames.items():
            if name in held:
                # Not refreshed tonight: an append table's rows wait; a snapshot keeps its last load.
                if self.spec.sources[name].load == "append":
                    self.held_rows.setdefault(name, []).extend([*(m[name] for m in missed), frame])
                continue
            if self.spec.sources[name].load == "snapshot":
                cur.execute(f"TRUNCATE TABLE {self.tables[name].qualified}")
                self.load(cur, name, frame)
            else:
                waiting = self.held_rows.pop(name, [])
                self.load(
                    cur, name, pd.concat([*(m[name] for m in missed), *waiting, frame], ignore_index=True)
                )
        for name, source in self.spec.sources.items():
            if source.refresh is not None and name not in held:
                synced = datetime.combine(self.business_date(night), source.refresh.at)
                stamp = self.utc(synced)
                cur.execute(
                    f"UPDATE {self.tables[name].qualified} SET {quote_identifier(source.refresh.column)} = %s",
                    (stamp,),
                )


def _weights(weights: list[float] | None) -> np.ndarray | None:
    if weights is None:
        return None
    w = np.asarray(weights, dtype=float)
    return w / w.sum()
