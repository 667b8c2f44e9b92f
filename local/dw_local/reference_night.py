"""The distributor's reference night, played once for every test that starts with it.

Many tests of the incident and of the approval gate start the same way on a copy of the distributor's seeded
world: an ordinary night (the first after the history) watched by a tick of the local daemon, then the
reference night played. That opening is played here once (``played.clone_played``) and kept as a stopped
world with what the ordinary night's tick showed; each such test starts from a private copy of it and watches
the reference night itself.

It stops before the reference night is watched: from that tick on, the fix's plan is bound to the resources
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


def clone_reference_night(cache: Path, dest: Path) -> tuple[Path, list[bool]]:
    """A private copy at ``dest`` of the distributor's seeded world with its ordinary night watched and the
    reference night played, not yet watched; and the diagnosis runs the ordinary night's tick launched, by
    success."""
    cache = Path(cache).resolve()
    template = seeded_template(cache)

    def play(root: Path) -> list[bool]:
        world = DistributorWorld()
        with LocalWorld(clone_world(template, root)) as lw:
            daemon = LocalDaemon(lw)
            world.play_night(lw.snowflake, lw.coalesce_client(), HISTORY_NIGHTS)
            ordinary = daemon.tick()
            world.play_reference_night(lw.snowflake, lw.coalesce_client())
        return [run.success for run in ordinary.diagnoses]

    return clone_played(cache / "reference-night", template.name, dest, play, max_age=KEPT_SECONDS)
