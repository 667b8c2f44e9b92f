"""The worlds a scenario can name: the built-in distributor world (an adapter over ``DistributorWorld``) or a
world file (``world.yaml``, played by ``GenericWorld``). Both give the runner the same surface: a seeded
template to clone, the servers' settings, events validated against the world, and nights to play.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import pydantic

from dw_local.coalesce_sim.project import Project
from dw_local.scenarios.event_base import Event
from dw_local.scenarios.events import EVENTS
from dw_local.scenarios.generic import GenericWorld
from dw_local.scenarios.world_file import load_world_file
from dw_local.seeding import HISTORY_NIGHTS, _shaping_hash, clone_world, seed_history, seeded_template
from dw_local.world import LocalWorld, WorldError
from dw_local.worlds.distributor.faults import Fault
from dw_local.worlds.distributor.generator import DistributorWorld
from dw_local.worlds.night_world import NightResult, NightWorld

DISTRIBUTOR = "distributor"
_SCENARIO_CODE = Path(__file__).resolve().parent
# Scenario event names that the distributor's fault model spells differently.
_DISTRIBUTOR_KINDS = {"new_key_mapped": "new_org_mapped"}
# Which source tables a distributor fault changes when it names none (its defaults, faults.py).
_ONHAND = "MTL_ONHAND_QUANTITIES_DETAIL"


class EventError(ValueError):
    """An event a world cannot play; the message names the parameter."""


def _problems(error: pydantic.ValidationError, skip: int) -> str:
    return "; ".join(f"{'.'.join(map(str, x['loc'][skip:])) or 'kind'}: {x['msg']}" for x in error.errors())


def asset_key(location: str, name: str) -> str:
    """The asset key path the Coalesce translator gives a node (``raw_ebs/mtl_onhand_quantities_detail``)."""
    return f"{location}/{name}".lower()


class ScenarioWorld(ABC):
    """What the runner needs from a world; see the two implementations below."""

    name: str
    history_nights: int
    world: NightWorld

    @property
    def project(self) -> Project:
        return self.world.project

    @property
    def database(self) -> str:
        return self.world.database

    def business_date(self, night: int) -> date:
        """The business day the world's night ``night`` applies."""
        return self.world.business_date(night)

    @abstractmethod
    def template(self, cache: Path) -> Path:
        """The stopped world with the history played, under ``cache`` (built the first time, then cached)."""

    @abstractmethod
    def clone(self, cache: Path, dest: Path) -> Path:
        """A private copy of the template at ``dest``."""

    @abstractmethod
    def local_world(self, root: Path) -> LocalWorld:
        """The servers for a copy of the template under ``root``."""

    @abstractmethod
    def env(self) -> dict[str, str]:
        """Variables that point the product at this world's files (beyond ``LocalWorld.env``)."""

    @abstractmethod
    def parse_event(self, raw: dict[str, Any], first_night: int) -> Any:
        """An event of the scenario file, validated against this world (``EventError`` names the parameter)."""

    def check_night(self, events: Sequence[Any]) -> None:  # noqa: B027 - optional hook: most worlds accept any night
        """The night's events can be played together (``EventError`` names the problem)."""

    @abstractmethod
    def play_night(self, lw: LocalWorld, night: int, events: Sequence[Any]) -> NightResult:
        """Applies the night's data and events and runs the job (unless an event skips it)."""

    @abstractmethod
    def repair(self, lw: LocalWorld, event: Any) -> None:
        """Undoes a persistent event; the job is not run."""

    @abstractmethod
    def is_benign(self, event: Any) -> bool:
        """A benign event must not raise an alarm."""

    @abstractmethod
    def persists(self, event: Any) -> bool:
        """Stays in force on later nights until repaired."""

    @abstractmethod
    def targets(self, event: Any) -> list[str]:
        """Asset keys the event changes directly (sources, reference tables, a node); ``["*"]``: all."""

    def node_key(self, name: str) -> str:
        node = next((n for n in self.project.file.nodes if n.name == name), None)
        if node is None:
            raise WorldError(f"world {self.name}: no node {name}")
        return asset_key(node.locationName, node.name)


