"""The distributor's first nights after its history, played once for every test that starts with them.

Many tests of the incident and of the approval gate start the same way on a copy of the distributor's seeded
world: an ordinary night (the first after the history) watched by a tick of the local daemon, then, for most,
the reference night played. Each opening is played here once (``played.clone_played``: the reference night
on a copy of the ordinary night's world) and kept as a stopped world with what the ordinary night's tick
showed; each such test starts from a private copy and goes on from there.

They stop before the reference night is watched: from that tick on, the fix's plan is bound to the resources
as configured when it was submitted (the Coalesce, Slack and Snowflake addresses, the key's path), and a copy
runs on its own ports and in its own folder, so a plan bound in the kept world is refused in every copy, as
it should be.

A kept world is played again after ``KEPT_SECONDS``: the Coalesce simulator's clock runs on in real time
from the night's start, and a copy much older than a test's own opening would start a test hours into the
night it expects to be minutes into.
"""

from __future__ import annotations

from pathlib import Path

from dw_local.daemon import LocalDaemon
from dw_local.played import clone_played
from dw_local.seeding import HISTORY_NIGHTS, clone_world, seeded_template
from dw_local.world import LocalWorld
from dw_local.worlds.distributor.generator import DistributorWorld

KEPT_SECONDS = 1800.0


def clone_ordinary_night(cache: Path, dest: Path) -> tuple[Path, list[bool]]:
    """A private copy at ``dest`` of the distributor's seeded world with its first night after the history
    played and watched by a tick; and the diagnosis runs that tick launched, by success."""
    cache = Path(cache).resolve()
    template = seeded_template(cache)

    def play(root: Path) -> list[bool]:
        with LocalWorld(clone_world(template, root)) as lw:
            daemon = LocalDaemon(lw)
            DistributorWorld().play_night(lw.snowflake, lw.coalesce_client(), HISTORY_NIGHTS)
            ordinary = daemon.tick()
        return [run.success for run in ordinary.diagnoses]

    return clone_played(cache / "ordinary-night", template.name, dest, play, max_age=KEPT_SECONDS)


def clone_reference_night(cache: Path, dest: Path) -> tuple[Path, list[bool]]:
    """``clone_ordinary_night``'s world with the reference night played after it, not yet watched."""
    cache = Path(cache).resolve()

    def play(root: Path) -> list[bool]:
        root, diagnosed = clone_ordinary_night(cache, root)
        with LocalWorld(root) as lw:
            DistributorWorld().play_reference_night(lw.snowflake, lw.coalesce_client())
        return diagnosed

    name = seeded_template(cache).name
    return clone_played(cache / "reference-night", name, dest, play, max_age=KEPT_SECONDS)
