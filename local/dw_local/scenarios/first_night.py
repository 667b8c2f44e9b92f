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

from pathlib import Path

from dw_local.played import clone_played
from dw_local.scenarios.model import Scenario
from dw_local.scenarios.observe import Observed, Observer
from dw_local.scenarios.worlds import ScenarioWorld


def shareable(scenario: Scenario) -> bool:
    """Whether the scenario's first played night (an earlier night's or night 0) is a quiet one."""
    first = (scenario.file.before or scenario.file.nights)[0]
    return not first.events and not first.repair


def clone_after(world: ScenarioWorld, night: int, cache: Path, dest: Path) -> tuple[Path, Observed]:
    """A private copy at ``dest`` of ``world`` with its quiet ``night`` (the first after the history) played,
    and what that night showed; played the first time it is asked for (``played.clone_played``: this world's
    quiet nights kept by older code are pruned)."""
    cache = cache.resolve()
    template = world.template(cache)

    def play(root: Path) -> Observed:
        world.clone(cache, root)
        with world.local_world(root) as lw:
            return Observer(world, lw).play(night, [])

    return clone_played(cache / "first-night" / world.name, f"{template.name}-{night}", dest, play)
