"""Seeding a world: its history nights played and watched (``seed_history``), played once and cached as a
template (``Template``), for the distributor and every world file alike.

History comes from actually running the nightly Coalesce job night after night, so seeding costs about a
minute. Tests and scenarios copy a seeded template instead: the template's folder name carries a hash of
every file that shapes the data, so a change to the world, the generator, the events or the simulator
reseeds it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import dw_dagster
from dw_local.snowflake_statements import CACHE_ENV
from dw_local.world import LocalWorld, WorldError

if TYPE_CHECKING:
    from dw_local.worlds.night_world import NightWorld

HISTORY_NIGHTS = 60
SHARED_TEMPLATE_SECONDS = 24 * 3600
"""How long a template of other code is kept beside the current one: checkouts of other branches may share
the cache (``DW_WORLD_CACHE``) and still be copying it."""
_LOCAL_DIR = Path(__file__).resolve().parent
_PRODUCT_DIR = Path(dw_dagster.__file__).resolve().parent
# Seeding runs the product's sensor and checks each night, so the code that writes their history shapes
# the template too (the context's lineage and join parsing, which the checks read, included); diagnosis,
# notifications and the rest do not. Every world plays the shared events
# (scenarios/*.py); the scenario files and world files under scenarios/ shape only their own worlds.
_SHAPING = [
    *(_LOCAL_DIR / name for name in (
        "worlds", "scenarios/*.py", "coalesce_sim", "snowflake_server.py", "snowflake_statements.py",
        "snowflake_rules.py", "snowflake_auth.py", "account_usage.py", "seeding.py", "daemon.py",
    )),
    *(_PRODUCT_DIR / name for name in (
        "checks", "context", "warehouse", "coalesce", "governance", "records", "sql.py", "config.py", "tags.py",
        "incidents/store.py", "app/coalesce_runs.py", "app/governance_review.py", "app/components.py",
        "app/checks.py", "app/reporting.py", "app/defs", "app/project.py", "app/settings.py",
    )),
]  # fmt: skip


def play_tonight(lw: LocalWorld):
    """Play the next night on a seeded, running world and watch it as the daemon would; returns its
    ``NightResult`` and the daemon's ``TickOutcome``."""
    from dw_local.daemon import LocalDaemon
    from dw_local.worlds.distributor.generator import DistributorWorld

    marker = lw.root / "seeded.json"
    played = json.loads(marker.read_text())["nights_played"]
    daemon = LocalDaemon(lw)
    tonight = DistributorWorld().play_night(lw.snowflake, lw.coalesce_client(), played)
    outcome = daemon.tick(at=tonight.watched_at)
    marker.write_text(json.dumps({"nights_played": played + 1}))
    return tonight, outcome