class DistributorScenarioWorld(ScenarioWorld):
    """The reference night's world; events are its faults (``faults.py``) with the same parameters, plus
    ``new_key_unmapped`` (the reference night itself: DC7 opened, not in the region map)."""

    name = DISTRIBUTOR
    history_nights = HISTORY_NIGHTS

    def __init__(self) -> None:
        self.world = DistributorWorld()

    def template(self, cache: Path) -> Path:
        return seeded_template(cache)

    def clone(self, cache: Path, dest: Path) -> Path:
        return clone_world(self.template(cache), dest)

    def local_world(self, root: Path) -> LocalWorld:
        return LocalWorld(root)

    def env(self) -> dict[str, str]:
        return {}

    def parse_event(self, raw: dict[str, Any], first_night: int) -> Any:
        kind = raw.get("kind")
        if kind == "new_key_unmapped":
            if len(raw) > 1:
                raise EventError(
                    f"{sorted(set(raw) - {'kind'})[0]}: new_key_unmapped on the distributor is the "
                    "reference night as world.yaml defines it; it takes no parameters"
                )
            return "new_key_unmapped"
        data = {**raw, "kind": _DISTRIBUTOR_KINDS.get(kind, kind)}
        if "since_night" in data and isinstance(data["since_night"], int):
            data["since_night"] += first_night  # a scenario counts nights from its own first
        try:
            return Fault.model_validate(data)
        except pydantic.ValidationError as e:
            raise EventError(_problems(e, skip=0)) from None

    def check_night(self, events: Sequence[Any]) -> None:
        if "new_key_unmapped" in events and len(events) > 1:
            raise EventError(
                "new_key_unmapped: the distributor's reference night is played alone on its night"
            )

    def play_night(self, lw: LocalWorld, night: int, events: Sequence[Any]) -> NightResult:
        sf, coalesce = lw.snowflake, lw.coalesce_client()
        if "new_key_unmapped" in events:
            return self.world.play_reference_night(sf, coalesce, night)
        return self.world.play_night(sf, coalesce, night, faults=list(events))

    def repair(self, lw: LocalWorld, event: Any) -> None:
        if event == "new_key_unmapped":
            self.world.apply_region_map_fix(lw.snowflake)
        else:
            self.world.repair(lw.snowflake, lw.coalesce_client(), event)

    def is_benign(self, event: Any) -> bool:
        return event != "new_key_unmapped" and event.benign

    def persists(self, event: Any) -> bool:
        return event == "new_key_unmapped" or event.persists

    def targets(self, event: Any) -> list[str]:
        if event == "new_key_unmapped":
            names = [_ONHAND, "REGION_MAP"]
        elif event.kind in ("scheduler_skip", "replication_stalled"):
            return ["*"]
        elif event.kind.startswith("reference_row"):
            names = ["REGION_MAP"]
        elif event.kind == "node_failure":
            names = [event.node]
        elif event.kind == "unit_change" and event.column == "SHIPPED_QUANTITY":
            names = ["OE_ORDER_LINES_ALL"]
        else:
            names = [event.table or _ONHAND]
        return [self.node_key(n) for n in names]


