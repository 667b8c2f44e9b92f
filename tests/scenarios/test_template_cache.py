"""A world file's seeded template: built once per content hash, pruned only of its own older versions once
no other checkout sharing the cache can be using them (a day), and copied under the lock that built it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dw_local.scenarios.worlds import FileScenarioWorld
from dw_local.seeding import SHARED_TEMPLATE_SECONDS

pytestmark = pytest.mark.world
BILLING = Path(__file__).resolve().parent / "billing" / "world.yaml"


def test_a_build_prunes_only_older_templates_of_the_same_world_and_history(tmp_path):
    world = FileScenarioWorld(BILLING)
    folder = tmp_path / "cache" / "worlds" / world.name
    older = folder / f"billing-{world.history_nights}-0123456789abcdef"
    recent = (
        folder / f"billing-{world.history_nights}-fedcba9876543210"
    )  # another branch's, built an hour ago
    kept = [
        recent,
        folder / f"billing-{world.history_nights}-0123456789abcdef-notes",  # not exactly a template's name
        folder / f"billing-{world.history_nights + 1}-0123456789abcdef",  # another history length
        folder / "billing-x",
    ]
    for path in [older, *kept]:
        path.mkdir(parents=True)
        (path / "seeded.json").write_text("{}")
    day_ago = time.time() - SHARED_TEMPLATE_SECONDS - 60
    os.utime(older / "seeded.json", (day_ago, day_ago))
    hour_ago = time.time() - 3600
    os.utime(recent / "seeded.json", (hour_ago, hour_ago))
    dest = world.clone(tmp_path / "cache", tmp_path / "copy")
    template = world.template(tmp_path / "cache")
    assert template.parent == folder and template.name.startswith(f"billing-{world.history_nights}-")
    assert template != older and (template / "seeded.json").exists() and (dest / "seeded.json").exists()
    assert not older.exists()
    assert all(p.exists() for p in kept)
    # A second clone finds the template built: nothing is rebuilt or pruned.
    stamp = (template / "seeded.json").stat().st_mtime_ns
    world.clone(tmp_path / "cache", tmp_path / "copy2")
    assert (template / "seeded.json").stat().st_mtime_ns == stamp and all(p.exists() for p in kept)
