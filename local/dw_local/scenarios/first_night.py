"""A world's quiet first night, played once for every scenario that starts with it.

Nearly every scenario's first night is a quiet one (no events, nothing repaired) on a fresh copy of its
world's template: the same data, the same Coalesce run and the same checks for all of them, since a world is
deterministic from its seed. It is played here once per world through the same machinery (``Observer``),
kept as a stopped world beside what it showed, and each such scenario starts from a copy of it with that
night's observation, instead of playing it again.

The copy is keyed by the world's template and every file of the product and of the local world: a change to
what detects, diagnoses or plays a night plays the quiet night again, so the shared observation is never
older than the code that judges it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import dw_dagster
import dw_local
from dw_local.scenarios.model import Scenario
from dw_local.scenarios.observe import Observed, Observer
from dw_local.scenarios.worlds import ScenarioWorld
from dw_local.seeding import clone_world

OBSERVED = "observed.pickle"


def shareable(scenario: Scenario) -> bool:
    """Whether the scenario's first played night (an earlier night's or night 0) is a quiet one."""
    first = (scenario.file.before or scenario.file.nights)[0]
    return not first.events and not first.repair


@functools.cache
def _code_hash() -> str:
    h = hashlib.sha256()
    for package in (Path(dw_dagster.__file__).parent, Path(dw_local.__file__).parent):
        for f in sorted(package.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(package.parent)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def clone_after(world: ScenarioWorld, night: int, cache: Path, dest: Path) -> tuple[Path, Observed]:
    """A private copy at ``dest`` of ``world`` with its quiet ``night`` (the first after the history) played,
    and what that night showed; played the first time it is asked for."""
    cache = cache.resolve()
    template = world.template(cache)
    folder = cache / "first-night" / world.name
    folder.mkdir(parents=True, exist_ok=True)
    played = folder / f"{template.name}-{night}-{_code_hash()}"
    with open(folder / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (played / OBSERVED).exists():
            _play(world, night, cache, played)
            # Only this world's older quiet nights are pruned.
            for stale in folder.iterdir():
                if stale != played and (stale / OBSERVED).exists():
                    shutil.rmtree(stale, ignore_errors=True)
        observed = pickle.loads((played / OBSERVED).read_bytes())
        return clone_world(played, dest), observed


def _play(world: ScenarioWorld, night: int, cache: Path, played: Path) -> None:
    shutil.rmtree(played, ignore_errors=True)
    building = Path(tempfile.mkdtemp(prefix="building-", dir=played.parent)) / "world"
    environ = dict(os.environ)  # the local daemon points the process at the world; put it back
    try:
        world.clone(cache, building)
        with world.local_world(building) as lw:
            observed = Observer(world, lw).play(night, [])
        (building / OBSERVED).write_bytes(pickle.dumps(observed))
        building.rename(played)
    finally:
        os.environ.clear()
        os.environ.update(environ)
        shutil.rmtree(building.parent, ignore_errors=True)
