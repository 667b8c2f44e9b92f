"""A world file's seeded template: built once per content hash, pruned only of its own older versions, and
copied under the lock that built it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dw_local.scenarios.worlds import FileScenarioWorld

pytestmark = pytest.mark.world
BILLING = Path(__file__).resolve().parent / "billing" / "world.yaml"


def test_a_build_prunes_only_older_templates_of_the_same_world_and_history(tmp_path):
    world = FileScenarioWorld(BILLING)
    folder = tmp_path / "cache" / "worlds" / world.name
    older = folder / f"billing-{world.history_nights}-0123456789abcdef"
    kept = [
        folder / f"billing-{world.history_nights}-0123456789abcdef-notes",  # not exactly a template's name
        folder / f"billing-{world.history_nights + 1}-0123456789abcdef",  # another history length
        folder / "billing-x",
    ]
    for path in [older, *kept]:
        path.mkdir(parents=True)
        (path / "seeded.json").write_text("{}")
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
