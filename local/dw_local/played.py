"""A world played once and kept: a stopped world in the cache beside what its play showed, from which each
user starts with a private copy (``clone_world``) instead of playing it again.

A kept world is keyed by its caller's name (the template it was played from, and what was played) and by
every file of the product and of the local world: a change to what detects, diagnoses or plays a night
plays it again, so a kept world is never older than the code that judges it. It is played under its folder's
lock, so processes running side by side (the suite's workers) play it once.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dw_dagster
import dw_local
from dw_local.seeding import clone_world

OBSERVED = "observed.pickle"
"""What the play returned, pickled beside the world it left."""


PACKAGES = (Path(dw_dagster.__file__).parent, Path(dw_local.__file__).parent)


@functools.cache
def code_hash(packages: tuple[Path, ...] = PACKAGES) -> str:
    """A digest of every file of ``packages`` (the product and the local world), names and contents."""
    h = hashlib.sha256()
    for package in packages:
        for f in sorted(package.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(package.parent)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def clone_played(
    folder: Path, name: str, dest: Path, play: Callable[[Path], Any], max_age: float | None = None
) -> tuple[Path, Any]:
    """A private copy at ``dest`` of the world ``play(root)`` leaves at the ``root`` it is given, and what
    ``play`` returned; played the first time it is asked for under ``folder`` (for this ``name`` and this
    code), or again once it is older than ``max_age`` seconds. Playing it prunes the worlds kept in
    ``folder`` by other code, which no request of this code can use; those of this code under other names
    (another night of the same world) stay, or requests for two names would play each other's worlds away.
    ``play`` may point the process's environment at its world: it is put back."""
    folder.mkdir(parents=True, exist_ok=True)
    played = folder / f"{name}-{code_hash()}"
    with open(folder / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = played / OBSERVED
        if not kept.exists() or (max_age is not None and time.time() - kept.stat().st_mtime > max_age):
            _play(play, played)
            for stale in folder.iterdir():
                if not stale.name.endswith(f"-{code_hash()}") and (stale / OBSERVED).exists():
                    shutil.rmtree(stale, ignore_errors=True)
        observed = pickle.loads(kept.read_bytes())
        return clone_world(played, dest), observed


def _play(play: Callable[[Path], Any], played: Path) -> None:
    shutil.rmtree(played, ignore_errors=True)
    building = Path(tempfile.mkdtemp(prefix="building-", dir=played.parent)) / "world"
    environ = dict(os.environ)
    try:
        observed = play(building)
        (building / OBSERVED).write_bytes(pickle.dumps(observed))
        building.rename(played)
    finally:
        os.environ.clear()
        os.environ.update(environ)
        shutil.rmtree(building.parent, ignore_errors=True)