class FileScenarioWorld(ScenarioWorld):
    """A world written as data (``world.yaml``); events are ``events.py``'s."""

    def __init__(self, path: Path):
        self.path = Path(path).resolve()
        self.world = GenericWorld(load_world_file(self.path), source=self.path)
        self.spec = self.world.spec
        self.name = self.spec.name
        self.history_nights = self.spec.history_nights

    def _hash(self) -> str:
        # The template is what the world's files, the generator and the product's watching code make of it.
        h = hashlib.sha256(_shaping_hash().encode())
        files = [self.path, self.spec.project, self.spec.context, self.spec.metrics]
        files += [_SCENARIO_CODE / name for name in ("generic.py", "world_file.py")]
        for f in files:
            h.update(f.read_bytes())
        return h.hexdigest()[:16]

    def clone(self, cache: Path, dest: Path) -> Path:
        """A copy of the template with ``history_nights`` played and watched, built once per content hash.

        Checking, building, pruning and copying all happen under one lock held throughout, so no other
        process can prune the template between its check and its copy. The folder is the world's own
        (building it never waits on another world's build); ``clone_world`` takes the folder's ``.lock``,
        a different file from this one, so holding both cannot deadlock.
        """
        with self._build_lock(cache):
            return clone_world(self._ensure_template(cache), dest)

    def template(self, cache: Path) -> Path:
        """The template's folder under ``cache``, built first if it is not (the suite builds each world's
        before its tests start; ``clone`` does the same on first use)."""
        with self._build_lock(cache):
            return self._ensure_template(cache)

    @contextmanager
    def _build_lock(self, cache: Path):
        folder = cache / "worlds" / self.name
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _ensure_template(self, cache: Path) -> Path:
        folder = cache / "worlds" / self.name
        prefix = f"{self.name}-{self.history_nights}-"
        template = folder / f"{prefix}{self._hash()}"
        # Only an older template of this world and history length is pruned, never anything else here.
        stale_name = re.compile(rf"^{re.escape(prefix)}[0-9a-f]{{16}}$")
        if not (template / "seeded.json").exists():
            shutil.rmtree(template, ignore_errors=True)
            with self.local_world(template) as lw:
                seed_history(self.world, lw, self.history_nights, self.env())
            for stale in folder.iterdir():
                if stale != template and stale_name.match(stale.name) and (stale / "seeded.json").exists():
                    shutil.rmtree(stale, ignore_errors=True)
        return template

    def local_world(self, root: Path) -> LocalWorld:
        return LocalWorld(root, project_file=self.spec.project)

    def env(self) -> dict[str, str]:
        return {
            "DW_CONTEXT_FILE": str(self.spec.context),
            "DW_METRICS_FILE": str(self.spec.metrics),
            "COALESCE_ENVIRONMENT_IDS": self.spec.environment_id,
            "SNOWFLAKE_DATABASE": self.database,
        }

    def parse_event(self, raw: dict[str, Any], first_night: int) -> Event:
        data = dict(raw)
        if isinstance(data.get("since_night"), int):
            data["since_night"] += first_night  # a scenario counts nights from its own first
        try:
            event = EVENTS.validate_python(data)
            event.check(self.world)
        except pydantic.ValidationError as e:
            # The first location is the event kind's model (a tagged union); the parameter follows.
            raise EventError(_problems(e, skip=1)) from None
        except ValueError as e:
            raise EventError(str(e)) from None
        return event

    def play_night(self, lw: LocalWorld, night: int, events: Sequence[Any]) -> NightResult:
        return self.world.play_night(lw.snowflake, lw.coalesce_client(), night, events)

    def repair(self, lw: LocalWorld, event: Any) -> None:
        with self.world.cursor(lw.snowflake) as cur:
            event.repair(self.world, cur, lw.coalesce_client())

    def is_benign(self, event: Any) -> bool:
        return event.benign

    def persists(self, event: Any) -> bool:
        return event.persists

    def targets(self, event: Any) -> list[str]:
        if event.kind in ("scheduler_skip", "replication_stalled"):
            return ["*"]
        return [self.node_key(n) for n in event.tables()]


def open_world(ref: str, relative_to: Path) -> ScenarioWorld:
    """``distributor`` (built in), or a world file's path relative to the scenario file."""
    if ref == DISTRIBUTOR:
        return DistributorScenarioWorld()
    return FileScenarioWorld((relative_to / ref).resolve())
