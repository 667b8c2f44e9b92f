"""Where the seeded local world's template is cached, and a running copy of a file world's template. A module
of its own, not conftest: each test folder with a conftest.py would otherwise shadow `from conftest import ...`
for the others."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Seeding runs the nightly job 60 times; the template is reused across runs while its inputs are unchanged.
WORLD_CACHE = Path(os.environ.get("DW_WORLD_CACHE", REPO / ".dw" / "cache"))


@contextmanager
def running_copy(world: Any, tmp: Path) -> Iterator[Any]:
    """A running copy of ``world``'s seeded template (a ``ScenarioWorld``) under ``tmp``, its ``LocalWorld``;
    the process environment the world and its daemon set is restored afterwards."""
    environ = dict(os.environ)
    try:
        with world.local_world(world.clone(WORLD_CACHE.resolve(), tmp / "world")) as lw:
            yield lw
    finally:
        os.environ.clear()
        os.environ.update(environ)
