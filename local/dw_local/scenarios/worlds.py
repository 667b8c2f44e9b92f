"""The worlds a scenario can name: the built-in distributor world (``DistributorWorld``) or a world file
(``world.yaml``, played by ``GenericWorld``). Both give the runner the same surface: a seeded template to
clone, the servers' settings, events validated against the world, and nights to play.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pydantic

from dw_local.coalesce_sim.project import Project
from dw_local.scenarios.event_base import Event
from dw_local.scenarios.generic import GenericWorld
from dw_local.scenarios.world_file import load_world_file
from dw_local.seeding import HISTORY_NIGHTS, Template
from dw_local.world import LocalWorld, WorldError
from dw_local.worlds.distributor.generator import DistributorWorld
from dw_local.worlds.night_world import NightResult, NightWorld

DISTRIBUTOR = "distributor"


class EventError(ValueError):
    """An event a world cannot play; the message names the parameter."""


def _problems(error: pydantic.ValidationError, skip: int) -> str:
    return "; ".join(f"{'.'.join(map(str, x['loc'][skip:])) or 'kind'}: {x['msg']}" for x in error.errors())


def asset_key(location: str, name: str) -> str:
    """The asset key path the Coalesce translator gives a node (``raw_ebs/mtl_onhand_quantities_detail``)."""
    return f"{location}/{name}".lower()


class ScenarioWorld(ABC):
    """What the runner needs from a world: a seeded template to copy, the servers, and the world's events,
    parsed, played and repaired by the world itself (``NightWorld``). The two kinds differ only in where
    their template and servers come from."""

    name: str
    history_nights: int
    world: NightWorld
    repairs_rows: bool = False
    """Whether ``repair`` reloads the rows a night's fault left in an append source (the distributor's Qlik
    reload does); on a world file they stay, so a fault that ``stays_in`` a node cannot be repaired."""

    @property
    def project(self) -> Project:
        return self.world.project

    @property
    def database(self) -> str:
        return self.world.database

    def business_date(self, night: int) -> date:
        """The business day the world's night ``night`` applies."""
        return self.world.business_date(night)

    def files(self) -> list[Path]:
        """The world's own files, which shape its template beside the code (``seeding._SHAPING``)."""
        return []

    def _template(self, cache: Path) -> Template:
        return Template(cache, self.world, self.history_nights, self.env(), self.files(), self.local_world)

    def template(self, cache: Path) -> Path:
        """The stopped world with the history played, under ``cache`` (built the first time, then cached)."""
        return self._template(cache).path()

    def clone(self, cache: Path, dest: Path) -> Path:
        """A private copy of the template at ``dest``."""
        return self._template(cache).clone(dest)

    @abstractmethod
    def local_world(self, root: Path) -> LocalWorld:
        """The servers for a copy of the template under ``root``."""

    @abstractmethod
    def env(self) -> dict[str, str]:
        """Variables that point the product at this world's files (beyond ``LocalWorld.env``)."""

    def parse_event(self, raw: dict[str, Any], first_night: int) -> Event:
        """An event of the scenario file, validated against this world (``EventError`` names the parameter)."""
        data = dict(raw)
        if isinstance(data.get("since_night"), int):
            data["since_night"] += first_night  # a scenario counts nights from its own first
        try:
            return self.world.parse_event(data)
        except pydantic.ValidationError as e:
            # The first location is the event kind's model (a tagged union); the parameter follows.
            raise EventError(_problems(e, skip=1)) from None
        except ValueError as e:
            raise EventError(str(e)) from None

    def check_night(self, events: Sequence[Event]) -> None:  # noqa: B027 - optional hook: most worlds accept any night
        """The night's events can be played together (``EventError`` names the problem)."""

    def play_night(self, lw: LocalWorld, night: int, events: Sequence[Event]) -> NightResult:
        """Applies the night's data and events and runs the job (unless an event skips it)."""
        return self.world.play_night(lw.snowflake, lw.coalesce_client(), night, events)

    def repair(self, lw: LocalWorld, event: Event) -> None:
        """Undoes a persistent event; the job is not run."""
        self.world.repair(lw.snowflake, lw.coalesce_client(), event)

    def is_benign(self, event: Event) -> bool:
        """A benign event must not raise an alarm."""
        return event.benign

    def persists(self, event: Event) -> bool:
        """Stays in force on later nights until repaired (everywhere, or in the nodes it ``stays_in``)."""
        return event.persists or bool(event.stays_in)

    def targets(self, event: Event) -> list[str]:
        """Asset keys the event changes directly (sources, reference tables, a node); ``["*"]``: all."""
        if event.kind in ("scheduler_skip", "replication_stalled"):
            return ["*"]
        return [self.node_key(n) for n in event.tables()]

    def lasting_targets(self, event: Event) -> list[str]:
        """What an event played on an earlier night and still in force changes tonight: the nodes it
        ``stays_in`` (its rows read again), else what it changes (``targets``)."""
        if event.persists or not event.stays_in:
            return self.targets(event)
        return [self.node_key(n) for n in event.stays_in]

    def node_key(self, name: str) -> str:
        node = next((n for n in self.project.file.nodes if n.name == name), None)
        if node is None:
            raise WorldError(f"world {self.name}: no node {name}")
        return asset_key(node.locationName, node.name)


class DistributorScenarioWorld(ScenarioWorld):
    """The reference night's world; its events are ``local/dw_local/worlds/distributor/events.py``'s (the shared
    vocabulary, the reference night as ``new_key_unmapped`` and ``new_key_mapped`` as its new org mapped)."""

    name = DISTRIBUTOR
    history_nights = HISTORY_NIGHTS
    repairs_rows = True

    def __init__(self) -> None:
        self.world = DistributorWorld()

    def local_world(self, root: Path) -> LocalWorld:
        return LocalWorld(root)

    def env(self) -> dict[str, str]:
        return {}

    def check_night(self, events: Sequence[Event]) -> None:
        if any(e.kind == "new_key_unmapped" for e in events) and len(events) > 1:
            raise EventError(
                "new_key_unmapped: the distributor's reference night is played alone on its night"
            )


class FileScenarioWorld(ScenarioWorld):
    """A world written as data (``world.yaml``, played by ``GenericWorld``); events are ``events.py``'s."""

    def __init__(self, path: Path):
        self.path = Path(path).resolve()
        self.world = GenericWorld(load_world_file(self.path), source=self.path)
        self.spec = self.world.spec
        self.name = self.spec.name
        self.history_nights = self.spec.history_nights

    def files(self) -> list[Path]:
        return [self.path, self.spec.project, self.spec.context, self.spec.metrics]

    def local_world(self, root: Path) -> LocalWorld:
        return LocalWorld(root, project_file=self.spec.project)

    def env(self) -> dict[str, str]:
        return {
            "DW_CONTEXT_FILE": str(self.spec.context),
            "DW_METRICS_FILE": str(self.spec.metrics),
            "COALESCE_ENVIRONMENT_IDS": self.spec.environment_id,
            "SNOWFLAKE_DATABASE": self.database,
        }


def open_world(ref: str, relative_to: Path) -> ScenarioWorld:
    """``distributor`` (built in), or a world file's path relative to the scenario file."""
    if ref == DISTRIBUTOR:
        return DistributorScenarioWorld()
    return FileScenarioWorld((relative_to / ref).resolve())