def seed_history(
    world: NightWorld, lw: LocalWorld, nights: int, env: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> None:  # fmt: skip
    """Installs ``world`` and plays ``nights`` nights, each watched as production would: the run sensor
    reports the night's Coalesce run and its checks record the night's totals and row counts (the baselines'
    history). Each night's tick runs on that night's business time, so the stored events read night by
    night. ``env`` points the product at the world's files (``ScenarioWorld.env``); ``progress`` hears one
    line a night ("night n of N")."""
    from dw_local.daemon import LocalDaemon, business_clock

    world.install(lw.snowflake)
    daemon = LocalDaemon(lw, env=env)
    # The sensors' first ticks start watching from here, on the world's calendar as every later tick is (an
    # hour before the first night's job): a tick at today's time would be the newest of the UI's history.
    with business_clock(world.scheduled_at(0) - timedelta(hours=1)):
        daemon.tick()
    coalesce = lw.coalesce_client()
    for night in range(nights):
        result = world.play_night(lw.snowflake, coalesce, night)
        outcome = daemon.tick(at=result.watched_at)  # the history's events carry the night's time
        if result.status != "completed" or outcome.errored() or outcome.runs_requested != 1:
            raise WorldError(
                f"{world.where}: history night {night}: Coalesce run {result.run_id} {result.status}, "
                f"{outcome.runs_requested} checks runs, errored {[c.check for c in outcome.errored()]}"
            )
        if progress:
            progress(
                f"  night {night + 1} of {nights} ({result.business_date}): run {result.status}, watched"
            )
    (lw.root / "seeded.json").write_text(json.dumps({"nights_played": nights}))


def shaping_files() -> dict[str, str]:
    """Each file that shapes a template (``_SHAPING``), by its name in its package, with its content's digest.

    Only source counts: ``__pycache__`` and hidden folders or files are what running the code leaves beside
    it (Dagster's ``LOCAL_FILESYSTEM`` state under ``app/defs/.local_defs_state``, a cache, an editor's
    file). Counted, they changed the key as soon as a test loaded the component tree from the checkout, and
    every template was seeded again halfway through the suite."""
    found = {}
    for base in _SHAPING:
        folder = base.is_dir()
        if "*" in base.name:
            files = sorted(base.parent.glob(base.name))
        else:
            files = sorted(base.rglob("*")) if folder else [base]
        for f in files:
            inside = f.relative_to(base).parts if folder else ()
            if not f.is_file() or "__pycache__" in inside or any(p.startswith(".") for p in inside):
                continue
            package = _LOCAL_DIR if f.is_relative_to(_LOCAL_DIR) else _PRODUCT_DIR
            found[str(f.relative_to(package.parent))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return found


def _shaping_hash() -> str:
    h = hashlib.sha256()
    for name, digest in shaping_files().items():
        h.update(name.encode())
        h.update(digest.encode())
    return h.hexdigest()[:16]


class Template:
    """A world's stopped, seeded copy under ``cache_dir/worlds/<name>/``: ``nights`` history nights played and
    watched (``seed_history``), built once per content hash (``_shaping_hash`` and the world's own ``files``).
    The distributor's by default; a world file's names its world, files, servers and ``env``.

    Checking, building and pruning happen under the folder's ``.build.lock``; ``clone`` holds it through
    the copy too, so no other process can prune the template between its check and its copy. Pruning also
    takes ``.lock``, which ``clone_world`` holds while copying, for callers that copy a ``path()``."""

    def __init__(
        self,
        cache_dir: Path,
        world: NightWorld | None = None,
        nights: int = HISTORY_NIGHTS,
        env: dict[str, str] | None = None,
        files: Sequence[Path] = (),
        servers: Callable[[Path], LocalWorld] = LocalWorld,
        progress: Callable[[str], None] | None = None,
    ):
        if world is None:
            from dw_local.worlds.distributor.generator import DistributorWorld

            world = DistributorWorld()
        self.world, self.nights, self.env, self.files, self.servers = world, nights, env, files, servers
        self.progress = progress
        self.folder = Path(cache_dir).resolve() / "worlds" / world.name
        # The servers of a world seeded or copied from this cache keep their statements' rewrites beside it
        # (snowflake_statements.RewriteStore): every copy's local Snowflake is a new process.
        os.environ.setdefault(CACHE_ENV, str(Path(cache_dir).resolve() / "snowflake"))

    def built(self) -> bool:
        """Whether the template matching the code is already in the cache (a copy, not a seeding, away)."""
        return (self._template / "seeded.json").exists()

    def path(self) -> Path:
        with self._build_lock():
            return self._ensure()

    def clone(self, dest: Path) -> Path:
        """A private copy of the template at ``dest``, to start with the world's servers."""
        with self._build_lock():
            return clone_world(self._ensure(), dest)

    @contextmanager
    def _build_lock(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    @cached_property
    def _template(self) -> Path:
        """The folder of the template matching the code, named by its content hash (hashed once: the
        shaping files are read whole)."""
        h = hashlib.sha256(_shaping_hash().encode())
        for f in self.files:
            h.update(Path(f).read_bytes())
        return self.folder / f"{self._prefix}{h.hexdigest()[:16]}"

    @property
    def _prefix(self) -> str:
        return f"{self.world.name}-{self.nights}-"

    def _ensure(self) -> Path:
        prefix, template = self._prefix, self._template
        if (template / "seeded.json").exists():
            return template
        shutil.rmtree(template, ignore_errors=True)
        with self.servers(template) as lw:
            seed_history(self.world, lw, self.nights, self.env, self.progress)
        # Each is about 100 MB: keep the one that matches the code (of this world and history length), and
        # others only while another checkout sharing the cache may still be using them (a day).
        stale_name = re.compile(rf"^{re.escape(prefix)}[0-9a-f]{{16}}$")
        with open(self.folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for stale in self.folder.iterdir():
                marker = stale / "seeded.json"
                if stale != template and stale_name.match(stale.name) and marker.exists():
                    if time.time() - marker.stat().st_mtime > SHARED_TEMPLATE_SECONDS:
                        shutil.rmtree(stale, ignore_errors=True)
        return template


def seeded_template(
    cache_dir: Path, nights: int = HISTORY_NIGHTS, progress: Callable[[str], None] | None = None
) -> Path:
    """The distributor's seeded template under ``cache_dir`` (``Template``); ``progress`` hears each night
    played if it has to be seeded."""
    return Template(cache_dir, nights=nights, progress=progress).path()


def clone_world(template: Path, dest: Path) -> Path:
    """A private copy of a seeded world's data, to start with ``LocalWorld(dest)``; taken under the cache's
    lock, so that no other process prunes the template while it is copied."""
    with open(template.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.copytree(template, dest, ignore=shutil.ignore_patterns("logs", "world.json", "state"))
    return dest
