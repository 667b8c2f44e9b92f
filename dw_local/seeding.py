"""Seeding a world: its history nights played and watched (``seed_history``, for the distributor and every
world file alike), and the distributor's 60 nights played once, then cached for tests.

History comes from actually running the nightly Coalesce job night after night, so seeding costs about a
minute. Tests copy a seeded template instead: the template's folder name carries a hash of every file
that shapes the data, so a change to the world, the generator or the simulator reseeds it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from dw_local.world import LocalWorld, WorldError

if TYPE_CHECKING:
    from dw_local.worlds.night_world import NightWorld

HISTORY_NIGHTS = 60
_LOCAL_DIR = Path(__file__).resolve().parent
# Seeding runs the product's sensor and checks each night, so the code that writes their history shapes
# the template too; diagnosis, notifications and the rest do not.
_SHAPING = [
    "worlds", "coalesce_sim", "snowflake_server.py", "snowflake_statements.py", "account_usage.py", "seeding.py", "daemon.py",
    "../dw_dagster/checks", "../dw_dagster/warehouse", "../dw_dagster/coalesce", "../dw_dagster/incidents/store.py",
    "../dw_dagster/coalesce_runs.py", "../dw_dagster/components.py", "../dw_dagster/defs", "../dw_dagster/project.py",
    "../dw_dagster/settings.py", "../dw_dagster/governance",
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


def seed_history(world: NightWorld, lw: LocalWorld, nights: int, env: dict[str, str] | None = None) -> None:
    """Installs ``world`` and plays ``nights`` nights, each watched as production would: the run sensor
    reports the night's Coalesce run and its checks record the night's totals and row counts (the baselines'
    history). Each night's tick runs on that night's business time, so the stored events read night by
    night. ``env`` points the product at the world's files (``ScenarioWorld.env``)."""
    from dw_local.daemon import LocalDaemon

    world.install(lw.snowflake)
    daemon = LocalDaemon(lw, env=env)
    daemon.tick()  # the sensor's first tick starts watching from here
    coalesce = lw.coalesce_client()
    for night in range(nights):
        result = world.play_night(lw.snowflake, coalesce, night)
        outcome = daemon.tick(at=result.watched_at)  # the history's events carry the night's time
        if result.status != "completed" or outcome.errored() or outcome.runs_requested != 1:
            raise WorldError(
                f"{world.where}: history night {night}: Coalesce run {result.run_id} {result.status}, "
                f"{outcome.runs_requested} checks runs, errored {[c.check for c in outcome.errored()]}"
            )
    (lw.root / "seeded.json").write_text(json.dumps({"nights_played": nights}))


def _shaping_hash() -> str:
    h = hashlib.sha256()
    for name in _SHAPING:
        base = (_LOCAL_DIR / name).resolve()
        files = sorted(base.rglob("*")) if base.is_dir() else [base]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(_LOCAL_DIR.parent)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def seeded_template(cache_dir: Path, nights: int = HISTORY_NIGHTS) -> Path:
    """A stopped, seeded world under ``cache_dir``, built once per content hash (safe across processes)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    template = cache_dir / f"distributor-{nights}-{_shaping_hash()}"
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (template / "seeded.json").exists():
            shutil.rmtree(template, ignore_errors=True)
            from dw_local.worlds.distributor.generator import DistributorWorld

            with LocalWorld(template) as lw:
                seed_history(DistributorWorld(), lw, nights)
            # Each is about 100 MB: keep only the one that matches the code.
            for stale in cache_dir.glob("distributor-*"):
                if stale != template and (stale / "seeded.json").exists():
                    shutil.rmtree(stale, ignore_errors=True)
    return template


def clone_world(template: Path, dest: Path) -> Path:
    """A private copy of a seeded world's data, to start with ``LocalWorld(dest)``; taken under the cache's
    lock, so that no other process prunes the template while it is copied."""
    with open(template.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.copytree(template, dest, ignore=shutil.ignore_patterns("logs", "world.json", "state"))
    return dest
